"""The ``docker`` environment driver: one container per session on a local Docker engine.

The docker SDK lives only here (and is imported lazily). Every blocking SDK call runs through
``trio.to_thread.run_sync`` under a :class:`trio.CapacityLimiter`; long-running command streams have
their own, larger limiter so many concurrent agents never starve short control calls.

What the driver guarantees (contracts E1, E2, H5, V2, P6, P7, T3):

* **Commands** run through a tiny POSIX ``sh`` wrapper that sets the cwd, feeds stdin from a file
  and tags the process environment with ``ACX_EXEC_ID``. A deadline (or cancellation of the caller)
  kills, from a second exec, every process carrying the tag *and their process groups* — so a
  command that ignores SIGTERM, forks children or calls ``setsid`` is gone, not just its client.
  A command that exits normally may leave background processes (harness daemons);
  :meth:`DockerSession.kill_stray_processes` kills everything but the container's own init session
  at a phase boundary (the Harbor runtime calls it before its verifier runs).
* **Builds** with ``pull: never`` first check that the Dockerfile's external images (``FROM``,
  ``COPY --from``) are local (:mod:`acx.drivers._docker_build`): the engine would pull them.
* **Files** move as tar archives (``put_archive`` / ``get_archive``); archives coming out of the
  container are extracted by :mod:`acx.drivers._docker_archive`, which refuses absolute, ``..``,
  escaping-link and device members.
* **Network policies**: ``public`` = a per-session bridge network; ``no-network`` = no interface but
  loopback; ``allowlist`` / ``denylist`` = the container alone on an internal network whose only
  peer is an enforcing egress proxy (:mod:`acx.drivers._docker_proxy`). All switch on the live
  container (connect / disconnect, policy file rewritten). Whatever cannot be enforced (GPUs,
  Windows) is refused — never a silent downgrade.
* **No debris**: everything created is labelled (``acx.session``, ``acx.pid``, ``acx.host``, the
  interpreter's run/task/attempt labels). :func:`sweep_orphans` removes objects whose creating
  process is gone (run automatically before a process opens its first sandbox); ``acx gc`` and
  ``acx env close`` build on the same helpers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import posixpath
import re
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import trio

from acx.drivers._base import (
    DEFAULT_MAX_OUTPUT_BYTES,
    Driver,
    ExecResult,
    OpenRequest,
    Session,
    SessionRecord,
)
from acx.drivers._docker_archive import (
    ArchiveLimitError,
    ExtractStats,
    directory_tar,
    read_single_file,
    safe_extract,
    single_file_tar,
)
from acx.drivers._docker_build import external_images
from acx.drivers._docker_proxy import ALLOW_FILE, PROXY_ALIAS, PROXY_PORT, PROXY_SOURCE, policy_file_bytes
from acx.drivers._specs import DockerConfig, DriverCapabilities, probe_docker
from acx.errors import CapabilityError, DriverError, EnvironmentSetupError
from acx.ir import NetworkPolicy

__all__ = [
    "LABEL_HOST",
    "LABEL_KEEP",
    "LABEL_MANAGED",
    "LABEL_PID",
    "LABEL_SESSION",
    "DockerDriver",
    "DockerSession",
    "close_objects",
    "docker_client",
    "engine_available",
    "list_objects",
    "sweep_orphans",
]

T = TypeVar("T")

LABEL_MANAGED = "acx.managed"
LABEL_SESSION = "acx.session"
LABEL_PID = "acx.pid"
LABEL_PID_START = "acx.pid_start"
LABEL_HOST = "acx.host"
LABEL_KIND = "acx.kind"
#: Set on sessions opened with keep_environment; gc leaves them alone unless asked.
LABEL_KEEP = "acx.keep"

#: Keeps the container alive without depending on `sleep infinity` (busybox lacks it).
_IDLE_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]

#: Runs every command: cwd, stdin from a file (removed once open), then exec the argv so the
#: command keeps the exec's pid (a session and process-group leader under runc).
_WRAPPER = r"""cwd=$1 stdin=$2; shift 2
if [ -n "$cwd" ]; then
  cd "$cwd" 2>/dev/null || { echo "acx-cwd-missing:$ACX_EXEC_ID" >&2; exit 126; }
