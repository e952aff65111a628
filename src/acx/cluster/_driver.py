"""``RemoteDriver``/``RemoteSession``: the interpreter's Driver/Session contract, served by the
acx workers of a cluster. The interpreter stays the one scheduler and the only writer of the
journal and results: it only sees a driver whose sandboxes happen to live on other nodes.

Placement: a session goes to the live node with the most free slots (``acx_slots``, the node's
sandbox capacity); when every node is full, ``open`` waits (back-pressure) instead of queueing on
one node. A node lost mid-attempt fails that attempt's session calls with ``sandbox_stopped`` (a
fatal issue, so the interpreter's runtime retries re-run it on another node within
``max_retries``); its sandboxes are found again by label (``acx gc --cluster``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from acx.cluster import _protocol as P
from acx.cluster._ray import Node, NodeLost, RayCluster
from acx.cluster._worker import pack_dir, unpack_dir
from acx.drivers import DRIVERS, Driver, DriverCapabilities, ExecResult, OpenRequest, Session, SessionRecord
from acx.errors import AcxUserError, CapabilityError, DriverError, EnvironmentSetupError

__all__ = ["ClusterStats", "RemoteDriver", "RemoteSession"]

log = logging.getLogger("acx.cluster")


class ClusterStats:
    """Counters of one driver process's cluster traffic (shown at the end of a run)."""

    def __init__(self) -> None:
        self.calls = 0
        self.late_replies_discarded = 0
        self.nodes_lost: set[str] = set()
        self.sessions_per_node: dict[str, int] = {}


def _raise(err: P.ErrorInfo, node: str) -> None:
    where = f" (node {node})"
    if err.kind == "file_not_found":
        raise FileNotFoundError(err.message)
    if err.kind == "capability":
        raise CapabilityError(err.message + where, code=err.code, help=err.help)
    if err.kind == "user":
        raise AcxUserError(err.message + where, code=err.code, help=err.help)
    if err.kind == "value":
        raise ValueError(err.message)
    if err.kind == "cancelled":
        raise DriverError("call cancelled on the worker" + where, code="sandbox_stopped")
    fields = {"help": err.help} if err.help else {}
    raise DriverError(err.message + where, code=err.code or "environment_failed", **fields)


class RemoteDriver(Driver):
    """A driver whose sessions are opened by the acx worker of a cluster node."""

    def __init__(self, cluster: RayCluster, env_id: str, params: Mapping[str, Any] | None = None) -> None:
        info = DRIVERS[env_id]
        self.inner_class: type[Driver] = info.load()
        super().__init__(msgspec.convert(dict(params or {}), type=info.config_class))
        self.id = env_id  # type: ignore[misc]  # the provider id the journal records
        self.sessions_discoverable = self.inner_class.sessions_discoverable  # type: ignore[misc]
        self.cluster = cluster
        self.ref = P.DriverRef(env_id=env_id, params=dict(params or {}))
        self.stats = ClusterStats()
        self._slots: dict[str, trio.Semaphore] = {}
        self._freed: trio.Condition | None = None
        self._seq = itertools.count(1)

    # ---- plumbing ----------------------------------------------------------------------------
    def capabilities(self) -> DriverCapabilities:
        return self.inner_class(self.config).capabilities()

    def _key(self, session_id: str | None) -> str:
        return f"{session_id or self.ref.env_id}/{next(self._seq)}"

    async def call(self, node: Node, op: Any, session_id: str | None = None) -> Any:
        """One operation on ``node``; its reply value, or the worker's error raised here."""
        key = self._key(session_id)
        data = P.encode(P.Call(key=key, driver=self.ref, session_id=session_id, op=op))
        self.stats.calls += 1
        try:
            raw = await self.cluster.send(node, data, self._late)
        except NodeLost:
            self.stats.nodes_lost.add(node.name)
            raise DriverError(
                f"cluster node {node.name} was lost; its sandbox is gone with it", code="sandbox_stopped"
            ) from None
        except trio.Cancelled:
            cancel = P.Call(key=key + "/cancel", driver=self.ref, op=P.Cancel(target=key))
            self.cluster.send_nowait(node, P.encode(cancel))
            raise
        reply = P.decode_reply(raw)
        if reply.key != key:  # never applied to another call: a protocol bug, said loudly
            raise DriverError(f"reply for {reply.key} to call {key}", code="environment_failed")
        if reply.error is not None:
            _raise(reply.error, reply.node)
        return reply.value

    def _late(self) -> None:
        self.stats.late_replies_discarded += 1

    def _live(self) -> list[Node]:
        return [n for n in self.cluster.nodes if n.alive]

    # ---- driver hooks ------------------------------------------------------------------------
    async def prepare(self) -> list[str]:
        nodes = await self.cluster.connect()
        notes = [
            f"cluster {self.cluster.address}: {len(nodes)} node(s): "
            + ", ".join(f"{n.name} ({n.slots} slots)" for n in nodes)
        ]
        for node in nodes:
            self._slots[node.node_id] = trio.Semaphore(node.slots)
            if not node.alive:
                notes.append(f"{node.name}: does not answer; no sandbox goes there")
                continue
            try:
                notes += [f"{node.name}: {n}" for n in await self.call(node, P.Hello())]
            except DriverError as exc:
                raise EnvironmentSetupError(f"node {node.name} cannot serve {self.id}: {exc}") from None
        self._freed = trio.Condition()
        return notes

    async def _place(self) -> Node:
        """The live node with the most free slots, holding one; waits while all are full."""
        assert self._freed is not None, "prepare() connects the cluster first"
        async with self._freed:
            while True:
                live = self._live()
                if not live:
                    raise DriverError("no live node left in the cluster", code="environment_failed")
                best = max(live, key=lambda n: self._slots[n.node_id].value)
                sem = self._slots[best.node_id]
                if sem.value > 0:
                    sem.acquire_nowait()
                    return best
                await self._freed.wait()

    async def _unplace(self, node: Node) -> None:
        assert self._freed is not None
        self._slots[node.node_id].release()
        async with self._freed:
            self._freed.notify_all()

    async def open(self, request: OpenRequest) -> Session:
        if self._freed is None:
            await self.prepare()
        node = await self._place()
        labels = {**request.labels, "acx.node": node.name}
        req = msgspec.structs.replace(request, labels=labels)
        try:
            info = msgspec.convert(await self.call(node, P.Open(request=req), request.session_id), P.OpenInfo)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._unplace(node)
            raise
        self.stats.sessions_per_node[node.name] = self.stats.sessions_per_node.get(node.name, 0) + 1
        session = RemoteSession(self, node, request.session_id, info)
        return session

    async def model_gateway_address(self) -> str | None:
        # The gateway listens on the driver's machine: reachable from sandboxes of the local
        # cluster only (docs/cluster.md); the provider's own answer is for its local engine.
        return await self.inner_class(self.config).model_gateway_address()

    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        await self.cluster.connect()
        out: list[SessionRecord] = []
        for node in self._live():
            try:
                value = await self.call(node, P.ListSessions(labels=dict(labels) if labels else None))
            except DriverError as exc:
                log.warning("cannot list sandboxes on node %s: %s", node.name, exc)
                continue
            out += msgspec.convert(value, list[SessionRecord])
        return out

    async def close_session(self, session_id: str) -> None:
        await self.cluster.connect()
        for node in self._live():
            try:
                await self.call(node, P.CloseSession(session_id=session_id))
                return
            except DriverError as exc:
                if exc.code != "session_not_found":
                    raise
        raise DriverError(f"no node of the cluster has session {session_id}", code="session_not_found")

    async def end_run(self, session_prefix: str, keep: frozenset[str] = frozenset()) -> None:
        for node in self._live():
            try:
                await self.call(node, P.EndRun(session_prefix=session_prefix, keep=sorted(keep)))
            except DriverError as exc:
                log.warning("node %s: end of run: %s", node.name, exc)
        s = self.stats
        log.info(
            "cluster: %d call(s), sessions per node %s, nodes lost %s, late replies discarded %d",
            s.calls,
            s.sessions_per_node,
            sorted(s.nodes_lost),
            s.late_replies_discarded,
        )


