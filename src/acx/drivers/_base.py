"""The driver API (contracts E1, E2, H5, V2): a Driver opens Sessions; a Session runs commands.

Drivers implement the underscore methods (``_exec``, ``_put_archive``…); the public methods here
fix the semantics every provider shares, so the interpreter and the conformance suite
(:mod:`acx.testing`) see one behaviour:

* ``exec(argv, shell=False)`` takes a list; ``exec(cmd, shell=True)`` takes a string (E2).
* ``cwd`` defaults to the session workdir (``setup.workdir``); an explicit ``cwd`` wins (H5).
* Environment precedence, low → high: the session's public vars < ``exec(env=...)`` (internal
  defaults) < the variables of the current stage scope (:meth:`Session.env_scope`) (V2).
  Scopes live in a ContextVar keyed by session, so they are isolated per session and per async
  context and restored on success, failure and cancellation.
* ``timeout`` kills the command's whole process group *inside* the sandbox and returns
  ``timed_out=True`` (T3); cancelling the caller also kills it.
* stdout/stderr are capped at ``max_output_bytes`` each (``output_truncated=True`` when cut).

Every hook the interpreter or a component calls is a method here (abstract, or defaulted and
documented), so :mod:`acx.testing.driver_conformance` covers it:

* files (E1): ``write_bytes``/``read_bytes``/``upload_dir``/``download_dir``/``is_file``/``is_dir``
  (abstract); ``download_tree`` (artifact collection, A4/A5) and its ``supports_limited_download``
  flag; ``upload``/``download``/``write_text``/``read_text`` (derived);
* processes: ``kill_stray_processes`` (a phase boundary: nothing earlier commands started may run
  alongside the verifier, H3);
* network: ``set_network_policy`` (P4/P7), ``endpoint``;
* drivers: ``capabilities``/``probe`` (P7), ``prepare``, ``open``, ``sessions_discoverable`` with
  ``list_sessions``/``close_session`` (crash recovery, ``acx env``, ``acx gc``), ``end_run``.
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from acx.drivers._specs import DriverCapabilities, EnvironmentConfig
from acx.errors import DriverError
from acx.ir import EnvironmentSetup, NetworkPolicy, ResourceRequirements

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "CachedInstall",
    "Driver",
    "ExecResult",
    "OpenRequest",
    "Session",
    "SessionRecord",
]

DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024

#: session id → variables of the stage scope active in this async context.
_SCOPES: contextvars.ContextVar[Mapping[str, Mapping[str, str]]] = contextvars.ContextVar(
    "acx_env_scopes", default=types.MappingProxyType({})
)


class _PublicOnly:
    """Masks one session's stage variables in this async context; restores them on exit."""

    __slots__ = ("_session_id", "_token")

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._token: contextvars.Token[Mapping[str, Mapping[str, str]]] | None = None

    def __enter__(self) -> None:
        scopes = dict(_SCOPES.get())
        scopes.pop(self._session_id, None)
        self._token = _SCOPES.set(scopes)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _SCOPES.reset(self._token)
            self._token = None


class _EnvScope:
    """Sets the session's stage variables in the ContextVar; resets them on exit (class-based:
    cheaper than a generator context manager, entered several times per task)."""

    __slots__ = ("_session_id", "_token", "_variables")

    def __init__(self, session_id: str, variables: Mapping[str, str]) -> None:
        self._session_id = session_id
        self._variables = variables
        self._token: contextvars.Token[Mapping[str, Mapping[str, str]]] | None = None

    def __enter__(self) -> None:
        current = dict(_SCOPES.get())
        current[self._session_id] = {**current.get(self._session_id, {}), **self._variables}
        self._token = _SCOPES.set(current)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _SCOPES.reset(self._token)
            self._token = None


#: session id → the user commands run as in this async context (None: the sandbox's default).
_USERS: contextvars.ContextVar[Mapping[str, str | None]] = contextvars.ContextVar(
    "acx_user_scopes", default=types.MappingProxyType({})
)


class _UserScope:
    """Sets the user one session's commands run as in this async context; restores it on exit."""

    __slots__ = ("_session_id", "_token", "_user")

    def __init__(self, session_id: str, user: str | None) -> None:
        self._session_id = session_id
        self._user = user
        self._token: contextvars.Token[Mapping[str, str | None]] | None = None

    def __enter__(self) -> None:
        self._token = _USERS.set({**_USERS.get(), self._session_id: self._user})

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _USERS.reset(self._token)
            self._token = None


