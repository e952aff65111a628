"""The engine edge of the docker driver: the SDK client, thread plumbing, labels, removals.

The docker SDK is imported lazily and only in this package. Every blocking SDK call runs through
``trio.to_thread.run_sync`` under a :class:`trio.CapacityLimiter`; long-running command streams have
their own, larger limiter so many concurrent agents never starve short control calls.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import trio

from acx.drivers._base import Driver
from acx.drivers._specs import DockerConfig, DriverCapabilities, probe_docker
from acx.drivers.docker._firewall import ensure_host_firewall, internal_bridge_name
from acx.errors import CapabilityError, EnvironmentSetupError
from acx.ir import NetworkPolicy

T = TypeVar("T")

LABEL_MANAGED = "acx.managed"
LABEL_SESSION = "acx.session"
LABEL_PID = "acx.pid"
LABEL_PID_START = "acx.pid_start"
LABEL_HOST = "acx.host"
LABEL_KIND = "acx.kind"
#: Set on sessions opened with keep_environment; gc leaves them alone unless asked.
LABEL_KEEP = "acx.keep"


# ---- client and limiters -------------------------------------------------------------------------

_CLIENTS: dict[str | None, Any] = {}
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


def _sanitize(text: str, limit: int = 40) -> str:
    clean = re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-.") or "s"
    return clean[:limit].lower()


class EngineDriver(Driver):
    """What sessions need of :class:`DockerDriver`: calls into the engine, policy checks, networks."""

    config_class = DockerConfig

    def __init__(self, config: DockerConfig | None = None) -> None:
        super().__init__(config)
        self.config: DockerConfig
        self._api_limiter: trio.CapacityLimiter | None = None
        self._stream_limiter: trio.CapacityLimiter | None = None

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

    def _check_policy(self, policy: NetworkPolicy) -> None:
        caps = self.capabilities()
        if policy.network_mode not in caps.network_modes:
            reason = caps.unsupported_reasons.get(policy.network_mode, "not supported")
            raise CapabilityError(
                f"the docker driver cannot enforce network_mode={policy.network_mode!r}: {reason}",
                code="E0452",
                help="use network_mode public, no-network, allowlist or denylist with --env docker",
            )

    async def _create_network(
        self, client: Any, name: str, labels: Mapping[str, str], *, internal: bool = False
    ) -> str:
        options = None
        if internal:
            # The host firewall rules match internal bridges by this interface-name prefix.
            await self._call(ensure_host_firewall, self.config.docker_host)
            options = {"com.docker.network.bridge.name": internal_bridge_name()}
        await self._call(
            client.api.create_network,
            name,
            driver="bridge",
            internal=internal,
            options=options,
            labels={**labels, LABEL_KIND: "network"},
        )
        return name


def _remove_container(client: Any, cid: str) -> None:
    from docker.errors import APIError, NotFound

    try:
        client.api.remove_container(cid, force=True, v=True)
    except NotFound:
        return
    except APIError as exc:
        # Another remover has it (a gc or another run's orphan sweep at the same moment): done
        # once it is gone.
        if "already in progress" not in str(exc):
            raise
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                client.api.inspect_container(cid)
            except NotFound:
                return
            time.sleep(0.1)
        raise


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
