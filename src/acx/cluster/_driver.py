"""``RemoteDriver``/``RemoteSession``: the interpreter's Driver/Session contract, served by the
acx workers of a cluster. The interpreter stays the one scheduler and the only writer of the
journal and results: it only sees a driver whose sandboxes happen to live on other nodes.

Placement (:class:`Dispatcher`, over the pure :class:`acx.cluster._placement.Placer` shared by
every driver on one cluster): a session goes to a live node that meets its need (serves its
provider) and has a free slot (``acx_slots``), a free per-node provider slot and an open token of
the per-node open rate; otherwise ``open`` waits (back-pressure) instead of queueing on one node.
A node lost mid-attempt fails that attempt's session calls with ``node_lost`` and marks the
session :attr:`~acx.drivers.Session.infrastructure_lost`: the interpreter runs the attempt again on
another node without consuming ``max_retries``, at most ``max_infrastructure_losses`` times
(``runtime.cluster.max_node_losses``); its sandboxes are found again by label (``acx gc --cluster``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import msgspec
import trio

from acx.cluster import _protocol as P
from acx.cluster._placement import Need, NodeState, Placer
from acx.cluster._ray import Node, NodeLost, RayCluster, declared_drivers
from acx.cluster._worker import pack_dir, unpack_dir
from acx.drivers import DRIVERS, Driver, DriverCapabilities, ExecResult, OpenRequest, Session, SessionRecord
from acx.errors import AcxUserError, CapabilityError, DriverError, EnvironmentSetupError

__all__ = ["ClusterStats", "Dispatcher", "RemoteDriver", "RemoteSession", "dispatcher"]

log = logging.getLogger("acx.cluster")

#: Issue code of a call whose node was lost (its attempt re-runs elsewhere, outside ``max_retries``).
NODE_LOST = "node_lost"


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


#: Per attempt, how often a node loss re-runs it without consuming ``max_retries`` by default.
DEFAULT_MAX_NODE_LOSSES = 2


class Dispatcher:
    """Placement on one cluster, shared by every driver using it: waits (trio) on the pure
    :class:`Placer` until a node that meets the need has room and an open token."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.states = {n.node_id: NodeState(n.name, n.slots, drivers=declared_drivers(n.labels)) for n in nodes}
        self.placer = Placer(self.states.values())
        self.changed = trio.Condition()
        self._asking: dict[tuple[str, str, str], trio.Lock] = {}

    def state(self, node: Node) -> NodeState:
        return self.states[node.node_id]

    def _sync(self) -> None:
        for node in self.nodes:
            self.states[node.node_id].alive = node.alive

    def unmet(self, need: Need) -> str | None:
        self._sync()
        return self.placer.unmet(need)

    async def place(self, need: Need) -> Node:
        """A node for ``need``, one slot of it held; waits while none has room (back-pressure)."""
        by_state = {id(self.states[n.node_id]): n for n in self.nodes}
        async with self.changed:
            while True:
                unmet = self.unmet(need)
                if unmet is not None:  # e.g. the only node serving the provider was lost
                    raise DriverError(unmet, code="no_node_for_need")
                now = trio.current_time()
                state, at = self.placer.choose(need, now)
                if state is not None:
                    self.placer.take(state, need, now)
                    return by_state[id(state)]
                with trio.move_on_at(at):
                    await self.changed.wait()

    async def learn(self, need: Need, ask: Callable[[Node, list[str]], Awaitable[list[str]]]) -> None:
        """Ask every live node that serves ``need.driver`` and has not said yet whether its
        provider can give ``need.image`` (one question per node and image, ever)."""
        if need.image is None:
            return
        self._sync()
        key = (need.driver, need.image)
        for node in self.nodes:
            state = self.states[node.node_id]
            lock = self._asking.setdefault((node.node_id, *key), trio.Lock())
            async with lock:
                if key in state.images or state.why_not(Need(need.driver)) is not None:
                    continue
                try:
                    missing = await ask(node, [need.image])
                except DriverError as exc:  # lost meanwhile (why_not says so), or cannot tell
                    log.warning("node %s: cannot tell whether it has image %s: %s", node.name, need.image, exc)
                    continue
                state.images[key] = need.image not in missing

    async def release(self, node: Node, need: Need) -> None:
        self.placer.release(self.state(node), need)
        async with self.changed:
            self.changed.notify_all()


