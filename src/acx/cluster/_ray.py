"""The Ray edge: the only module that imports ``ray``.

One long-lived, detached :class:`AcxWorker` actor per node that advertises ``acx_slots`` (named
after the node, so a resumed driver re-attaches to the same workers and the sessions they hold).
Actors are created with ``max_restarts=0`` and ``max_task_retries=0``: Ray never re-runs anything
on its own; every re-run is the interpreter's decision (its retries), journaled by it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from acx.cluster import _protocol as P
from acx.errors import DriverError, EnvironmentSetupError

__all__ = ["Node", "RayCluster", "connect", "declared_drivers"]

log = logging.getLogger("acx.cluster")

#: Resource a node advertises to host an acx worker (its sandbox capacity).
SLOTS = "acx_slots"
#: Prefix of a custom resource naming a node (``acx_node_<name>``): its label in reports and gc.
NODE_LABEL = "acx_node_"
#: Prefix of a custom resource declaring a provider the node serves (``acx_driver_docker``). A node
#: that declares none serves every provider.
DRIVER_LABEL = "acx_driver_"
NAMESPACE = "acx"
#: A call whose worker is "temporarily unavailable" is sent again this many times (after
#: UNAVAILABLE_DELAY, 2×, 3×… seconds) before its node counts as lost.
UNAVAILABLE_RETRIES = 4
UNAVAILABLE_DELAY = 0.5


def declared_drivers(labels: dict[str, float]) -> frozenset[str] | None:
    """The providers a node declares (``acx_driver_<id>`` resources), or None when it declares none."""
    drivers = frozenset(k[len(DRIVER_LABEL) :] for k, v in labels.items() if k.startswith(DRIVER_LABEL) and v > 0)
    return drivers or None


class NodeLost(Exception):
    """The worker of a node is gone (node killed, actor died): its calls may or may not have run."""


@dataclass
class Node:
    node_id: str
    name: str
    address: str
    slots: int
    labels: dict[str, float]
    handle: Any = None
    alive: bool = True
    #: Where the node worker's fast channel listens, and its secret (asked through Ray at connect).
    channel_addr: tuple[str, int, bytes] | None = None
    #: The open channel of the current trio run (acx.cluster._channel.Channel), if any.
    channel: Any = None


def _worker_class() -> Any:
    import ray

    from acx.cluster._channel import ChannelServer
    from acx.cluster._worker import TrioThread, WorkerCore

    class AcxWorker:
        """Hosts a :class:`WorkerCore` in its own trio loop; sync methods run in the actor's
        thread pool (``max_concurrency``), each blocking on its call in the trio thread."""

        def __init__(self, node: str) -> None:
            self.core = WorkerCore(node)
            self.core.notes = _unnice()
            self.loop = TrioThread()
            self.server: ChannelServer | None = None

        def handle(self, data: bytes) -> bytes:
            return self.loop.call(self.core.handle, data)  # type: ignore[no-any-return]

        def ping(self) -> str:
            return self.core.node

        def channel(self, host: str) -> tuple[str, int, bytes]:
            """Where this worker's fast channel listens (on ``host``, the node's address as Ray
            knows it; started on first ask), and its secret."""
            if self.server is None:
                self.server = ChannelServer(self.core.handle)
            return self.loop.call(self.server.start, host)  # type: ignore[no-any-return]

    return ray.remote(AcxWorker)


def _unnice() -> list[str]:
    """Ray starts workers at niceness 15 (its ``worker_niceness``): the acx worker and every sandbox
    process it starts would get a sliver of a busy node's CPU. Back to 0 where allowed; otherwise a
    note for the run's start (the node should be started with ``RAY_worker_niceness=0``)."""
    import os

    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice <= 0:
        return []
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
        return []
    except OSError:
        return [
            f"its acx worker runs at niceness {nice} (Ray's worker_niceness): sandboxes there get little "
            "CPU on a busy node; start the node with RAY_worker_niceness=0 (docs/cluster.md)"
        ]


_CONNECTED: str | None = None