class RemoteSession(Session):
    """A sandbox on a cluster node; every operation is one protocol call to its worker."""

    def __init__(self, driver: RemoteDriver, node: Node, session_id: str, info: P.OpenInfo) -> None:
        super().__init__(session_id=session_id, workdir=info.workdir, public_env=info.public_env)
        self.open_notes = list(info.open_notes)
        self.driver = driver
        self.node = node

    async def _call(self, op: Any) -> Any:
        if self.closed:
            raise DriverError(f"session {self.id} is closed")
        return await self.driver.call(self.node, op, self.id)

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
        op = P.Exec(argv=argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin, max_output_bytes=max_output_bytes)
        return msgspec.convert(await self._call(op), ExecResult)

    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        await self._call(P.WriteBytes(path=path, data=data, mode=mode))

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        return bytes(await self._call(P.ReadBytes(path=path, max_bytes=max_bytes)))

    async def is_file(self, path: str) -> bool:
        return bool(await self._call(P.IsFile(path=path)))

    async def is_dir(self, path: str) -> bool:
        return bool(await self._call(P.IsDir(path=path)))

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        import os

        if not os.path.isdir(local_dir):
            raise FileNotFoundError(local_dir)
        data = await trio.to_thread.run_sync(pack_dir, local_dir)
        await self._call(P.UploadDir(tar=data, remote_dir=remote_dir))

    async def download_dir(self, remote_dir: str, local_dir: str) -> None:
        data = bytes(await self._call(P.DownloadDir(remote_dir=remote_dir)))
        await trio.to_thread.run_sync(unpack_dir, data, local_dir)

    async def set_network_policy(self, policy: Any) -> None:
        await self._call(P.SetPolicy(policy=policy))

    async def endpoint(self, port: int) -> str:
        return str(await self._call(P.Endpoint(port=port)))

    async def kill_stray_processes(self) -> None:
        await self._call(P.KillStray())

    async def _close(self) -> None:
        try:
            if not self.node.alive:
                # Not released: the interpreter records it (release_failed) for --resume and gc.
                raise DriverError(
                    f"cluster node {self.node.name} was lost; its sandbox {self.id} is left for `acx gc --cluster`"
                )
            await self.driver.call(self.node, P.Close(), self.id)
        finally:
            with trio.CancelScope(shield=True):
                await self.driver._unplace(self.node)
