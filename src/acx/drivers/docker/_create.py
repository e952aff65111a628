"""Opening a docker session: labels, the container, its network, and clean-up of half-made ones.

Everything created is labelled (``acx.session``, ``acx.pid``, ``acx.host``, the interpreter's
run/task/attempt labels) and recorded in ``created`` as soon as the engine returns its id, so an
open that fails or is cancelled half-way removes exactly what it made.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any

import trio

from acx.drivers._base import CachedInstall, Installer, OpenRequest, Session, SessionRecord
from acx.drivers._owner import host_name, proc_start_time
from acx.drivers._specs import DockerConfig
from acx.drivers.docker._build import ImageBuilder
from acx.drivers.docker._engine import (
    LABEL_HOST,
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_PID,
    LABEL_PID_START,
    LABEL_SESSION,
    _remove_container,
    _remove_network,
    _sanitize,
    _short,
    docker_client,
)
from acx.drivers.docker._gc import close_objects, list_objects, sweep_orphans
from acx.drivers.docker._session import DockerSession
from acx.errors import CapabilityError, DriverError, EnvironmentSetupError

__all__ = ["DockerDriver", "is_idle_loop"]

log = logging.getLogger("acx.drivers.docker")

#: Keeps the container alive without depending on `sleep infinity` (busybox lacks it).
_IDLE_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
#: How `docker top` shows the idle loop's own shell once an image's entrypoint has handed over to
#: it. A prefix, not a substring: an entrypoint that does not hand over still has the idle loop
#: in its own arguments (``python3 -c ... /bin/sh -c trap ...``) while it runs.
_IDLE_PREFIX = " ".join([*_IDLE_COMMAND[:2], _IDLE_COMMAND[2].split(" & ", 1)[0]])
#: How long an image's entrypoint may take to hand over to the idle loop before acx stops watching.
_ENTRYPOINT_SETTLE_SECONDS = 10.0

#: Engines this process has already swept for orphans (see DockerDriver._sweep_once).
_SWEPT: set[str | None] = set()


class DockerDriver(ImageBuilder):
    id = "docker"
    sessions_discoverable = True  # every object carries acx.* labels

    async def prepare(self) -> list[str]:
        """The engine must answer (EnvironmentSetupError otherwise); then the acx objects of
        crashed runs on it are removed once per process and engine (``ACX_DOCKER_SWEEP=0`` skips
        it, e.g. to inspect what a crashed run left). Runs outside any limiter: it may be called
        from its own trio run, before the run proper."""
        host = self.config.docker_host
        client = await trio.to_thread.run_sync(docker_client, host)
        try:
            await trio.to_thread.run_sync(client.ping)
        except Exception as exc:
            raise EnvironmentSetupError(
                f"the Docker engine does not answer ({type(exc).__name__}); "
                "start it (bash scripts/setup-docker.sh) or set docker_host",
                code="docker_unavailable",
            ) from None
        if host in _SWEPT or os.environ.get("ACX_DOCKER_SWEEP", "1") == "0":
            return []
        _SWEPT.add(host)
        try:
            removed = await trio.to_thread.run_sync(sweep_orphans, host)
        except Exception as exc:
            return [f"skipped the orphan sweep: {type(exc).__name__}: {exc}"]
        return [f"removed {len(removed)} object(s) left by crashed runs"] if removed else []

    def __init__(self, config: DockerConfig | None = None) -> None:
        super().__init__(config)
        #: The engine's reason for refusing ``storage_opt`` once it did (not asked again).
        self._storage_refused: str | None = None
        self._storage_warned = False

    async def cached_install(self, request: OpenRequest, key: str, install: Installer) -> CachedInstall | None:
        """The install cache (``DriverCapabilities.install_cache``): an image per base image digest
        × install key, committed from a throwaway container after a successful install."""
        from acx.drivers.docker._install import cached_install

        return await cached_install(self, request, key, install)

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

    async def model_gateway_address(self) -> str | None:
        """The gateway address of the engine's default bridge (``docker0``): containers and the
        egress proxy reach the host there. The model gateway listens on it besides loopback."""
        client = await self.client()

        def bridge_gateway() -> str | None:
            import ipaddress

            for cfg in client.networks.get("bridge").attrs.get("IPAM", {}).get("Config") or []:
                if not isinstance(cfg, dict):
                    continue
                if cfg.get("Gateway"):
                    return str(cfg["Gateway"])
                if cfg.get("Subnet"):  # the engine gives the bridge the subnet's first address
                    net = ipaddress.ip_network(cfg["Subnet"], strict=False)
                    if net.version == 4:
                        return str(net.network_address + 1)
            return None

        return await self._call(bridge_gateway)

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
            with trio.CancelScope(shield=True):
                await self._discard(client, request.session_id, created)
            raise EnvironmentSetupError(
                f"environment {request.session_id} was not built and started within build_timeout_seconds={budget}",
                code="environment_start_timeout",
            ) from None
        except BaseException:
            # Shielded: a cancelled attempt (SIGTERM, a deadline) must still release what it made.
            with trio.CancelScope(shield=True):
                await self._discard(client, request.session_id, created)
            raise
        return session

    def _labels(self, request: OpenRequest) -> dict[str, str]:
        labels = {**self.config.labels, **request.labels}
        labels[LABEL_MANAGED] = "docker"
        labels[LABEL_SESSION] = request.session_id
        labels.setdefault(LABEL_HOST, host_name())
        if LABEL_PID not in labels:
            labels[LABEL_PID] = str(os.getpid())
        if labels[LABEL_PID] == str(os.getpid()) and labels.get(LABEL_HOST) == host_name():
            start = proc_start_time(os.getpid())
            if start:
                labels[LABEL_PID_START] = start
        return labels

    async def _create(
        self, client: Any, request: OpenRequest, image: str, labels: dict[str, str], created: dict[str, str]
    ) -> DockerSession:
        suffix = uuid.uuid4().hex[:8]
        name = f"acx-{_sanitize(request.session_id)}-{suffix}"
        mode = request.network_policy.network_mode
        network: str | None = None
        if mode == "public":
            # Every object is recorded by name *before* its create call: a create whose answer is
            # lost (cancelled, engine timeout) is still released by ``_discard``.
            created["network"] = name
            network = await self._create_network(client, name, labels)
        created["container"] = name
        config = await self._call(_image_config, client, image)
        cid = await self._create_container(client, request, image, name, network, labels, config)
        created["container"] = cid
        await self._call(client.api.start, cid)
        if self._keeps_entrypoint(config):
            await self._check_entrypoint_started(client, cid, image, config)
        workdir = request.setup.workdir or str(config.get("WorkingDir") or "/")
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
        session.open_notes.extend(self._open_notes(request))
        if mode in ("allowlist", "denylist"):
            try:
                await session.set_network_policy(request.network_policy)
            finally:
                created.update(session.created_objects())
        return session

    def _keeps_entrypoint(self, config: Mapping[str, Any]) -> bool:
        """Whether the image's ENTRYPOINT runs (with the idle loop as its command)."""
        return self.config.command is None and self.config.entrypoint == "image" and bool(config.get("Entrypoint"))

    async def _check_entrypoint_started(self, client: Any, cid: str, image: str, config: Mapping[str, Any]) -> None:
        """An image ENTRYPOINT that does not run its command (``exec "$@"``) ends the container at
        once: say so with its output, instead of failing the first command obscurely."""
        # Wait until the idle loop is seen running (the entrypoint handed over) or the container
        # ended; a fixed short wait raced a slow entrypoint start on a loaded machine. An
        # entrypoint that runs something else for ever is given the benefit of the doubt after
        # the bound: the container is up and commands can run in it.
        state: Mapping[str, Any] = {}
        with trio.move_on_after(_ENTRYPOINT_SETTLE_SECONDS):
            while True:
                state = (await self._call(client.api.inspect_container, cid)).get("State") or {}
                if not state.get("Running", True):
                    break
                if await self._idle_loop_running(client, cid):
                    return
                await trio.sleep(0.05)
        if state.get("Running", True):
            return
        output = await self._call(client.api.logs, cid, stdout=True, stderr=True, tail=20)
        tail = output.decode("utf-8", "replace").strip()[-600:] if isinstance(output, bytes) else ""
        raise EnvironmentSetupError(
            f"image {image!r}: its ENTRYPOINT {config.get('Entrypoint')} exited (code {state.get('ExitCode')}) "
            "instead of running the command it was given (acx keeps the image's entrypoint, as Harbor does, "
            "and gives it an idle loop as its command)" + (f"; its output: {tail}" if tail else ""),
            code="entrypoint_exited",
            help='make the entrypoint end with `exec "$@"`, or set the docker environment param '
            "`entrypoint: idle` to replace it with acx's idle loop",
        )

    async def _idle_loop_running(self, client: Any, cid: str) -> bool:
        """Whether the container's processes include acx's idle loop (its `sleep 3600`)."""
        from docker.errors import APIError

        try:
            top = await self._call(client.api.top, cid)
        except APIError:  # the container ended between the inspect and this call
            return False
        titles = list(top.get("Titles") or [])
        column = titles.index("CMD") if "CMD" in titles else -1
        return any(is_idle_loop(str(row[column])) for row in top.get("Processes") or [] if row)

    async def _create_container(
        self,
        client: Any,
        request: OpenRequest,
        image: str,
        name: str,
        network: str | None,
        labels: dict[str, str],
        config: Mapping[str, Any],
    ) -> str:
        """Create the session container; a storage limit the engine refuses is dropped (and said)."""
        from docker.errors import APIError, ImageNotFound

        resources = _resource_kwargs(request)
        if self._storage_refused is not None:
            resources.pop("storage_opt", None)
        # Harbor keeps the image's ENTRYPOINT (compose `command: sleep infinity` only), so an
        # entrypoint that reads its environment sees the public start-up variables (V2): the idle
        # loop becomes its command. `entrypoint: idle` replaces it instead (an
        # `ENTRYPOINT ["python"]` image would exit at once); a configured `command` keeps it.
        idle = self.config.command is None
        keep = self._keeps_entrypoint(config)
        while True:
            host_config = client.api.create_host_config(
                network_mode=network or "none",
                init=True,
                cap_add=list(self.config.cap_add) or None,
                **resources,
            )
            try:
                container = await self._call(
                    client.api.create_container,
                    image,
                    command=_IDLE_COMMAND if keep else (None if idle else self.config.command),
                    entrypoint=_IDLE_COMMAND if idle and not keep else None,
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
            except APIError as exc:
                if "storage_opt" not in resources or not _refuses_storage_opt(exc):
                    raise
                # The engine cannot limit a container's disk (e.g. overlay2 not on xfs+pquota).
                explanation = getattr(exc, "explanation", None)
                self._storage_refused = str(explanation)[:300] if explanation else _short(exc)
                resources.pop("storage_opt")
                continue
            return str(container["Id"])

    def _open_notes(self, request: OpenRequest) -> list[str]:
        """What this open could not honour, said at open time (and logged to the run log)."""
        res = request.resources
        if res is None or res.storage_mb is None or self._storage_refused is None:
            return []
        note = (
            f"resources.storage_mb = {res.storage_mb} is not enforced in session {request.session_id}: "
            f"the Docker engine refused the storage limit ({self._storage_refused})"
        )
        if not self._storage_warned:
            self._storage_warned = True
            log.warning("%s", note)
        else:
            log.info("%s", note)
        return [note]

    async def _discard(self, client: Any, session_id: str, created: Mapping[str, str]) -> None:
        """Remove what a failed open made: by recorded id or name, then anything else labelled
        with the session (a create in flight when the open was cancelled). Raises a
        ``release_failed`` DriverError naming what is left, so the caller can record it."""
        failures: list[str] = []
        for key in ("container", "proxy", "network", "internal"):
            if key in created:
                remove = _remove_container if key in ("container", "proxy") else _remove_network
                try:
                    await self._call(remove, client, created[key])
                except Exception as exc:
                    failures.append(f"{key} {created[key]}: {_short(exc)}")
        try:
            await self._call(close_objects, client, session_id=session_id)
        except Exception as exc:
            failures.append(f"objects labelled {LABEL_SESSION}={session_id}: {_short(exc)}")
        if failures:
            raise DriverError(
                f"environment {session_id} failed to open and could not be fully removed: " + "; ".join(failures),
                code="release_failed",
                session_id=session_id,
            )

    # -- inventory --
    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        client = await self.client()
        return await self._call(list_objects, client, labels=labels)

    async def close_session(self, session_id: str) -> None:
        client = await self.client()
        removed = await self._call(close_objects, client, session_id=session_id)
        if not removed:
            raise DriverError(f"no docker environment with session id {session_id!r}", code="session_not_found")


def _refuses_storage_opt(exc: BaseException) -> bool:
    """The engine's answer to a ``--storage-opt size`` it cannot honour (storage-driver specific)."""
    text = str(exc).lower()
    return "storage-opt" in text or "storage opt" in text or "storage_opt" in text


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
    if res.storage_mb is not None:
        # The container's writable layer; engines that cannot limit it refuse (see _create_container).
        kwargs["storage_opt"] = {"size": f"{int(res.storage_mb)}M"}
    return kwargs


def _image_config(client: Any, image: str) -> dict[str, Any]:
    """The image's config (``Entrypoint``, ``WorkingDir`` — the H5 default when setup.workdir is
    unset); {} for an image the engine does not have (create_container then says so)."""
    from docker.errors import ImageNotFound

    try:
        info = client.api.inspect_image(image)
    except ImageNotFound:
        return {}
    return dict(info.get("Config") or {})


def is_idle_loop(command: str) -> bool:
    """Whether a process's command line (as ``docker top`` shows it) is acx's idle loop itself."""
    return command.startswith(_IDLE_PREFIX)
