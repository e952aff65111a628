"""The driver ⇄ worker fast channel (acx.cluster._channel) without Ray: a real TCP stream on
loopback between a ChannelServer in a worker trio thread and the driver's Channel. Contracts:
issue 18 item 1 (every session operation reaches the node's worker; late replies discarded and
counted), item 3 (a worker that goes away fails its calls as a lost node), and the
Driver/Session contract (E1, E2, T3, V2) through the channel."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from acx.cluster._channel import Channel, ChannelClosed, ChannelServer, frame
from acx.cluster._driver import RemoteDriver
from acx.cluster._ray import Node, NodeLost, RayCluster
from acx.cluster._worker import TrioThread, WorkerCore
from acx.testing import driver_conformance as dc


class ChannelCluster(RayCluster):
    """RayCluster's own send path, with the node's worker core served by a ChannelServer in its
    own trio thread (what the actor hosts); only the cancel side channel is faked (a thread)."""

    def __init__(self) -> None:
        super().__init__("loopback")
        self.core = WorkerCore("n1")
        self.thread = TrioThread()
        self.server = ChannelServer(self.core.handle)
        addr = self.thread.call(self.server.start, "127.0.0.1")
        self.nodes = [Node("id-n1", "n1", "127.0.0.1", 4, {}, channel_addr=addr)]

    async def connect(self) -> list[Node]:
        return self.nodes

    def send_nowait(self, node: Node, data: bytes) -> None:
        threading.Thread(target=self.thread.call, args=(self.core.handle, data), daemon=True).start()


@pytest.fixture(scope="module")
def cluster() -> ChannelCluster:
    return ChannelCluster()


CHECKS = [c for c in dc.CHECKS if c.name != "capabilities"]


# contract E1 E2 T3 V2 (through the channel): the driver conformance checks.
@pytest.mark.parametrize("check", CHECKS, ids=dc.check_id)
def test_conformance_through_the_channel(check: dc.Check, cluster: ChannelCluster, tmp_path: Path) -> None:
    dc.run_check(check, lambda: RemoteDriver(cluster, "host_process"), scratch=tmp_path)


def _server(handle: Any) -> tuple[TrioThread, tuple[str, int, bytes]]:
    thread = TrioThread()
    return thread, thread.call(ChannelServer(handle).start, "127.0.0.1")


def test_concurrent_calls_get_their_own_replies_in_any_order() -> None:
    # issue 18 item 1: replies are routed by request id, whatever order the worker finishes in.
    async def handle(data: bytes) -> bytes:
        await trio.sleep(float(data.decode()) / 100)
        return b"re:" + data

    _, addr = _server(handle)
    got: dict[str, bytes] = {}

    async def main() -> None:
        ch = Channel(*addr)

        async def one(s: str) -> None:
            got[s] = await ch.call(s.encode(), lambda: None)

        async with trio.open_nursery() as n:
            for s in ["5", "1", "3", "0", "4", "2"]:
                n.start_soon(one, s)

    trio.run(main)
    assert got == {s: b"re:" + s.encode() for s in "012345"}


def test_a_reply_after_the_caller_gave_up_is_discarded_and_counted() -> None:
    # issue 18 item 1: a late reply is never applied; it is counted.
    release = threading.Event()

    async def handle(data: bytes) -> bytes:
        await trio.to_thread.run_sync(release.wait)
        return b"late"

    _, addr = _server(handle)
    late: list[int] = []

    async def main() -> None:
        ch = Channel(*addr)
        with trio.move_on_after(0.2):
            await ch.call(b"x", lambda: late.append(1))
        release.set()
        with trio.fail_after(10):
            while not late:
                await trio.sleep(0.01)
        assert await ch.call(b"y", lambda: None) == b"late"  # the channel still works

    trio.run(main)
    assert late == [1]


def test_a_worker_that_goes_away_fails_waiting_calls_as_a_lost_node() -> None:
    # issue 18 item 3: the worker's process ending closes its side: its calls fail, node lost.
    async def main() -> None:
        accepted = trio.Event()

        async def serve(stream: trio.SocketStream) -> None:
            await stream.receive_some(1 << 16)  # the secret and the call, then the process "dies"
            accepted.set()
            await stream.aclose()

        async with trio.open_nursery() as n:
            listeners = await n.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            rc = RayCluster("loopback")
            node = Node("id", "n1", "127.0.0.1", 1, {}, channel_addr=("127.0.0.1", port, b"s" * 32))
            with trio.fail_after(10), pytest.raises(NodeLost):
                await rc.send(node, b"call", lambda: None)
            assert not node.alive
            with pytest.raises(NodeLost):  # and no call goes there any more
                await rc.send(node, b"call", lambda: None)
            n.cancel_scope.cancel()

    trio.run(main)


def test_a_connection_without_the_secret_is_closed_unanswered() -> None:
    # The channel listens on the node's address: only a driver that learned the secret through
    # Ray gets a call run.
    ran: list[bytes] = []

    async def handle(data: bytes) -> bytes:
        ran.append(data)
        return b"ok"

    _, (host, port, secret) = _server(handle)

    async def main() -> None:
        with trio.fail_after(10):
            with pytest.raises(ChannelClosed):
                await Channel(host, port, b"x" * 32).call(b"run this", lambda: None)
            stream = await trio.open_tcp_stream(host, port)  # a frame too big is refused too
            await stream.send_all(frame(0, secret) + (2**31).to_bytes(4, "big") + b"\0" * 8)
            assert await stream.receive_some(10) == b""
        assert await Channel(host, port, secret).call(b"ok?", lambda: None) == b"ok"

    trio.run(main)
    assert ran == [b"ok?"]


def test_before_the_secret_only_one_small_frame_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # An unauthenticated peer cannot make the worker buffer a large frame: a first frame longer than
    # the secret's is refused from its length alone (nothing of its body is awaited), and a silent
    # peer is closed after AUTH_TIMEOUT_SECONDS (shortened here).
    from acx.cluster import _channel

    monkeypatch.setattr(_channel, "AUTH_TIMEOUT_SECONDS", 0.3)

    async def handle(data: bytes) -> bytes:
        return b"ok"

    _, (host, port, secret) = _server(handle)

    async def main() -> None:
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream(host, port)
            await stream.send_all((1 << 20).to_bytes(4, "big") + b"\0" * 8)  # 1 MiB claimed, never sent
            assert await stream.receive_some(10) == b""
            silent = await trio.open_tcp_stream(host, port)
            assert await silent.receive_some(10) == b""  # closed by the worker, not by this test
        assert await Channel(host, port, secret).call(b"ok?", lambda: None) == b"ok"

    trio.run(main)


def test_one_channel_per_trio_run() -> None:
    # The bench and the API run prepare and the run in separate trio runs: each gets its own.
    async def handle(data: bytes) -> bytes:
        return data

    _, addr = _server(handle)
    rc = RayCluster("loopback")
    node = Node("id", "n1", "127.0.0.1", 1, {}, channel_addr=addr)
    for _ in range(2):
        assert trio.run(rc.send, node, b"ping", lambda: None) == b"ping"
    assert node.alive


def test_a_worker_without_a_channel_keeps_the_ray_path() -> None:
    # An older acx worker still running on a node (no `channel` method): connect does not fail;
    # its calls keep going through Ray (send takes the Ray path when channel_addr is None).
    pytest.importorskip("ray")
    import time

    from acx.cluster._ray import _open_channels

    class OldHandle:
        pass

    node = Node("id", "n1", "127.0.0.1", 1, {}, handle=OldHandle())
    _open_channels([node], time.monotonic() + 5)
    assert node.channel_addr is None and node.alive