def _init(address: str) -> None:
    global _CONNECTED
    import ray

    if address == _CONNECTED and ray.is_initialized():
        return
    if ray.is_initialized():
        ray.shutdown()
    _probe(address)
    try:
        ray.init(
            address=address,
            namespace=NAMESPACE,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EnvironmentSetupError(
            f"cannot connect to the Ray cluster at {address}: {exc}",
            help="start one with `bash scripts/ray-local-cluster.sh start` or pass --cluster ray://HEAD:PORT",
        ) from None
    _CONNECTED = address


def _probe(address: str) -> None:
    """A head that does not answer is refused in seconds (ray.init would retry for minutes)."""
    import socket

    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise EnvironmentSetupError(
            f"cannot connect to the Ray cluster at {address}: {exc.strerror or exc}",
            help="start one with `bash scripts/ray-local-cluster.sh start` or pass --cluster ray://HEAD:PORT",
        ) from None


def _discover() -> list[Node]:
    import ray

    nodes = []
    for n in ray.nodes():  # type: ignore[no-untyped-call]
        res = n.get("Resources") or {}
        slots = int(res.get(SLOTS, 0))
        if not n.get("Alive") or slots <= 0:
            continue
        labels = {k: v for k, v in res.items() if k.startswith((NODE_LABEL, DRIVER_LABEL))}
        name = next((k[len(NODE_LABEL) :] for k in sorted(labels) if k.startswith(NODE_LABEL)), None)
        name = name or n["NodeID"][:12]
        nodes.append(Node(n["NodeID"], name, n.get("NodeManagerAddress", "?"), slots, labels))
    return nodes


def _start_workers(nodes: list[Node]) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cls = _worker_class()
    for node in nodes:
        node.handle = cls.options(
            name=f"acx-worker-{node.node_id}",
            namespace=NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            num_cpus=0,
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=max(64, 4 * node.slots),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        ).remote(node.name)
    # One round trip each: the actor is up (its __init__ ran) before the first sandbox is asked
    # for. A node that does not answer (killed, not yet known dead to the head) gets no sandbox.
    pings = {n.node_id: n.handle.ping.remote() for n in nodes}
    deadline = time.monotonic() + 60
    for node in nodes:
        while True:
            try:
                ray.get(pings[node.node_id], timeout=max(1.0, deadline - time.monotonic()))
                break
            except ray.exceptions.ActorUnavailableError as exc:
                # "temporarily unavailable" (a busy machine's RPC hiccup): asked again until the
                # deadline; a dead worker is ActorDiedError (or a timeout) and gets no sandbox.
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    pings[node.node_id] = node.handle.ping.remote()
                    continue
                _unanswered(node, exc)
                break
            except (ray.exceptions.RayError, TimeoutError) as exc:
                _unanswered(node, exc)
                break
    _open_channels([n for n in nodes if n.alive], deadline)


def _open_channels(nodes: list[Node], deadline: float) -> None:
    """Ask each worker where its fast channel listens. A worker that cannot say (an older acx
    worker still running: no such method) keeps getting every call as a Ray actor call."""
    import ray

    asks: dict[str, Any] = {}
    for node in nodes:
        try:
            asks[node.node_id] = node.handle.channel.remote(node.address)
        except AttributeError as exc:  # the running worker's class has no such method
            log.warning("cluster node %s: no fast channel (calls go through Ray): %s", node.name, exc)
    for node in nodes:
        if node.node_id not in asks:
            continue
        try:
            host, port, secret = ray.get(asks[node.node_id], timeout=max(1.0, deadline - time.monotonic()))
            node.channel_addr = (str(host), int(port), bytes(secret))
        except (ray.exceptions.RayError, TimeoutError, ValueError, TypeError) as exc:
            log.warning("cluster node %s: no fast channel (calls go through Ray): %s", node.name, exc)


def _unanswered(node: Node, exc: BaseException) -> None:
    node.alive = False
    log.warning("cluster node %s does not answer; no sandbox goes there: %s", node.name, exc)


def connect(address: str) -> list[Node]:
    """Connect (blocking) and make sure every ``acx_slots`` node has its worker."""
    _init(address)
    nodes = _discover()
    if not nodes:
        raise EnvironmentSetupError(
            f"no node of the Ray cluster at {address} advertises {SLOTS}",
            help="start worker nodes with --resources '{\"acx_slots\": N}' (scripts/ray-local-cluster.sh does)",
        )
    _start_workers(nodes)
    if not any(n.alive for n in nodes):
        raise EnvironmentSetupError(f"no acx worker of the Ray cluster at {address} answers")
    return nodes


class RayCluster:
    """Driver-side handle: sends encoded calls to node workers from trio without blocking it."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.nodes: list[Node] = []
        #: Placement on these nodes, shared by every driver (acx.cluster._driver.dispatcher).
        self.dispatcher: Any = None

    async def connect(self) -> list[Node]:
        if not self.nodes:
            # In the calling (main) thread: Ray installs its signal handlers only there. Blocking
            # the loop is fine here: this runs before any sandbox (Driver.prepare, gc).
            self.nodes = connect(self.address)
        return self.nodes

    async def send(self, node: Node, data: bytes, on_late: Callable[[], None]) -> bytes:
        """One call to ``node``'s worker. Raises :class:`NodeLost` when the worker is gone. If the
        caller is cancelled, the reply that may still come is handed to nobody: ``on_late`` counts it."""
        if not node.alive:
            raise NodeLost(node.name)
        if node.channel_addr is not None:
            return await self._send_channel(node, data, on_late)
        return await self._send_ray(node, data, on_late)

    async def _send_channel(self, node: Node, data: bytes, on_late: Callable[[], None]) -> bytes:
        from acx.cluster._channel import Channel, ChannelClosed

        assert node.channel_addr is not None
        if node.channel is None or not node.channel.usable():
            node.channel = Channel(*node.channel_addr)
        try:
            return await node.channel.call(data, on_late)  # type: ignore[no-any-return]
        except ChannelClosed as exc:
            # Only the worker's process ending closes its side (or keepalive finding the peer
            # gone): the node's worker, and the sandboxes it held, are lost.
            log.warning("cluster node %s: channel to its worker closed: %s", node.name, exc)
            node.alive = False
            raise NodeLost(node.name) from None

    async def _send_ray(self, node: Node, data: bytes, on_late: Callable[[], None]) -> bytes:
        """One actor call. "Temporarily unavailable" (a busy machine's RPC hiccup: the actor may or
        may not have run it) sends the same call again, at most :data:`UNAVAILABLE_RETRIES` times,
        before the node counts as lost; the worker answers a key it has seen with that call's one
        reply (it never runs a call twice)."""
        import ray

        for retry in range(UNAVAILABLE_RETRIES + 1):
            try:
                return await self._ray_call(node, data, on_late)
            except ray.exceptions.ActorUnavailableError as exc:
                if retry == UNAVAILABLE_RETRIES:
                    log.warning("cluster node %s: its worker stayed unavailable: %s", node.name, exc)
                    break
                log.info("cluster node %s: worker temporarily unavailable, asking again: %s", node.name, exc)
                await trio.sleep(UNAVAILABLE_DELAY * (retry + 1))
                data = P.resent(data)
            except ray.exceptions.RayActorError:
                break
        node.alive = False
        raise NodeLost(node.name)

    async def _ray_call(self, node: Node, data: bytes, on_late: Callable[[], None]) -> bytes:
        ref = node.handle.handle.remote(data)
        fut = ref.future()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        state = {"waiting": True}

        def finished(_: Any) -> None:
            try:
                token.run_sync_soon(_settle)
            except trio.RunFinishedError:
                pass

        def _settle() -> None:
            if state["waiting"]:
                done.set()
            elif fut.exception() is None:
                on_late()  # a reply nobody waits for any more: discarded, counted

        fut.add_done_callback(finished)
        try:
            await done.wait()
        except BaseException:
            state["waiting"] = False
            raise
        state["waiting"] = False
        exc = fut.exception()
        if exc is not None:
            import ray

            if isinstance(exc, ray.exceptions.RayActorError):  # ActorUnavailableError included
                raise exc
            raise DriverError(f"acx worker on node {node.name} failed: {exc}", code="sandbox_stopped") from None
        return fut.result()  # type: ignore[no-any-return]

    def send_nowait(self, node: Node, data: bytes) -> None:
        """Fire and forget (a cancel): its reply is never read."""
        if node.alive:
            try:
                node.handle.handle.remote(data)
            except Exception as exc:  # a node that just died: nothing left to cancel there
                log.debug("cancel to %s not sent: %s", node.name, exc)
