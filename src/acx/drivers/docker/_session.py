"""The docker session: one container (plus, under allowlist/denylist, its proxy and networks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from acx.drivers.docker._engine import LABEL_KIND, EngineDriver, _remove_container, _remove_network
from acx.drivers.docker._network import NetworkOps

__all__ = ["DockerSession"]


class DockerSession(NetworkOps):
    def __init__(
        self,
        *,
        driver: EngineDriver,
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
        #: What the open could not honour (e.g. a storage limit the engine refused), one sentence
        #: each; also logged to the run log when the session opens.
        self.open_notes: list[str] = []

    # -- lifecycle --
    async def _close(self) -> None:
        await self.driver._call(_remove_container, self.client, self.container_id)
        if self.proxy_id is not None:
            await self.driver._call(_remove_container, self.client, self.proxy_id)
        for network in (self.network, self.internal_network):
            if network is not None:
                await self.driver._call(_remove_network, self.client, network)
