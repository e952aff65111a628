"""Network policies of a docker session (contracts P6, P7).

``public`` = a per-session bridge network; ``no-network`` = no interface but loopback;
``allowlist`` / ``denylist`` = the container alone on an internal network whose only peer is an
enforcing egress proxy (:mod:`acx.drivers.docker._proxy`). All switch on the live container
(connect / disconnect, policy file rewritten).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from acx.drivers.docker._archive import single_file_tar
from acx.drivers.docker._engine import LABEL_KIND
from acx.drivers.docker._firewall import host_reachable, refusal
from acx.drivers.docker._proxy import ALLOW_FILE, PROXY_ALIAS, PROXY_PORT, PROXY_SOURCE, policy_file_bytes
from acx.errors import DriverError, EnvironmentSetupError
from acx.ir import NetworkPolicy

if TYPE_CHECKING:
    from acx.drivers.docker._session import DockerSession


class DockerNetwork:
    """Network policies of a :class:`~acx.drivers.docker.DockerSession` (composed into it)."""

    def __init__(self, s: DockerSession) -> None:
        self.s = s

    async def set_network_policy(self, policy: NetworkPolicy) -> None:
        self.s.driver._check_policy(policy)
        async with self.s._policy_lock:
            mode = policy.network_mode
            if mode == "public":
                await self._attach("bridge")
                self.s._proxy_env = {}
            elif mode in ("allowlist", "denylist"):
                hosts = policy.allowed_hosts if mode == "allowlist" else policy.denied_hosts
                await self._ensure_proxy(mode, hosts)
                await self._attach("internal")
                url = f"http://{PROXY_ALIAS}:{PROXY_PORT}"
                self.s._proxy_env = {
                    "HTTP_PROXY": url,
                    "HTTPS_PROXY": url,
                    "http_proxy": url,
                    "https_proxy": url,
                    "NO_PROXY": "localhost,127.0.0.1",
                    "no_proxy": "localhost,127.0.0.1",
                }
            else:
                await self._attach(None)
                self.s._proxy_env = {}
            self.s.network_mode = mode

    def created_objects(self) -> dict[str, str]:
        """Objects beyond the container (for clean-up when opening fails half-way)."""
        out = {}
        if self.s.network:
            out["network"] = self.s.network
        if self.s.internal_network:
            out["internal"] = self.s.internal_network
        if self.s.proxy_id:
            out["proxy"] = self.s.proxy_id
        return out

    async def _bridge(self) -> str:
        if self.s.network is None:
            # Recorded before the create call: released even when the call's answer is lost.
            self.s.network = self.s.name
            await self.s.driver._create_network(self.s.client, self.s.name, self.s.labels)
        return self.s.network

    async def _attach(self, target: str | None) -> None:
        """Move the container to ``target`` ("bridge", "internal" or None = loopback only)."""
        if self.s._on == target or (target is None and self.s._on == "none"):
            return
        from docker.errors import APIError

        if self.s._on == "none":
            if target is None:
                return
            try:
                await self.s.driver._call(self.s.api.disconnect_container_from_network, self.s.container_id, "none")
            except APIError:
                pass  # already off the `none` network
        elif self.s._on is not None:
            current = self.s.network if self.s._on == "bridge" else self.s.internal_network
            await self.s.driver._call(
                self.s.api.disconnect_container_from_network, self.s.container_id, current, force=True
            )
        self.s._on = None
        if target == "bridge":
            await self.s.driver._call(
                self.s.api.connect_container_to_network, self.s.container_id, await self._bridge()
            )
        elif target == "internal":
            assert self.s.internal_network is not None
            await self.s.driver._call(
                self.s.api.connect_container_to_network, self.s.container_id, self.s.internal_network
            )
        self.s._on = target

    async def _ensure_proxy(self, mode: str, hosts: list[str]) -> None:
        """Start (once) the enforcing egress proxy, or update its policy in place."""
        allow = single_file_tar(ALLOW_FILE.lstrip("/"), policy_file_bytes(mode, hosts), 0o644)
        if self.s.proxy_id is not None:
            await self.s.driver._call(self._put_into, self.s.proxy_id, allow)
            return
        bridge = await self._bridge()
        self.s.internal_network = f"{self.s.name}-int"  # recorded first, like the bridge
        await self.s.driver._create_network(self.s.client, self.s.internal_network, self.s.labels, internal=True)
        image = self.s.driver.config.allowlist_proxy_image or self.s.image
        self.s.proxy_id = f"{self.s.name}-proxy"  # by name until the engine answers with the id
        created = await self.s.driver._call(
            self.s.api.create_container,
            image,
            command=["python3", "-c", PROXY_SOURCE, ALLOW_FILE, str(PROXY_PORT)],
            entrypoint=[],
            name=self.s.proxy_id,
            labels={**self.s.labels, LABEL_KIND: "proxy"},
            host_config=self.s.api.create_host_config(network_mode=bridge, init=True),
            detach=True,
        )
        self.s.proxy_id = created["Id"]
        await self.s.driver._call(self._put_into, self.s.proxy_id, allow)
        await self.s.driver._call(self.s.api.start, self.s.proxy_id)
        await self.s.driver._call(
            self.s.api.connect_container_to_network, self.s.proxy_id, self.s.internal_network, aliases=[PROXY_ALIAS]
        )
        if not await self.s.driver._call(_wait_port, self.s.api, self.s.proxy_id, PROXY_PORT, 30.0):
            raise EnvironmentSetupError(
                f"the egress proxy of session {self.s.id} did not start (image {image!r} needs python3)",
                code="egress_proxy_failed",
                help="set the docker environment param allowlist_proxy_image to an image with python3",
            )
        # The proxy must be the only way out: check that the host firewall rules hold here.
        gateway = await self.s.driver._call(host_reachable, self.s.api, self.s.proxy_id, self.s.internal_network)
        if gateway is not None:
            raise refusal(self.s.id, gateway)

    def _put_into(self, container: str, data: bytes) -> None:
        if not self.s.api.put_archive(container, "/", data):
            raise DriverError(f"could not write into container {container[:12]}", code="transfer_failed")

    async def endpoint(self, port: int) -> str:
        if self.s._on != "bridge" or self.s.network is None:
            raise DriverError(f"session {self.s.id} has no network (network_mode={self.s.network_mode})")
        info = await self.s.driver._call(self.s.api.inspect_container, self.s.container_id)
        ip = info["NetworkSettings"]["Networks"][self.s.network]["IPAddress"]
        return f"{ip}:{port}"


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
