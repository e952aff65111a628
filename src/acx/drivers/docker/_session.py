"""The docker session: one container (plus, under allowlist/denylist, its proxy and networks).

The session holds the state; its three halves are composed helpers that share it — files
(:class:`DockerFiles`, ``_files``), commands (:class:`DockerExec`, ``_exec``) and network policies
(:class:`DockerNetwork`, ``_network``) — and the :class:`~acx.drivers.Session` methods delegate to
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from acx.drivers._base import DEFAULT_MAX_OUTPUT_BYTES, ExecResult, Session
from acx.drivers.docker._engine import LABEL_KIND, EngineDriver, _remove_container, _remove_network, _short
from acx.drivers.docker._exec import DockerExec
from acx.drivers.docker._files import DockerFiles
from acx.drivers.docker._network import DockerNetwork
from acx.drivers.transfer import ExtractStats
from acx.errors import DriverError
from acx.ir import NetworkPolicy

__all__ = ["DockerSession"]


class DockerSession(Session):
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
        self.files = DockerFiles(self)
        self.execs = DockerExec(self)
        self.net = DockerNetwork(self)

    # -- the Session API, by the halves --
    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        return await self.files.write_bytes(path, data, mode=mode)

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        return await self.files.read_bytes(path, max_bytes=max_bytes)

    async def is_file(self, path: str) -> bool:
        return await self.files.is_file(path)

    async def is_dir(self, path: str) -> bool:
        return await self.files.is_dir(path)

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        return await self.files.upload_dir(local_dir, remote_dir)

    async def download_dir(
        self,
        remote_dir: str,
        local_dir: str,
        *,
        exclude: tuple[str, ...] | list[str] = (),
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> None:
        return await self.files.download_dir(
            remote_dir, local_dir, exclude=exclude, max_bytes=max_bytes, max_entries=max_entries
        )

    async def download_tree(
        self,
        remote: str,
        local: str,
        *,
        exclude: tuple[str, ...] | list[str] = (),
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> ExtractStats:
        return await self.files.download_tree(
            remote, local, exclude=exclude, max_bytes=max_bytes, max_entries=max_entries
        )

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
        return await self.execs._exec(
            argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin, max_output_bytes=max_output_bytes
        )

    async def kill_stray_processes(self) -> None:
        return await self.execs.kill_stray_processes()

    async def set_network_policy(self, policy: NetworkPolicy) -> None:
        return await self.net.set_network_policy(policy)

    def created_objects(self) -> dict[str, str]:
        return self.net.created_objects()

    async def endpoint(self, port: int) -> str:
        return await self.net.endpoint(port)

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
