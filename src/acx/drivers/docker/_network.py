"""Network policies of a docker session (contracts P6, P7).

``public`` = a per-session bridge network; ``no-network`` = no interface but loopback;
``allowlist`` / ``denylist`` = the container alone on an internal network whose only peer is an
enforcing egress proxy (:mod:`acx.drivers.docker._proxy`). All switch on the live container
(connect / disconnect, policy file rewritten).
"""

from __future__ import annotations

import time
from typing import Any

import trio

from acx.drivers.docker._archive import single_file_tar
from acx.drivers.docker._engine import LABEL_KIND
from acx.drivers.docker._exec import ExecOps
from acx.drivers.docker._firewall import host_reachable, refusal
from acx.drivers.docker._proxy import ALLOW_FILE, PROXY_ALIAS, PROXY_PORT, PROXY_SOURCE, policy_file_bytes
from acx.errors import DriverError, EnvironmentSetupError
from acx.ir import NetworkPolicy


class NetworkOps(ExecOps):
    """The network half of :class:`~acx.drivers.docker.DockerSession`."""

    client: Any
    name: str
    image: str
    labels: dict[str, str]
    network: str | None
    internal_network: str | None
    proxy_id: str | None
    network_mode: str
    _on: str | None
    _policy_lock: trio.Lock

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
            # Recorded before the create call: released even when the call's answer is lost.
            self.network = self.name
            await self.driver._create_network(self.client, self.name, self.labels)
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
        self.internal_network = f"{self.name}-int"  # recorded first, like the bridge
        await self.driver._create_network(self.client, self.internal_network, self.labels, internal=True)
        image = self.driver.config.allowlist_proxy_image or self.image
        self.proxy_id = f"{self.name}-proxy"  # by name until the engine answers with the id
        created = await self.driver._call(
            self.api.create_container,
            image,
            command=["python3", "-c", PROXY_SOURCE, ALLOW_FILE, str(PROXY_PORT)],
            entrypoint=[],
            name=self.proxy_id,
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
        # The proxy must be the only way out: check that the host firewall rules hold here.
        gateway = await self.driver._call(host_reachable, self.api, self.proxy_id, self.internal_network)
        if gateway is not None:
            raise refusal(self.id, gateway)

    def _put_into(self, container: str, data: bytes) -> None:
        if not self.api.put_archive(container, "/", data):
            raise DriverError(f"could not write into container {container[:12]}", code="transfer_failed")

    async def endpoint(self, port: int) -> str:
        if self._on != "bridge" or self.network is None:
            raise DriverError(f"session {self.id} has no network (network_mode={self.network_mode})")
        info = await self.driver._call(self.api.inspect_container, self.container_id)
        ip = info["NetworkSettings"]["Networks"][self.network]["IPAddress"]
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