class ExecResult(msgspec.Struct, frozen=True, kw_only=True):
    returncode: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class OpenRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a driver needs to open one session; built by the interpreter from a plan."""

    session_id: str
    labels: dict[str, str] = {}
    setup: EnvironmentSetup = EnvironmentSetup()
    resources: ResourceRequirements | None = None
    #: Policy the sandbox starts with (baseline).
    network_policy: NetworkPolicy = NetworkPolicy()
    #: Resolved public variables for sandbox start-up (never stage variables, V2).
    startup_env: dict[str, str] = {}
    #: A directory with a Dockerfile to build when ``setup.image`` is unset (Harbor tasks).
    build_context: str | None = None
    #: Directory on the host for driver bookkeeping of this session (may be None).
    state_dir: str | None = None


class CachedInstall(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`Driver.cached_install` gives back: the image to open the attempt's sandbox from."""

    #: The derived image (the base image with the agent installed); open with it as ``setup.image``.
    image: str
    #: The full cache key (the harness's install key with the base image's digest).
    key: str
    #: True when the image already existed (another attempt or an earlier run installed it);
    #: False when this call ran the install.
    cached: bool


#: ``install(session)``: runs the agent's install in the throwaway sandbox; True = it succeeded
#: (its file system may be cached), False = it failed (its issues are the caller's to record).
Installer = Callable[["Session"], Awaitable[bool]]


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A sandbox as a driver lists it (``acx env list``, ``acx gc``, ``--resume``).

    A session may be listed as several records (a container and its networks); they share
    ``id``, which is what :meth:`Driver.close_session` takes.
    """

    #: The session id it was opened with (``OpenRequest.session_id``) when the driver knows it.
    id: str
    provider: str
    labels: dict[str, str] = {}
    state: str = "active"
    created_at: str | None = None
    #: What it is, for people (a container or directory name).
    name: str = ""
    #: Whether the acx process that opened it still runs on this host: ``False`` makes it an
    #: orphan ``acx gc`` removes; ``None`` when the driver cannot tell (never removed by gc).
    owner_alive: bool | None = None
    #: Kept on purpose (``keep_environment``, ``keep_workdir``): gc spares it unless told not to.
    kept: bool = False


class Session(ABC):
    """One open sandbox. Use ``async with`` or call :meth:`close` (idempotent)."""

    #: ``download_tree`` enforces ``exclude`` and the byte/entry limits *while* it copies, so an
    #: oversized or hostile tree never lands on the host disk. When False, the default
    #: ``download_tree`` copies the whole tree and the caller applies excludes and limits to the
    #: copy (the interpreter always re-checks members, links and limits, A4/A5).
    supports_limited_download: bool = False
    #: True when the sandbox was lost with the machine that held it (a cluster node died), not by
    #: anything the task did: the interpreter then runs the try again without consuming
    #: ``max_retries``, at most :attr:`Driver.max_infrastructure_losses` times per attempt.
    infrastructure_lost: bool = False
    #: Commands can run as a named user or uid of the sandbox (:meth:`user_scope`; Harbor's
    #: ``[agent].user``). A session without it refuses a scoped user rather than ignore it.
    supports_exec_user: bool = False

    def __init__(self, *, session_id: str, workdir: str | None, public_env: Mapping[str, str] | None = None):
        self.id = session_id
        self.workdir = workdir
        self.public_env: dict[str, str] = dict(public_env or {})
        self.closed = False
        #: What the driver could not honour when it opened the sandbox although planning allowed
        #: it (e.g. a storage limit the engine refused): recorded as warnings on the attempt.
        self.open_notes: list[str] = []

    # ---- env scopes (V2) -------------------------------------------------------------------
    def env_scope(self, variables: Mapping[str, str]) -> contextlib.AbstractContextManager[None]:
        """Stage variables for commands run in this async context on this session (a context
        manager: restored on exit, whether by success, failure or cancellation)."""
        return _EnvScope(self.id, variables)

    def public_scope(self) -> contextlib.AbstractContextManager[None]:
        """Commands run in this async context see the session's public variables only (V2:
        artifact collection, restores), whatever stage scope encloses them; restored on exit."""
        return _PublicOnly(self.id)

    def scoped_env(self) -> dict[str, str]:
        return dict(_SCOPES.get().get(self.id, {}))

    # ---- user scopes -----------------------------------------------------------------------
    def user_scope(self, user: str | None) -> contextlib.AbstractContextManager[None]:
        """Commands run in this async context on this session run as ``user`` (a name or uid of
        the sandbox; None: the sandbox's default user), restored on exit. Only sessions with
        :attr:`supports_exec_user` run a named user; on others :meth:`exec` refuses it."""
        return _UserScope(self.id, user)

    def current_user(self) -> str | None:
        """The user of the innermost :meth:`user_scope` in this async context, else None."""
        return _USERS.get().get(self.id)

    def effective_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        return {**self.public_env, **(env or {}), **self.scoped_env()}

    # ---- commands (E2) ---------------------------------------------------------------------
    async def exec(
        self,
        command: list[str] | str,
        *,
        shell: bool = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> ExecResult:
        """Run ``command`` in the sandbox and return its exit code and output (E2, H5, V2, T3).

        Raises :class:`DriverError` on a closed session, and when ``cwd`` does not exist in the
        sandbox (never a silent fallback to another directory); a missing executable is exit code
        127, not an exception. ``TypeError``/``ValueError`` for a malformed ``command``/``timeout``.
        """
        if self.closed:
            raise DriverError(f"session {self.id} is closed")
        if shell:
            if not isinstance(command, str):
                raise TypeError("exec(shell=True) takes a string command")
            argv = ["/bin/sh", "-c", command]
        else:
            if isinstance(command, str) or not all(isinstance(a, str) for a in command):
                raise TypeError("exec(shell=False) takes a list of strings; pass shell=True for a string")
            if not command:
                raise ValueError("exec needs a non-empty argv")
            argv = list(command)
        if timeout is not None and not (timeout > 0):
            raise ValueError("timeout must be positive or None")
        if not self.supports_exec_user and self.current_user() is not None:
            raise DriverError(
                f"session {self.id} cannot run commands as user {self.current_user()!r}",
                code="exec_user_unsupported",
            )
        return await self._exec(
            argv,
            cwd=cwd if cwd is not None else self.workdir,
            env=self.effective_env(env),
            timeout=timeout,
            stdin=stdin,
            max_output_bytes=max_output_bytes,
        )

    @abstractmethod
    async def _exec(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
        max_output_bytes: int,
    ) -> ExecResult:
        """The driver's half of :meth:`exec` (``argv`` already checked, ``env`` already merged).

        Contract (each a conformance check): a relative ``cwd`` is under :attr:`workdir`; a ``cwd``
        that does not exist raises :class:`DriverError`; an executable that does not exist returns
        127; stdout and stderr are captured separately, each cut at ``max_output_bytes``
        (``output_truncated``); ``stdin`` None means EOF at once; past ``timeout`` the command's
        whole process group is killed and ``timed_out=True`` returned promptly; cancelling the
        caller kills the command too."""

    # ---- files (E1) ------------------------------------------------------------------------
    @abstractmethod
    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` (relative: under :attr:`workdir`) with ``mode``, creating
        missing parent directories."""

    @abstractmethod
    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The file's bytes (a relative ``path`` is under :attr:`workdir`). Raises
        FileNotFoundError when ``path`` is missing, and :class:`DriverError` when the file is
        larger than ``max_bytes`` (never a silently truncated read)."""

    async def write_text(self, path: str, text: str) -> None:
        await self.write_bytes(path, text.encode("utf-8"))

    async def read_text(self, path: str) -> str:
        return (await self.read_bytes(path)).decode("utf-8", errors="replace")

    async def upload(self, local_path: str, remote_path: str) -> None:
        from pathlib import Path

        p = Path(local_path)
        if p.is_dir():
            await self.upload_dir(local_path, remote_path)
        else:
            await self.write_bytes(remote_path, p.read_bytes(), mode=p.stat().st_mode & 0o777)

    async def download(self, remote_path: str, local_path: str) -> None:
        from pathlib import Path

        if await self.is_dir(remote_path):
            await self.download_dir(remote_path, local_path)
            return
        data = await self.read_bytes(remote_path)
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        Path(local_path).write_bytes(data)

    @abstractmethod
    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        """Copy a host directory's contents into ``remote_dir`` (created; hidden files included)."""

    @abstractmethod
    async def download_dir(self, remote_dir: str, local_dir: str) -> None:
        """Copy ``remote_dir``'s contents into ``local_dir``; unsafe members are refused."""

    async def download_tree(
        self,
        remote: str,
        local: str,
        *,
        exclude: tuple[str, ...] | list[str] = (),
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> object:
        """Copy the file or directory ``remote`` to ``local`` (a directory's contents into
        ``local``; a file to the path ``local``), for artifact collection.

        With ``supports_limited_download`` a driver skips members matching ``exclude`` (GNU tar
        ``--exclude`` semantics) and raises ``ArchiveLimitError`` past ``max_bytes`` /
        ``max_entries`` while copying. This default copies whole, reads a file with
        ``max_bytes`` as its cap (raising ``ArchiveLimitError`` when it is larger), writes nothing
        for a file that itself matches ``exclude``, and leaves member excludes and the tree
        limits to the caller. Raises FileNotFoundError when ``remote`` is missing.
        """
        import posixpath
        from pathlib import Path

        from acx.drivers.transfer import ArchiveLimitError, is_excluded

        if await self.is_dir(remote):
            await self.download_dir(remote, local)
            return None
        if not await self.is_file(remote):
            raise FileNotFoundError(remote)
        target = Path(local)
        if is_excluded(posixpath.basename(remote.rstrip("/")), exclude):
            target.parent.mkdir(parents=True, exist_ok=True)
            return None
        data = await self.read_bytes(remote, max_bytes=max_bytes)
        if max_bytes is not None and len(data) > max_bytes:
            raise ArchiveLimitError(f"artifact {remote} exceeds the size limit")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return None

    @abstractmethod
    async def is_file(self, path: str) -> bool: ...

    @abstractmethod
    async def is_dir(self, path: str) -> bool: ...

    # ---- network ---------------------------------------------------------------------------
    async def set_network_policy(self, policy: NetworkPolicy) -> None:
        """Switch the live policy; drivers without dynamic switching raise CapabilityError."""
        from acx.errors import CapabilityError

        raise CapabilityError(
            f"environment driver of session {self.id} cannot switch network policy at run time",
            code="E0451",
            help="use evaluation_environment_mode = fresh or a driver with dynamic network policy",
        )

    async def endpoint(self, port: int) -> str:
        raise DriverError(f"session {self.id} exposes no endpoints")

    # ---- processes -------------------------------------------------------------------------
    async def kill_stray_processes(self) -> None:
        """Kill every process that earlier commands of this session left running (background
        jobs, ``setsid``/``nohup`` daemons), keeping the session usable; called at a phase
        boundary when no command of the session runs (before a verifier, H3). Raises
        :class:`DriverError` when something survives.

        The default does nothing, which is right only for a driver whose commands cannot outlive
        their ``exec`` (the fake driver's in-memory processes); a driver whose commands can must
        override it (the conformance check ``kill_stray_processes`` fails otherwise).
        """
        return None

    # ---- lifecycle -------------------------------------------------------------------------
    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self._close()

    @abstractmethod
    async def _close(self) -> None: ...

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        import trio

        with trio.CancelScope(shield=True):
            await self.close()


class Driver(ABC):
    """A sandbox provider. One instance per request; ``open`` may run concurrently.

    A driver sets ``id`` and ``config_class`` (an :class:`EnvironmentConfig` subclass whose fields
    are the provider's own params), implements :meth:`capabilities` and :meth:`open` (returning a
    :class:`Session` subclass), and overrides the defaulted hooks below only where the provider
    needs them. Errors: ``open`` raises :class:`DriverError` (or
    :class:`acx.errors.EnvironmentSetupError`) when no sandbox could be made; a session's methods
    raise :class:`DriverError` for what the sandbox refused (see :meth:`Session.exec` and
    :meth:`Session.read_bytes`), never a provider SDK's exception. ``docs/plugins.md`` has a
    skeleton; :mod:`acx.testing.driver_conformance` checks every contract.
    """

    id: ClassVar[str]
    config_class: ClassVar[type[EnvironmentConfig]]
    #: Whether ``list_sessions``/``close_session`` find this driver's sandboxes by themselves after a
    #: crash (labels, directories), reporting each by the session id it was opened with and
    #: honouring the ``{"acx.run_id": ...}`` filter. If not, the interpreter makes each session's
    #: journal record durable (a group commit) before opening it; if so, writing it through is
    #: enough. ``acx env list/close`` and ``acx gc`` go through every discoverable driver.
    sessions_discoverable: ClassVar[bool] = False
    #: How often one attempt may lose its sandbox with its infrastructure
    #: (:attr:`Session.infrastructure_lost`) and run again outside ``max_retries``; 0 for a
    #: driver whose sandboxes live on this machine (a cluster's ``runtime.cluster.max_node_losses``).
    max_infrastructure_losses: int = 0
    #: The defaults of ``runtime.provider_limits`` / ``runtime.env_open_qps`` for this driver's id
    #: when its class stands for its registry entry (a plugin; built-ins set them on the entry).
    default_concurrency: ClassVar[int] = 128
    default_open_qps: ClassVar[float] = 0.0

    def __init__(self, config: EnvironmentConfig | None = None) -> None:
        self.config = config if config is not None else self.config_class()

    @abstractmethod
    def capabilities(self) -> DriverCapabilities:
        """What this driver enforces on this machine; the planner refuses plans needing more (P7)."""

    @classmethod
    def probe(cls) -> DriverCapabilities:
        """Capabilities at planning time, without opening anything: the registry calls this when a
        driver's entry names no ``probe`` function (plugins, ``module:Class`` ids). The default
        builds an instance with the default config; override it when that is costly."""
        return cls(cls.config_class()).capabilities()

    @abstractmethod
    async def open(self, request: OpenRequest) -> Session: ...

    async def admit(self, request: OpenRequest) -> None:
        """Wait until the provider has room for ``request``'s sandbox (a cluster: a node with a
        free slot that meets its needs), holding that room for the :meth:`open` that follows at
        once. The interpreter calls it outside the environment's setup deadline, so queueing for
        capacity never times an attempt out. Default: nothing to wait for."""
        return None

    async def cached_install(self, request: OpenRequest, key: str, install: Installer) -> CachedInstall | None:
        """The image for ``request`` with an agent installed, built once per cache key (only on a
        driver whose :meth:`capabilities` say ``install_cache``).

        ``key`` is the harness's install key (what the install runs, uploads and sees); the driver
        adds the digest of the image ``request`` would start from, so a changed base image is a new
        key. When no image has the full key, the driver opens a throwaway sandbox like ``request``'s,
        calls ``install`` on it, and — only when it returns True — keeps its file system as the
        image (without the sandbox's start-up variables, labels or idle command); the sandbox is
        released either way. Concurrent calls with one key wait for the one install; after a
        failed one the next caller installs again. Returns None when the install failed.
        The default refuses: a driver without the capability never gets here from the interpreter."""
        from acx.errors import CapabilityError

        raise CapabilityError(
            f"environment driver {self.id!r} cannot cache installed agents",
            code="E0459",
            help="set the harness param install_cache = false, or use --env docker",
        )

    async def missing_images(self, images: Sequence[str]) -> list[str]:
        """Which of ``images`` this provider cannot give a sandbox here: not present and not
        obtainable (e.g. docker with ``pull: never``). Cluster placement sends a sandbox that needs
        an image only to nodes where it is not missing. Default: none (no images, or any is fine)."""
        return []

    async def prepare(self) -> list[str]:
        """Called once before a run uses this driver, before any run directory exists: raise
        :class:`acx.errors.EnvironmentSetupError` when the provider cannot serve (an engine that
        does not answer), so the run is refused up front (E0701, exit 2); a driver may also
        remove what crashed runs left behind (best effort). Returns notes for the user (what was
        removed). Nothing by default."""
        return []

    async def check_builds(self, contexts: Sequence[str]) -> None:
        """Called before a run, after :meth:`prepare`, with the build contexts (directories with a
        Dockerfile) the run's tasks build: raise a located :class:`acx.errors.AcxPlanError` for one
        this provider cannot build (a BuildKit-only feature without BuildKit), so the run is
        refused before it starts instead of failing task by task. Nothing by default (a provider
        that builds nothing, or finds out only when it builds)."""
        return None

    async def model_gateway_address(self) -> str | None:
        """The host address this driver's sandboxes reach the run's model gateway at; ``None`` =
        loopback (sandboxes that share the host's network, like host_process)."""
        return None

    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        """Sandboxes created by acx that still exist (open, crashed or kept), optionally only
        those whose labels include ``labels`` (at least ``acx.run_id`` is honoured). A driver that
        cannot discover its sandboxes returns ``[]`` and leaves ``sessions_discoverable`` False."""
        return []

    async def close_session(self, session_id: str) -> None:
        """Release a sandbox by the id ``list_sessions`` reports (``--resume``, ``acx env close``,
        ``acx gc``): everything it holds, processes included. Raises :class:`DriverError` with
        code ``session_not_found`` when there is no such sandbox; the default (a driver that
        cannot find sandboxes by id) raises it with code ``environment_failed``."""
        raise DriverError(f"driver {self.id} cannot close sessions by id")

    async def end_run(self, session_prefix: str, keep: frozenset[str] = frozenset()) -> None:
        """The run whose session ids start with ``session_prefix`` has ended (finished, failed or
        cancelled): release what its commands left that outlives its sessions, except those of the
        sessions in ``keep`` (kept on purpose). Nothing by default: a driver whose sessions own
        their processes (a container) has nothing left."""
        return None