def dispatcher(cluster: RayCluster) -> Dispatcher:
    """The cluster's :class:`Dispatcher` (one per cluster connection; nodes as connected)."""
    if cluster.dispatcher is None:
        cluster.dispatcher = Dispatcher(cluster.nodes)
    return cluster.dispatcher  # type: ignore[no-any-return]


class RemoteDriver(Driver):
    """A driver whose sessions are opened by the acx worker of a cluster node."""

    def __init__(
        self,
        cluster: RayCluster,
        env_id: str,
        params: Mapping[str, Any] | None = None,
        *,
        max_node_losses: int = DEFAULT_MAX_NODE_LOSSES,
        node_provider_limits: Mapping[str, int] | None = None,
        node_open_qps: Mapping[str, float] | None = None,
        images: Iterable[str] = (),
    ) -> None:
        info = DRIVERS[env_id]
        self.inner_class: type[Driver] = info.load()
        super().__init__(msgspec.convert(dict(params or {}), type=info.config_class))
        self.id = env_id  # type: ignore[misc]  # the provider id the journal records
        self.sessions_discoverable = self.inner_class.sessions_discoverable  # type: ignore[misc]
        self.max_infrastructure_losses = max_node_losses  # type: ignore[misc]
        self.cluster = cluster
        self.ref = P.DriverRef(env_id=env_id, params=dict(params or {}))
        self.stats = ClusterStats()
        #: Node name → why its sandboxes were not listed by the last :meth:`list_sessions`.
        self.unlisted: dict[str, str] = {}
        self.node_provider_limits = dict(node_provider_limits or {})
        self.node_open_qps = dict(node_open_qps or {})
        #: Images every sandbox of the plan needs (its environment's ``setup.image``): checked at start.
        self.images = sorted(set(images))
        self._dispatch: Dispatcher | None = None
        #: session id → the node admit() placed it on (and its need), until open() takes it.
        self._admitted: dict[str, tuple[Node, Need]] = {}
        self._seq = itertools.count(1)

    # ---- plumbing ----------------------------------------------------------------------------
    def capabilities(self) -> DriverCapabilities:
        # The install cache runs the harness's install against a sandbox of this process's own
        # driver (Driver.cached_install); a node's driver is reached only through the worker.
        caps = self.inner_class(self.config).capabilities()
        return msgspec.structs.replace(caps, install_cache=False)

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
            err = DriverError(f"cluster node {node.name} was lost; its sandbox is gone with it", code=NODE_LOST)
            err.infrastructure_lost = True  # the interpreter's retries: its own budget
            raise err from None
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
        """Live nodes that may hold sandboxes of this provider (those declaring others never do)."""
        return [n for n in self.cluster.nodes if n.alive and self._serves(n)]

    def _serves(self, node: Node) -> bool:
        """Whether ``node`` declares this provider (a node that declares none serves any)."""
        drivers = declared_drivers(node.labels)
        return drivers is None or self.id in drivers

    # ---- driver hooks ------------------------------------------------------------------------
    async def prepare(self) -> list[str]:
        nodes = await self.cluster.connect()
        dispatch = dispatcher(self.cluster)
        dispatch.placer.configure(self.node_provider_limits, self.node_open_qps)
        notes = [
            f"cluster {self.cluster.address}: {len(nodes)} node(s): "
            + ", ".join(f"{n.name} ({n.slots} slots)" for n in nodes)
        ]
        for node in nodes:
            if not node.alive:
                notes.append(f"{node.name}: does not answer; no sandbox goes there")
                continue
            if not self._serves(node):
                continue
            try:
                notes += [f"{node.name}: {n}" for n in await self.call(node, P.Hello())]
            except DriverError as exc:
                # That node does not serve this provider; the run fails below only if none does.
                dispatch.state(node).refused[self.id] = str(exc)
                notes.append(f"{node.name}: cannot serve {self.id}: {exc}")
        unmet = dispatch.unmet(Need(self.id))
        if unmet is not None:
            raise EnvironmentSetupError(
                unmet,
                help=f"start a node that serves it (`ray start --resources` with acx_slots and "
                f"acx_driver_{self.id}; docs/cluster.md), or choose a provider the nodes serve",
            )
        for image in self.images:
            await dispatch.learn(Need(self.id, image), self._missing_images)
            unmet = dispatch.unmet(Need(self.id, image))
            if unmet is not None:
                raise EnvironmentSetupError(
                    unmet,
                    help="put the image on a node's engine (docker load / docker build there), or let the "
                    "provider fetch it (docker params `pull: missing`)",
                )
        self._dispatch = dispatch
        return notes

    async def admit(self, request: OpenRequest) -> None:
        """Place the sandbox (waiting for a node with room: back-pressure) before its setup
        deadline starts; :meth:`open` uses the node held here."""
        if self._dispatch is None:
            await self.prepare()
        assert self._dispatch is not None
        need = Need(self.id, request.setup.image)
        await self._dispatch.learn(need, self._missing_images)
        self._admitted[request.session_id] = (await self._dispatch.place(need), need)

    async def open(self, request: OpenRequest) -> Session:
        held = self._admitted.pop(request.session_id, None)  # before any checkpoint: never leaked
        if held is None:
            await self.admit(request)
            held = self._admitted.pop(request.session_id)
        assert self._dispatch is not None
        node, need = held
        labels = {**request.labels, "acx.node": node.name}
        req = msgspec.structs.replace(request, labels=labels)
        try:
            info = msgspec.convert(await self.call(node, P.Open(request=req), request.session_id), P.OpenInfo)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._dispatch.release(node, need)
            raise
        self.stats.sessions_per_node[node.name] = self.stats.sessions_per_node.get(node.name, 0) + 1
        return RemoteSession(self, node, need, request.session_id, info)

    async def _missing_images(self, node: Node, images: list[str]) -> list[str]:
        return msgspec.convert(await self.call(node, P.MissingImages(images=images)), list[str])

    async def _unplace(self, node: Node, need: Need) -> None:
        assert self._dispatch is not None
        await self._dispatch.release(node, need)

    async def model_gateway_address(self) -> str | None:
        # The gateway listens on the driver's machine: reachable from sandboxes of the local
        # cluster only (docs/cluster.md); the provider's own answer is for its local engine.
        return await self.inner_class(self.config).model_gateway_address()

    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        """The sandboxes of every live node; the nodes that could not be asked are left in
        :attr:`unlisted` (``acx gc``/``acx env`` report them: their sandboxes were not looked at)."""
        await self.cluster.connect()
        out: list[SessionRecord] = []
        self.unlisted = {
            n.name: "its acx worker does not answer" for n in self.cluster.nodes if not n.alive and self._serves(n)
        }
        for node in self._live():
            try:
                value = await self.call(node, P.ListSessions(labels=dict(labels) if labels else None))
            except DriverError as exc:
                log.warning("cannot list sandboxes on node %s: %s", node.name, exc)
                self.unlisted[node.name] = str(exc)
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

    #: Forwarded with each command; the worker refuses it where its own session cannot.
    supports_exec_user = True

    def __init__(self, driver: RemoteDriver, node: Node, need: Need, session_id: str, info: P.OpenInfo) -> None:
        super().__init__(session_id=session_id, workdir=info.workdir, public_env=info.public_env)
        self.open_notes = list(info.open_notes)
        self.driver = driver
        self.node = node
        self.need = need

    @property
    def infrastructure_lost(self) -> bool:  # type: ignore[override]
        # Lost with its node: not the task's doing (its own retry budget, the interpreter's).
        return not self.node.alive

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
        op = P.Exec(
            argv=argv,
            cwd=cwd,
            env=env,
            timeout=timeout,
            stdin=stdin,
            max_output_bytes=max_output_bytes,
            user=self.current_user(),
        )
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
                await self.driver._unplace(self.node, self.need)
