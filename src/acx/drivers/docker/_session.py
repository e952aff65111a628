"""The docker session: one container (plus, under allowlist/denylist, its proxy and networks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from acx.drivers.docker._engine import LABEL_KIND, EngineDriver, _remove_container, _remove_network, _short
from acx.drivers.docker._network import NetworkOps
from acx.errors import DriverError

__all__ = ["DockerSession"]


class DockerSession(NetworkOps):
    #: ``docker exec --user``: a name from the image's passwd or a uid (Session.user_scope).
    supports_exec_user = True

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
        """Remove the container, the proxy, then the networks — each attempted even when an
        earlier removal failed, so one stuck object does not keep the others alive."""
        failures: list[str] = []
        containers = [self.container_id] + ([self.proxy_id] if self.proxy_id is not None else [])
        networks = [n for n in (self.network, self.internal_network) if n is not None]
        for remove, names in ((_remove_container, containers), (_remove_network, networks)):
            for name in names:
                try:
                    await self.driver._call(remove, self.client, name)
                except Exception as exc:
                    failures.append(f"{name[:24]}: {_short(exc)}")
        if failures:
            raise DriverError(
                f"session {self.id} could not be fully removed: " + "; ".join(failures), code="release_failed"
            )