fi
if [ -n "$stdin" ]; then exec 0<"$stdin"; rm -f "$stdin"; exec "$@"; fi
exec "$@" </dev/null"""

#: Kills every process tagged with ACX_EXEC_ID=$1 and its process group; repeats until none is left
#: (a fork racing the scan is caught by the next round).
_KILLER = r"""tag=$1 me=$$
for round in 1 2 3 4 5 6 7 8; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "ACX_EXEC_ID=$tag"; then
      s=$(cat "$d/stat" 2>/dev/null) || continue
      r=${s##*) }
      set -- $r
      if [ "$3" -gt 1 ] 2>/dev/null && [ "$3" != "$me" ]; then kill -9 -"$3" 2>/dev/null; fi
      kill -9 "$p" 2>/dev/null
      found=1
    fi
  done
  [ -z "$found" ] && break
  sleep 0.05
done
exit 0"""

#: Kills every process of the container except its init session: docker-init (PID 1) and the
#: container's main command share session 1, while every exec starts a session of its own (runc
#: calls setsid) and no process can ever join session 1 again — so this spares exactly the
#: container's own processes and this script, whatever the others did to their environment,
#: process group or session. Repeats until a round finds nothing (a fork racing the scan is caught
#: by the next round); exit 1 when something still runs after the last round. Shell built-ins
#: only (`read`, `kill`), plus `sleep` between late rounds.
_REAPER = r"""me=$$
{ read -r s < /proc/$me/stat; } 2>/dev/null || { echo "acx-reap: cannot read /proc" >&2; exit 2; }
r=${s##*) }; set -- $r; mine=$4
round=0
while [ "$round" -lt 60 ]; do
  round=$((round + 1)); found=0
  for d in /proc/[0-9]*; do
    { read -r s < "$d/stat"; } 2>/dev/null || continue
    r=${s##*) }; set -- $r
    [ "$1" = Z ] || [ "$1" = X ] || [ "$4" = 1 ] || [ "$4" = "$mine" ] && continue
    kill -9 "${d#/proc/}" 2>/dev/null; found=$((found + 1))
  done
  [ "$found" = 0 ] && exit 0
  [ "$round" -gt 3 ] && sleep 0.05
done
echo "acx-reap: $found process(es) still running" >&2
exit 1"""

_STATE_DIR = "/tmp/.acx"
_KILL_TIMEOUT = 15.0

# Go's os.FileMode bits as reported by the archive stat header.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


# ---- client and limiters -------------------------------------------------------------------------

_CLIENTS: dict[str | None, Any] = {}
#: Engines this process has already swept for orphans (see DockerDriver._sweep_once).
_SWEPT: set[str | None] = set()
_CLIENTS_LOCK = threading.Lock()


def docker_client(docker_host: str | None = None) -> Any:
    """A cached ``docker.DockerClient`` (blocking; call from a worker thread in async code)."""
    with _CLIENTS_LOCK:
        if docker_host in _CLIENTS:
            return _CLIENTS[docker_host]
    from docker.errors import DockerException

    import docker

    kwargs: dict[str, Any] = {"version": "auto", "timeout": 300, "max_pool_size": 128}
    try:
        client = docker.DockerClient(base_url=docker_host, **kwargs) if docker_host else docker.from_env(**kwargs)
    except DockerException as exc:
        where = docker_host or os.environ.get("DOCKER_HOST") or "local socket"
        raise EnvironmentSetupError(
            f"cannot reach the Docker engine ({where}): {_short(exc)}; "
            "start it (e.g. `bash scripts/setup-docker.sh`) or pick another --env",
            code="docker_unavailable",
        ) from exc
    with _CLIENTS_LOCK:
        _CLIENTS[docker_host] = client
    return client


def engine_available(docker_host: str | None = None) -> bool:
    """True when a Docker engine answers (cheap enough for `acx run` start-up)."""
    try:
        docker_client(docker_host).ping()
    except Exception:
        return False
    return True


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:300] if text else type(exc).__name__


def _host_name() -> str:
    return socket.gethostname()


def _proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    # A recycled pid is not the run that created the object.
    return start is None or _proc_start_time(pid) in (None, start)


def _sanitize(text: str, limit: int = 40) -> str:
    clean = re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-.") or "s"
    return clean[:limit].lower()


# ---- the driver ------------------------------------------------------------------------------------


class DockerDriver(Driver):
    id = "docker"
    config_class = DockerConfig
    sessions_discoverable = True  # every object carries acx.* labels

    def __init__(self, config: DockerConfig | None = None) -> None:
        super().__init__(config)
        self.config: DockerConfig
        self._api_limiter: trio.CapacityLimiter | None = None
        self._stream_limiter: trio.CapacityLimiter | None = None
        self._build_locks: dict[str, trio.Lock] = {}

    def capabilities(self) -> DriverCapabilities:
        return probe_docker()

    # -- thread plumbing --
    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._api_limiter is None:
            self._api_limiter = trio.CapacityLimiter(32)
        return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self._api_limiter)

    async def _stream(self, fn: Callable[[], T]) -> T:
        """Long blocking calls (command output, builds); abandoned on cancel, killed by the caller."""
        if self._stream_limiter is None:
            self._stream_limiter = trio.CapacityLimiter(512)
        return await trio.to_thread.run_sync(fn, limiter=self._stream_limiter, abandon_on_cancel=True)

    async def client(self) -> Any:
        return await self._call(docker_client, self.config.docker_host)

    async def _sweep_once(self) -> None:
        """Before this process opens its first sandbox, remove what crashed runs left behind.

        Once per process and engine; ``ACX_DOCKER_SWEEP=0`` turns it off. A failing sweep never
        blocks a run (``acx gc`` reports the same objects).
        """
        key = self.config.docker_host
        if key in _SWEPT or os.environ.get("ACX_DOCKER_SWEEP", "1") == "0":
            return
        _SWEPT.add(key)
        with contextlib.suppress(Exception):
            await self._call(sweep_orphans, key)

    # -- open --
    async def open(self, request: OpenRequest) -> Session:
        self._check_policy(request.network_policy)
        await self._sweep_once()
        if request.setup.os not in (None, "linux"):
            raise CapabilityError(
                f"the docker driver runs linux containers only, not setup.os={request.setup.os!r}",
                code="E0454",
                help="drop environment.os or use a provider with Windows sandboxes",
            )
        client = await self.client()
        labels = self._labels(request)
        budget = request.setup.build_timeout_seconds
        created: dict[str, str] = {}
        try:
            with trio.fail_after(budget) if budget else contextlib.nullcontext():
                image = await self._resolve_image(client, request, labels)
                session = await self._create(client, request, image, labels, created)
        except trio.TooSlowError:
            await self._discard(client, created)
            raise EnvironmentSetupError(
                f"environment {request.session_id} was not built and started within build_timeout_seconds={budget}",
                code="environment_start_timeout",
            ) from None
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._discard(client, created)
            raise
        return session

    def _labels(self, request: OpenRequest) -> dict[str, str]:
        labels = {**self.config.labels, **request.labels}
        labels[LABEL_MANAGED] = "docker"
        labels[LABEL_SESSION] = request.session_id
        labels.setdefault(LABEL_HOST, _host_name())
        if LABEL_PID not in labels:
            labels[LABEL_PID] = str(os.getpid())
        if labels[LABEL_PID] == str(os.getpid()) and labels.get(LABEL_HOST) == _host_name():
            start = _proc_start_time(os.getpid())
            if start:
                labels[LABEL_PID_START] = start
        return labels

    def _check_policy(self, policy: NetworkPolicy) -> None:
        caps = self.capabilities()
        if policy.network_mode not in caps.network_modes:
            reason = caps.unsupported_reasons.get(policy.network_mode, "not supported")
            raise CapabilityError(
                f"the docker driver cannot enforce network_mode={policy.network_mode!r}: {reason}",
                code="E0452",
                help="use network_mode public, no-network, allowlist or denylist with --env docker",
            )

    async def _resolve_image(self, client: Any, request: OpenRequest, labels: Mapping[str, str]) -> str:
        from docker.errors import ImageNotFound

        image = request.setup.image
        if image is None:
            if request.build_context is None:
                raise EnvironmentSetupError(
                    f"environment {request.session_id} has no image: set environment.setup.image "
                    "or give the task an environment/Dockerfile",
                    code="environment_no_image",
                )
            return await self._build(client, Path(request.build_context))
        if self.config.pull == "missing":
            try:
                await self._call(client.images.get, image)
            except ImageNotFound:
                await self._call(client.images.pull, image, platform=self.config.platform)
        # With pull=never a missing image surfaces from create_container (one API call saved).
        return image

    async def _build(self, client: Any, context: Path) -> str:
        dockerfile = context / "Dockerfile"
        if not dockerfile.is_file():
            raise EnvironmentSetupError(f"build context {context} has no Dockerfile", code="environment_no_image")
        tag = f"acx-build/{_context_digest(context)}:latest"
        lock = self._build_locks.setdefault(tag, trio.Lock())
        async with lock:
            from docker.errors import ImageNotFound

            try:
                await self._call(client.images.get, tag)
                return tag
            except ImageNotFound:
                pass
            if self.config.pull == "never":
                await self._check_build_images(client, dockerfile)

            def build() -> None:
                stream = client.api.build(
                    path=str(context),
                    tag=tag,
                    rm=True,
                    forcerm=True,
                    pull=False,
                    decode=True,
                    labels={LABEL_MANAGED: "docker"},
                    platform=self.config.platform,
                )
                for chunk in stream:
                    if "error" in chunk:
                        raise EnvironmentSetupError(
                            f"building {context} failed: {str(chunk['error']).strip()[:500]}",
                            code="environment_build_failed",
                        )

            await self._stream(build)
        return tag

    async def _check_build_images(self, client: Any, dockerfile: Path) -> None:
        """``pull: never``: the images a build would fetch (``FROM``, ``COPY --from``) must be local.

        The engine pulls an absent base image even with ``pull=False``; refusing first keeps the
        promise that acx never contacts a registry unless ``pull: missing``.
        """
        from docker.errors import APIError, ImageNotFound

        text = await trio.to_thread.run_sync(functools.partial(dockerfile.read_text, "utf-8", "replace"))
        images, _unresolved = external_images(text)  # unresolved ones fail the build or are local
        missing: list[str] = []
        for image in images:
            try:
                await self._call(client.images.get, image)
            except ImageNotFound:
                missing.append(image)
            except APIError:
                pass  # e.g. an invalid reference: the build reports it precisely
        if missing:
            names = ", ".join(repr(m) for m in missing)
            raise EnvironmentSetupError(
                f"{dockerfile} needs image(s) {names}, not present on the Docker engine; "
                "acx does not pull (docker param `pull` is `never`)",
                code="image_not_found",
                help="build or load the image(s) first (e.g. `docker load`), or set environment params `pull: missing`",
            )

    async def _create(
        self, client: Any, request: OpenRequest, image: str, labels: dict[str, str], created: dict[str, str]
    ) -> DockerSession:
        suffix = uuid.uuid4().hex[:8]
        name = f"acx-{_sanitize(request.session_id)}-{suffix}"
        mode = request.network_policy.network_mode
        network: str | None = None
        if mode == "public":
            network = await self._create_network(client, name, labels)
            created["network"] = network
        host_config = client.api.create_host_config(
            network_mode=network or "none",
            init=True,
            cap_add=list(self.config.cap_add) or None,
            **_resource_kwargs(request),
        )
        # The idle loop replaces the image's ENTRYPOINT too (an `ENTRYPOINT ["python"]` image would
        # otherwise exit at once); a configured `command` keeps the image's entrypoint.
        idle = self.config.command is None
        from docker.errors import ImageNotFound

        try:
            container = await self._call(
                client.api.create_container,
                image,
                command=None if idle else self.config.command,
                entrypoint=_IDLE_COMMAND if idle else None,
                name=name,
                labels={**labels, LABEL_KIND: "session"},
                environment={k: v for k, v in request.startup_env.items()},
                working_dir=request.setup.workdir,
                host_config=host_config,
                detach=True,
                platform=self.config.platform,
            )
        except ImageNotFound:
            raise EnvironmentSetupError(
                f"image {image!r} is not present on the Docker engine and acx does not pull by default",
                code="image_not_found",
                help="build or load the image first, or set environment params `pull: missing`",
            ) from None
        cid = container["Id"]
        created["container"] = cid
        await self._call(client.api.start, cid)
        workdir = request.setup.workdir or await self._call(_image_workdir, client, image)
        session = DockerSession(
            driver=self,
            client=client,
            container_id=cid,
            name=name,
            network=network,
            mode=mode,
            session_id=request.session_id,
            workdir=workdir,
            public_env=request.startup_env,
            image=image,
            labels=labels,
        )
        if mode in ("allowlist", "denylist"):
            try:
                await session.set_network_policy(request.network_policy)
            finally:
                created.update(session.created_objects())
        return session

    async def _create_network(
        self, client: Any, name: str, labels: Mapping[str, str], *, internal: bool = False
    ) -> str:
        await self._call(
            client.api.create_network,
            name,
            driver="bridge",
            internal=internal,
            labels={**labels, LABEL_KIND: "network"},
        )
        return name

    async def _discard(self, client: Any, created: Mapping[str, str]) -> None:
        for key in ("container", "proxy"):
            if key in created:
                await self._call(_remove_container, client, created[key])
        for key in ("network", "internal"):
            if key in created:
                await self._call(_remove_network, client, created[key])

    # -- inventory --
    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        client = await self.client()
        return await self._call(list_objects, client, labels=labels)

    async def close_session(self, session_id: str) -> None:
        client = await self.client()
        removed = await self._call(close_objects, client, session_id=session_id)
        if not removed:
            raise DriverError(f"no docker environment with session id {session_id!r}", code="session_not_found")


def _resource_kwargs(request: OpenRequest) -> dict[str, Any]:
    res = request.resources
    if res is None:
        return {}
    if res.gpu or res.gpu_type:
        raise CapabilityError(
            "the docker driver does not allocate GPUs", code="E0453", help="drop resources.gpu / gpu_type"
        )
    kwargs: dict[str, Any] = {}
    if res.cpu is not None:
        kwargs["nano_cpus"] = int(res.cpu * 1e9)
    if res.memory_mb is not None:
        kwargs["mem_limit"] = f"{int(res.memory_mb)}m"
        kwargs["memswap_limit"] = f"{int(res.memory_mb)}m"
    return kwargs


def _context_digest(context: Path) -> str:
    """Content hash of a build context (paths, modes, bytes) → a stable, cacheable image tag."""
    digest = hashlib.sha256()
    for path in sorted(context.rglob("*")):
        rel = path.relative_to(context).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"L" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(oct(path.stat().st_mode & 0o777).encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


# ---- sessions ---------------------------------------------------------------------------------------


class _Transfer:
    """Shared between a transfer's worker thread and the trio task that may abandon it."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.responses: list[Any] = []

    def abort(self) -> None:
        self.cancel.set()
        for res in self.responses:
            with contextlib.suppress(Exception):
                res.close()


class _Output:
    """Caps each stream at ``limit`` bytes while still draining it (a full pipe would block)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.truncated = False

    def add(self, out: bytes | None, err: bytes | None) -> None:
        for chunk, buf in ((out, self.stdout), (err, self.stderr)):
            if not chunk:
                continue
            room = self.limit - len(buf)
            if len(chunk) > room:
                self.truncated = True
                chunk = chunk[: max(room, 0)]
            buf.extend(chunk)


class DockerSession(Session):
    def __init__(
        self,
        *,
        driver: DockerDriver,
        client: Any,
        container_id: str,
        name: str,
        network: str | None,
        mode: str,
        session_id: str,
        workdir: str | None,
        public_env: Mapping[str, str] | None,
        image: str,
        labels: Mapping[str, str],
    ) -> None:
        super().__init__(session_id=session_id, workdir=workdir, public_env=public_env)
        self.driver = driver
        self.client = client
        self.api = client.api
        self.container_id = container_id
        self.name = name
        self.image = image
        self.labels = {k: v for k, v in labels.items() if k != LABEL_KIND}
        #: The session's bridge network (public egress; also the proxy's uplink).
        self.network = network
        #: The internal network of `allowlist` (the container and the proxy only).
        self.internal_network: str | None = None
        self.proxy_id: str | None = None
        self.network_mode = mode
        #: Where the container is attached: "bridge", "internal", "none" or None (loopback only).
        self._on: str | None = "bridge" if mode == "public" else "none"
        #: Proxy variables injected into every command while `allowlist` is active.
        self._proxy_env: dict[str, str] = {}
        self._policy_lock = trio.Lock()
        #: ``download_tree`` enforces excludes and byte/entry limits while it extracts (the
        #: artifact collector uses it instead of a plain ``download_dir``).
        self.supports_limited_download = True

    # -- commands --
    async def _exec(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> ExecResult:
        tag = uuid.uuid4().hex
        stdin_path = ""
        if stdin is not None:
            stdin_path = f"{_STATE_DIR}/{tag}.stdin"
            await self.write_bytes(stdin_path, stdin, mode=0o600)
        env = {**self._proxy_env, **env}
        environment = [f"{k}={v}" for k, v in env.items()] + [f"ACX_EXEC_ID={tag}"]
        from docker.errors import APIError

        try:
            created = await self.driver._call(
                self.api.exec_create,
                self.container_id,
                ["/bin/sh", "-c", _WRAPPER, "acx-exec", self._abs(cwd) if cwd else "", stdin_path, *argv],
                stdout=True,
                stderr=True,
                environment=environment,
            )
        except APIError as exc:
            # e.g. the container died (OOM-killed, removed by `acx env close`): a driver failure.
            await self._raise_if_stopped()
            raise DriverError(f"cannot run a command in session {self.id}: {_short(exc)}", code="exec_failed") from exc
        exec_id = created["Id"]
        out = _Output(max_output_bytes)
        timed_out = await self._run_stream(exec_id, tag, out, timeout)
        code = await self.driver._call(_exit_code, self.api, exec_id)
        if not timed_out and code in (None, 137):
            # Killed by a signal acx did not send, or no exit recorded: was it the sandbox itself
            # (killed from outside, OOM-killed, removed), or its memory limit?
            await self._raise_if_stopped(settle=1.0)
            if code == 137 and await self._oom_killed():
                out.add(None, b"\n[acx: the sandbox reached its memory limit; a process was OOM-killed]\n")
        if code == 126 and f"acx-cwd-missing:{tag}".encode() in out.stderr:
            raise DriverError(f"working directory {cwd} does not exist in session {self.id}", code="cwd_missing")
        if timed_out:
            # Same convention as host_process: killed at the deadline → -SIGKILL; a command that
            # exited on its own just as the deadline passed → 124 (like timeout(1)).
            code = -9 if code in (None, 137) else (124 if code >= 0 else code)
        return ExecResult(
            returncode=code if code is not None else -1,
            stdout=out.stdout.decode("utf-8", errors="replace"),
            stderr=out.stderr.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            output_truncated=out.truncated,
        )

    async def _run_stream(self, exec_id: str, tag: str, out: _Output, timeout: float | None) -> bool:
        """Pump the exec's output; on deadline or cancellation kill the tagged processes.

        Returns whether the deadline passed.
        """
        done = trio.Event()
        state = {"exited": False}

        def pump() -> None:
            for chunk_out, chunk_err in self.api.exec_start(exec_id, stream=True, demux=True):
                out.add(chunk_out, chunk_err)

        failure: list[BaseException] = []

        async def runner() -> None:
            try:
                await self.driver._stream(pump)
                state["exited"] = True
            except Exception as exc:  # the engine connection broke: a driver failure, below
                failure.append(exc)
            finally:
                done.set()

        timed_out = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runner)
                with trio.move_on_after(timeout if timeout is not None else float("inf")):
                    await done.wait()
                if not done.is_set():
                    timed_out = True
                    with trio.CancelScope(shield=True):
                        await self._kill(tag)
                        # The stream closes once the processes are gone; keep what they printed.
                        with trio.move_on_after(5):
                            await done.wait()
                nursery.cancel_scope.cancel()
        finally:
            if not state["exited"]:
                # Cancelled by the caller (or the stream broke): the command must not outlive us.
                with trio.CancelScope(shield=True):
                    await self._kill(tag)
        if failure and not timed_out:
            raise DriverError(
                f"lost the output stream of a command in session {self.id}: {_short(failure[0])}",
                code="exec_failed",
            ) from failure[0]
        return timed_out

    async def _kill(self, tag: str) -> None:
        with trio.move_on_after(_KILL_TIMEOUT):
            try:
                killer = await self.driver._call(
                    self.api.exec_create,
                    self.container_id,
                    ["/bin/sh", "-c", _KILLER, "acx-kill", tag],
                    stdout=True,
                    stderr=True,
                )
                await self.driver._call(self.api.exec_start, killer["Id"])
            except Exception:  # the container may already be gone: nothing left to kill
                return

    async def _container_state(self) -> dict[str, Any]:
        from docker.errors import APIError

        try:
            info = await self.driver._call(self.api.inspect_container, self.container_id)
        except APIError:  # removed altogether
            return {"Running": False, "Status": "removed"}
        return dict(info.get("State") or {})

    async def _raise_if_stopped(self, settle: float = 0.0) -> None:
        """A clear error when the container itself is gone (killed from outside, OOM, removed).

        ``settle``: how long to watch for the engine to record the stop — a command's stream can
        end before the container's state says it exited.
        """
        deadline = trio.current_time() + settle
        while True:
            state = await self._container_state()
            if not state.get("Running", True) or trio.current_time() >= deadline:
                break
            await trio.sleep(0.05)
        if state.get("Running", True):
            return
        why = (
            "it ran out of memory (OOM-killed)"
            if state.get("OOMKilled")
            else f"it was stopped from outside ({state.get('Status', 'not running')})"
        )
        raise DriverError(f"the sandbox of session {self.id} is gone: {why}", code="sandbox_stopped")

    async def _oom_killed(self) -> bool:
        return bool((await self._container_state()).get("OOMKilled"))

    async def kill_stray_processes(self) -> None:
        """Kill every process left in the container by earlier commands (phase boundary).

        Everything outside the container's init session dies with SIGKILL — background jobs,
        ``setsid``/``nohup`` children, processes that dropped ``ACX_EXEC_ID`` with ``env -i`` —
        while docker-init and the container's main command survive. Runs as root, so processes
        that changed user are caught too. Raises :class:`DriverError` when something survives.
        """
        from docker.errors import APIError

        try:
            created = await self.driver._call(
                self.api.exec_create,
                self.container_id,
                ["/bin/sh", "-c", _REAPER, "acx-reap"],
                stdout=True,
                stderr=True,
                user="0",
            )
            output = await self.driver._call(self.api.exec_start, created["Id"])
            code = await self.driver._call(_exit_code, self.api, created["Id"])
        except APIError as exc:
            await self._raise_if_stopped()
            raise DriverError(
                f"cannot stop the processes left in session {self.id}: {_short(exc)}", code="exec_failed"
            ) from exc
        if code != 0:
            text = output.decode("utf-8", errors="replace") if isinstance(output, bytes) else str(output)
            raise DriverError(
                f"could not stop the processes left in session {self.id} (exit {code}): {text.strip()[:300]}",
                code="process_cleanup_failed",
            )

    # -- files --
    def _abs(self, path: str) -> str:
        if path.startswith("/"):
            return posixpath.normpath(path)
        return posixpath.normpath(posixpath.join(self.workdir or "/", path))

    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        target = self._abs(path)
        archive = single_file_tar(target.lstrip("/"), data, mode)
        await self.driver._call(self._put, "/", archive)

    def _put(self, where: str, data: Any) -> None:
        from docker.errors import APIError

        try:
            ok = self.api.put_archive(self.container_id, where, data)
        except APIError as exc:
            raise DriverError(f"upload into {self.id} failed: {_short(exc)}", code="transfer_failed") from exc
        if not ok:
            raise DriverError(f"upload into {self.id} failed", code="transfer_failed")

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        target = self._abs(path)

        def work(transfer: _Transfer) -> bytes:
            # One GET per hop: the archive response carries the path's stat in a header, so
            # symlinks, directories and oversize files are handled before the body is read.
            current = target
            for _ in range(16):
                with self._open_archive(current, transfer) as (res, st):
                    mode = int(st.get("mode", 0))
                    if mode & _MODE_SYMLINK:
                        current = _link_target(current, str(st.get("linkTarget") or ""))
                        continue
                    if mode & _MODE_DIR:
                        raise IsADirectoryError(path)
                    size = int(st.get("size", 0))
                    if max_bytes is not None and size > max_bytes:
                        raise ArchiveLimitError(f"{path} has {size} bytes, more than the limit of {max_bytes}")
                    with self._spool(res, current, None, transfer) as spool:
                        return read_single_file(spool, max_bytes=max_bytes)[0]
            raise DriverError(f"too many levels of symbolic links at {path}", code="transfer_failed")

        return await self._abandonable(work)

    @contextlib.contextmanager
    def _open_archive(self, path: str, transfer: _Transfer | None) -> Iterator[tuple[Any, dict[str, Any]]]:
        """GET the archive of ``path`` (streamed) with its stat; always released afterwards."""
        from docker.errors import APIError, NotFound
        from docker.utils import decode_json_header

        res = self.api._get(
            self.api._url("/containers/{0}/archive", self.container_id), params={"path": path}, stream=True
        )
        try:
            if transfer is not None:
                transfer.responses.append(res)
            try:
                self.api._raise_for_status(res)
            except NotFound:
                raise FileNotFoundError(path) from None
            except APIError as exc:
                raise DriverError(f"download of {path} failed: {_short(exc)}", code="transfer_failed") from exc
            header = res.headers.get("X-Docker-Container-Path-Stat")
            yield res, (decode_json_header(header) if header else {})
        finally:
            # An unread archive stream would hold up the container's removal.
            res.close()

    async def _abandonable(self, fn: Callable[[_Transfer], T]) -> T:
        """Run a transfer in a worker thread that a deadline or cancellation can walk away from.

        On cancellation the transfer's HTTP response is closed from here (unblocking the thread
        and aborting the engine's side — an unread archive stream would otherwise hold up the
        container's removal), and the thread stops at its next check.
        """
        transfer = _Transfer()
        try:
            return await self.driver._stream(functools.partial(fn, transfer))
        except BaseException:
            transfer.abort()
            raise

    def _fetch(self, path: str, max_raw: int | None, transfer: _Transfer | None = None) -> IO[bytes]:
        """The container's tar of ``path`` in a spooled temp file (bounded by ``max_raw`` bytes)."""
        with self._open_archive(path, transfer) as (res, _st):
            return self._spool(res, path, max_raw, transfer)

    def _spool(self, res: Any, path: str, max_raw: int | None, transfer: _Transfer | None) -> IO[bytes]:
        spool = tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024)  # noqa: SIM115 - returned open
        try:
            total = 0
            for chunk in res.iter_content(chunk_size=1024 * 1024, decode_unicode=False):
                if transfer is not None and transfer.cancel.is_set():
                    raise DriverError(f"download of {path} abandoned", code="transfer_cancelled")
                total += len(chunk)
                if max_raw is not None and total > max_raw:
                    raise ArchiveLimitError(f"archive of {path} exceeds {max_raw} bytes")
                spool.write(chunk)
        except BaseException:
            spool.close()
            if transfer is not None and transfer.cancel.is_set():
                raise DriverError(f"download of {path} abandoned", code="transfer_cancelled") from None
            raise
        spool.seek(0)
        return spool

    def _stat(self, path: str) -> dict[str, Any] | None:
        from docker.utils import decode_json_header

        res = self.api.head(self.api._url("/containers/{0}/archive", self.container_id), params={"path": path})
        if res.status_code == 404:
            return None
        self.api._raise_for_status(res)
        header = res.headers.get("X-Docker-Container-Path-Stat")
        return decode_json_header(header) if header else None

    async def _resolve(self, path: str) -> tuple[str, dict[str, Any]] | None:
        """``path`` with symlinks followed (docker's archive API does not follow the last one),
        and its stat; None when it does not exist."""
        for _ in range(16):
            st = await self.driver._call(self._stat, path)
            if st is None:
                return None
            if not (int(st.get("mode", 0)) & _MODE_SYMLINK):
                return path, st
            path = _link_target(path, str(st.get("linkTarget") or ""))
        raise DriverError(f"too many levels of symbolic links at {path}", code="transfer_failed")

    async def _mode(self, path: str) -> int | None:
        resolved = await self._resolve(self._abs(path))
        return None if resolved is None else int(resolved[1].get("mode", 0))

    async def is_file(self, path: str) -> bool:
        mode = await self._mode(path)
        return mode is not None and not (mode & _MODE_TYPE)

    async def is_dir(self, path: str) -> bool:
        mode = await self._mode(path)
        return mode is not None and bool(mode & _MODE_DIR)

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        target = self._abs(remote_dir)
        arc_root = target.lstrip("/") or "."
        archive = await trio.to_thread.run_sync(directory_tar, Path(local_dir), arc_root)
        try:
            await self.driver._call(self._put, "/", archive)
        finally:
            archive.close()

    async def download_dir(
        self,
        remote_dir: str,
        local_dir: str,
        *,
        exclude: tuple[str, ...] | list[str] = (),
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> None:
        await self.download_tree(remote_dir, local_dir, exclude=exclude, max_bytes=max_bytes, max_entries=max_entries)

    async def download_tree(
        self,
        remote: str,
        local: str,
        *,
        exclude: tuple[str, ...] | list[str] = (),
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> ExtractStats:
        """Copy a remote file or directory to ``local`` with safe extraction and limits."""
        # A symlinked source is followed (like the file helpers); links *inside* it are checked.
        resolved = await self._resolve(self._abs(remote))
        if resolved is None:
            raise FileNotFoundError(remote)
        path, st = resolved
        is_dir = bool(int(st.get("mode", 0)) & _MODE_DIR)
        max_raw = None
        if max_bytes is not None:
            # Tar framing adds headers and padding per entry on top of the content bytes.
            max_raw = max_bytes + 4096 * (max_entries or 100_000) + 1024 * 1024
        dest = Path(local)
        if not is_dir:
            dest.parent.mkdir(parents=True, exist_ok=True)

        def work(transfer: _Transfer) -> ExtractStats:
            with self._fetch(path, max_raw, transfer) as spool:
                return safe_extract(
                    spool,
                    dest if is_dir else dest.parent,
                    strip_top=True,
                    exclude=exclude,
                    max_bytes=max_bytes,
                    max_entries=max_entries,
                    single_name=None if is_dir else dest.name,
                    cancel=transfer.cancel,
                )

        return await self._abandonable(work)

    # -- network --
    async def set_network_policy(self, policy: NetworkPolicy) -> None:
        self.driver._check_policy(policy)
        async with self._policy_lock:
            mode = policy.network_mode
            if mode == "public":
                await self._attach("bridge")
                self._proxy_env = {}
            elif mode in ("allowlist", "denylist"):
                hosts = policy.allowed_hosts if mode == "allowlist" else policy.denied_hosts
                await self._ensure_proxy(mode, hosts)
                await self._attach("internal")
                url = f"http://{PROXY_ALIAS}:{PROXY_PORT}"
                self._proxy_env = {
                    "HTTP_PROXY": url,
                    "HTTPS_PROXY": url,
                    "http_proxy": url,
                    "https_proxy": url,
                    "NO_PROXY": "localhost,127.0.0.1",
                    "no_proxy": "localhost,127.0.0.1",
                }
            else:
                await self._attach(None)
                self._proxy_env = {}
            self.network_mode = mode

    def created_objects(self) -> dict[str, str]:
        """Objects beyond the container (for clean-up when opening fails half-way)."""
        out = {}
        if self.network:
            out["network"] = self.network
        if self.internal_network:
            out["internal"] = self.internal_network
        if self.proxy_id:
            out["proxy"] = self.proxy_id
        return out

    async def _bridge(self) -> str:
        if self.network is None:
            self.network = await self.driver._create_network(self.client, self.name, self.labels)
        return self.network

    async def _attach(self, target: str | None) -> None:
        """Move the container to ``target`` ("bridge", "internal" or None = loopback only)."""
        if self._on == target or (target is None and self._on == "none"):
            return
        from docker.errors import APIError

        if self._on == "none":
            if target is None:
                return
            try:
                await self.driver._call(self.api.disconnect_container_from_network, self.container_id, "none")
            except APIError:
                pass  # already off the `none` network
        elif self._on is not None:
            current = self.network if self._on == "bridge" else self.internal_network
            await self.driver._call(self.api.disconnect_container_from_network, self.container_id, current, force=True)
        self._on = None
        if target == "bridge":
            await self.driver._call(self.api.connect_container_to_network, self.container_id, await self._bridge())
        elif target == "internal":
            assert self.internal_network is not None
            await self.driver._call(self.api.connect_container_to_network, self.container_id, self.internal_network)
        self._on = target

    async def _ensure_proxy(self, mode: str, hosts: list[str]) -> None:
        """Start (once) the enforcing egress proxy, or update its policy in place."""
        allow = single_file_tar(ALLOW_FILE.lstrip("/"), policy_file_bytes(mode, hosts), 0o644)
        if self.proxy_id is not None:
            await self.driver._call(self._put_into, self.proxy_id, allow)
            return
        bridge = await self._bridge()
        self.internal_network = await self.driver._create_network(
            self.client, f"{self.name}-int", self.labels, internal=True
        )
        image = self.driver.config.allowlist_proxy_image or self.image
        created = await self.driver._call(
            self.api.create_container,
            image,
            command=["python3", "-c", PROXY_SOURCE, ALLOW_FILE, str(PROXY_PORT)],
            entrypoint=[],
            name=f"{self.name}-proxy",
            labels={**self.labels, LABEL_KIND: "proxy"},
            host_config=self.api.create_host_config(network_mode=bridge, init=True),
            detach=True,
        )
        self.proxy_id = created["Id"]
        await self.driver._call(self._put_into, self.proxy_id, allow)
        await self.driver._call(self.api.start, self.proxy_id)
        await self.driver._call(
            self.api.connect_container_to_network, self.proxy_id, self.internal_network, aliases=[PROXY_ALIAS]
        )
        if not await self.driver._call(_wait_port, self.api, self.proxy_id, PROXY_PORT, 30.0):
            raise EnvironmentSetupError(
                f"the egress proxy of session {self.id} did not start (image {image!r} needs python3)",
                code="egress_proxy_failed",
                help="set the docker environment param allowlist_proxy_image to an image with python3",
            )

    def _put_into(self, container: str, data: bytes) -> None:
        if not self.api.put_archive(container, "/", data):
            raise DriverError(f"could not write into container {container[:12]}", code="transfer_failed")

    async def endpoint(self, port: int) -> str:
        if self._on != "bridge" or self.network is None:
            raise DriverError(f"session {self.id} has no network (network_mode={self.network_mode})")
        info = await self.driver._call(self.api.inspect_container, self.container_id)
        ip = info["NetworkSettings"]["Networks"][self.network]["IPAddress"]
        return f"{ip}:{port}"

    # -- lifecycle --
    async def _close(self) -> None:
        await self.driver._call(_remove_container, self.client, self.container_id)
        if self.proxy_id is not None:
            await self.driver._call(_remove_container, self.client, self.proxy_id)
        for network in (self.network, self.internal_network):
            if network is not None:
                await self.driver._call(_remove_network, self.client, network)


# ---- blocking helpers (run in worker threads) ----------------------------------------------------------


def _link_target(path: str, target: str) -> str:
    """Where a symlink at ``path`` pointing to ``target`` leads (container paths)."""
    if target.startswith("/"):
        return posixpath.normpath(target)
    return posixpath.normpath(posixpath.join(posixpath.dirname(path), target))


def _image_workdir(client: Any, image: str) -> str:
    """The image's WORKDIR (H5 default when setup.workdir is unset), else ``/``."""
    info = client.api.inspect_image(image)
    return str((info.get("Config") or {}).get("WorkingDir") or "/")


def _wait_port(api: Any, container: str, port: int, timeout: float) -> bool:
    """Poll (inside ``container``) until something listens on ``port``; False on timeout/exit."""
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = api.inspect_container(container)["State"]
        if not state.get("Running"):
            return False
        exec_id = api.exec_create(container, ["python3", "-c", probe])["Id"]
        api.exec_start(exec_id)
        if api.exec_inspect(exec_id).get("ExitCode") == 0:
            return True
        time.sleep(0.1)
    return False


def _exit_code(api: Any, exec_id: str) -> int | None:
    # The output stream can close a moment before the engine records the exit (busy engines):
    # poll with a short, growing pause (about 10 s in total).
    delay = 0.002
    deadline = time.monotonic() + 10
    while True:
        info = api.exec_inspect(exec_id)
        if not info.get("Running"):
            code = info.get("ExitCode")
            return int(code) if code is not None else None
        if time.monotonic() > deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _remove_container(client: Any, cid: str) -> None:
    from docker.errors import NotFound

    with contextlib.suppress(NotFound):
        client.api.remove_container(cid, force=True, v=True)


def _remove_network(client: Any, name: str) -> None:
    from docker.errors import APIError, NotFound

    with contextlib.suppress(NotFound):
        for attempt in range(10):
            try:
                client.api.remove_network(name)
                return
            except NotFound:
                return
            except APIError:
                # A container removed a moment ago may still hold an endpoint briefly; a container
                # attached from outside acx would keep our network alive forever: detach it.
                if attempt == 9:
                    raise
                if attempt >= 2:
                    _detach_all(client, name)
                time.sleep(0.2)


def _detach_all(client: Any, network: str) -> None:
    from docker.errors import APIError, NotFound

    with contextlib.suppress(NotFound, APIError):
        info = client.api.inspect_network(network)
        for cid in info.get("Containers") or {}:
            with contextlib.suppress(NotFound, APIError):
                client.api.disconnect_container_from_network(cid, network, force=True)


def _label_filter(labels: Mapping[str, str] | None) -> list[str]:
    out = [LABEL_MANAGED]
    for key, value in (labels or {}).items():
        out.append(f"{key}={value}")
    return out


def list_objects(client: Any | None = None, *, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
    """acx-labelled containers (sessions and proxies) and networks on the engine."""
    client = client or docker_client()
    records: list[SessionRecord] = []
    for c in client.api.containers(all=True, filters={"label": _label_filter(labels)}):
        lab = c.get("Labels") or {}
        records.append(
            SessionRecord(
                id=lab.get(LABEL_SESSION, c["Id"][:12]),
                provider="docker",
                labels={
                    **lab,
                    "docker.kind": "container",
                    "docker.name": (c.get("Names") or ["?"])[0].lstrip("/"),
                },
                state=c.get("State", "unknown"),
                created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.get("Created", 0))),
            )
        )
    for n in client.api.networks(filters={"label": _label_filter(labels)}):
        lab = n.get("Labels") or {}
        records.append(
            SessionRecord(
                id=lab.get(LABEL_SESSION, n["Id"][:12]),
                provider="docker",
                labels={**lab, "docker.kind": "network", "docker.name": n.get("Name", "?")},
                state="network",
                created_at=n.get("Created"),
            )
        )
    return records


def close_objects(
    client: Any | None = None,
    *,
    session_id: str | None = None,
    predicate: Callable[[Mapping[str, str]], bool] | None = None,
) -> list[str]:
    """Remove acx containers, then networks, matching ``session_id`` and/or ``predicate``.

    Returns the names of what was removed.
    """
    client = client or docker_client()
    filt = {LABEL_SESSION: session_id} if session_id is not None else None
    removed: list[str] = []
    for c in client.api.containers(all=True, filters={"label": _label_filter(filt)}):
        lab = c.get("Labels") or {}
        if predicate is not None and not predicate(lab):
            continue
        _remove_container(client, c["Id"])
        removed.append((c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
    for n in client.api.networks(filters={"label": _label_filter(filt)}):
        lab = n.get("Labels") or {}
        if predicate is not None and not predicate(lab):
            continue
        _remove_network(client, n["Id"])
        removed.append(n.get("Name", n["Id"][:12]))
    return removed


def is_orphan(labels: Mapping[str, str], *, include_kept: bool = False, host: str | None = None) -> bool:
    """An object whose creating acx process (same host, pid + start time) no longer runs."""
    if labels.get(LABEL_KEEP) == "true" and not include_kept:
        return False
    if labels.get(LABEL_HOST) != (host or _host_name()):
        return False
    pid = labels.get(LABEL_PID, "")
    if not pid.isdigit():
        return False
    return not _pid_alive(int(pid), labels.get(LABEL_PID_START))


def sweep_orphans(docker_host: str | None = None, *, include_kept: bool = False) -> list[str]:
    """Remove acx objects left by crashed runs on this host; the names removed (blocking)."""
    client = docker_client(docker_host)
    host = _host_name()
    return close_objects(client, predicate=lambda lab: is_orphan(lab, include_kept=include_kept, host=host))
