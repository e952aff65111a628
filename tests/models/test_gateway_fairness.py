"""One attempt cannot starve the others of the model (issue 24 item 1; contracts M2, M4): the
endpoint's connection slots are shared fairly among the gateway's sessions, the calls of a closed
session and of an agent that hung up are cancelled at once, and the default ``max_connections``
follows the run's concurrency.

The upstream is a real HTTP server on loopback that never answers a request whose prompt says
``hang`` (and answers the others at once), so the tests see exactly which calls hold a
connection."""

from __future__ import annotations

import json

import httpx
import trio
import trio.testing

from acx.models import Endpoint, Gateway, Role
from acx.models._client import _FairSlots

KEY = "sk-real-key-never-shown-fairness"
ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class Upstream:
    """Answers at once unless the request mentions ``hang``; counts connections."""

    def __init__(self) -> None:
        self.open = 0
        self.hanging = 0
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._conn, listeners)

    async def _conn(self, stream: trio.SocketStream) -> None:
        self.open += 1
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(buf) < length:
                    buf += await stream.receive_some(65536)
                body, buf = buf[:length], buf[length:]
                if b"stream-then-hang" in body:
                    self.hanging += 1
                    event = b'data: {"id":"x","object":"chat.completion.chunk","choices":[]}\n\n'
                    await stream.send_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(event), event)
                    )
                if b"hang" in body:
                    self.hanging += b"stream-then-hang" not in body
                    try:  # never answers; notices when the gateway closes the connection
                        while await stream.receive_some(65536):
                            pass
                        return
                    finally:
                        self.hanging -= 1
                out = json.dumps(ANSWER).encode()
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(out), out)
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            self.open -= 1


def _roles(up: Upstream, max_connections: int) -> dict[str, Role]:
    ep = Endpoint(
        base_url=f"http://127.0.0.1:{up.port}/v1",
        model="m",
        api_key=KEY,
        max_retries=0,
        max_connections=max_connections,
        read_timeout=600,
    )
    return {"agent": Role("agent", ep, None)}


def _body(prompt: str) -> dict:
    return {"model": "any", "messages": [{"role": "user", "content": prompt}]}


async def _until(pred, what: str) -> None:
    with trio.fail_after(30):  # bounded, not fast: a loaded machine
        while not pred():
            await trio.sleep(0.01)


async def _scenario(fn, max_connections: int = 8):
    up = Upstream()
    async with trio.open_nursery() as n:
        await n.start(up.serve)
        gw = Gateway(_roles(up, max_connections))
        await gw.start(n)
        try:
            return await fn(gw, up)
        finally:
            await gw.aclose()
            n.cancel_scope.cancel()


def _post(c: httpx.AsyncClient, gw: Gateway, token: str, prompt: str):
    return c.post(f"{gw.url()}/v1/chat/completions", json=_body(prompt), headers={"authorization": f"Bearer {token}"})


def test_a_hanging_session_leaves_the_others_a_slot_and_its_end_frees_all() -> None:  # contracts M2, M4
    """Attempt A sends 12 calls the model never answers (more than the endpoint's 8 slots);
    attempt B's calls still go through while A's hang, and closing A's session cancels its calls
    at once (recorded ``cancelled``), so B can use all 8 slots again."""

    async def fn(gw: Gateway, up: Upstream):
        a, b = gw.open_session("a/1"), gw.open_session("b/1")
        results: dict[str, list] = {"a": [], "b": []}
        async with httpx.AsyncClient(timeout=60) as c, trio.open_nursery() as n:

            async def call(name: str, token: str, prompt: str) -> None:
                results[name].append((await _post(c, gw, token, prompt)).status_code)

            for _ in range(12):
                n.start_soon(call, "a", a.token(), "please hang")
            await _until(lambda: up.hanging == 7, "A holds all slots but B's")
            await trio.sleep(0.2)
            assert up.hanging == 7  # one slot stays B's while B has none
            with trio.fail_after(30):
                await call("b", b.token(), "hello")
            assert results["b"] == [200]
            a.close()
            await _until(lambda: up.hanging == 0 and up.open <= 8, "A's calls cancelled")
            with trio.fail_after(30):
                async with trio.open_nursery() as m:
                    for _ in range(8):
                        m.start_soon(call, "b", b.token(), "hello")
        return a, results

    a, results = trio.run(_scenario, fn)
    assert results["b"] == [200] * 9
    assert len(results["a"]) == 12 and set(results["a"]) <= {503, 401}
    kinds = [c.error and c.error["kind"] for c in a.calls]
    assert kinds.count("cancelled") == 12, kinds
    assert all(KEY not in json.dumps(c.to_dict()) for c in a.calls)


def test_an_agent_that_hangs_up_cancels_its_calls_upstream() -> None:  # contracts M2, M4
    """An agent that exits with 8 calls pending (its connections close) frees the endpoint's slots
    at once, while its session is still open."""

    async def fn(gw: Gateway, up: Upstream):
        a, b = gw.open_session("a/1"), gw.open_session("b/1")
        async with trio.open_nursery() as n:
            client = httpx.AsyncClient(timeout=60)

            async def call() -> None:
                try:
                    await _post(client, gw, a.token(), "hang on")
                except (httpx.HTTPError, trio.Cancelled):
                    raise

            for _ in range(7):
                n.start_soon(call)
            await _until(lambda: up.hanging == 7, "A's calls in flight")
            n.cancel_scope.cancel()  # the agent dies: its connections close
        await client.aclose()
        await _until(lambda: up.hanging == 0, "A's upstream calls cancelled")
        await _until(lambda: sum(1 for c in a.calls if c.error and c.error["kind"] == "cancelled") == 7, "recorded")
        got = []
        async with httpx.AsyncClient(timeout=60) as c, trio.open_nursery() as m:

            async def ok() -> None:
                got.append((await _post(c, gw, b.token(), "hello")).status_code)

            with trio.fail_after(30):
                for _ in range(8):
                    m.start_soon(ok)
        assert not a.closed
        return got

    assert trio.run(_scenario, fn) == [200] * 8


def test_closing_a_session_ends_its_stream_that_the_model_left_hanging() -> None:  # contracts M2, M4
    async def fn(gw: Gateway, up: Upstream):
        a = gw.open_session("a/1")
        h = {"authorization": f"Bearer {a.token()}"}
        body = json.dumps({**_body("stream-then-hang"), "stream": True}).encode()
        status, relay, _ = await gw._handle("POST", "/v1/chat/completions", h, body)
        got = []
        with trio.fail_after(30):
            async with trio.open_nursery() as n:

                async def close_soon() -> None:
                    await _until(lambda: bool(got), "the first event")
                    a.close()

                n.start_soon(close_soon)
                async for piece in relay:
                    got.append(piece)
            await relay.aclose()
            await _until(lambda: up.hanging == 0, "the upstream connection closed")
        return status, got, a

    status, got, a = trio.run(_scenario, fn)
    assert status == 200 and len(got) == 1 and b"chat.completion.chunk" in got[0]
    assert a.calls[0].error is not None and a.calls[0].error["kind"] == "cancelled"


def test_default_max_connections_follows_the_run_concurrency() -> None:  # contract M2
    import msgspec

    from acx import ir
    from acx.models import roles_for

    def conns(concurrency: int, explicit: int | None = None) -> int:
        model = {"id": "m", "base_url": "http://127.0.0.1:1/v1", "max_connections": explicit}
        req = ir.RunRequest(
            model=msgspec.convert(model, ir.ModelSpec),
            benchmark=ir.BenchmarkSpec(id="b"),
            harness=ir.HarnessSpec(id="h"),
            environment=msgspec.convert({"id": "docker"}, ir.EnvironmentSpec),
            execution=msgspec.convert({"task_concurrency": concurrency}, ir.ExecutionSpec),
        )
        return roles_for(req, {})["agent"].endpoint.max_connections

    assert conns(32) == 64
    assert conns(2) == 8
    assert conns(32, explicit=5) == 5


# ---- the slot sharing itself -------------------------------------------------------------------


async def _taken(slots: _FairSlots, owner: str) -> bool:
    """Whether ``owner`` gets a slot without waiting."""
    with trio.move_on_after(0.01):
        await slots.acquire(owner)
        return True
    return False


def test_fair_slots_keep_one_for_every_open_owner_that_has_none() -> None:  # contract M2
    async def main() -> None:
        owners = {"a", "b", "c"}
        slots = _FairSlots(4, owners)
        assert await _taken(slots, "a")
        assert await _taken(slots, "a")  # 2 free left, for b and c
        assert not await _taken(slots, "a")
        assert await _taken(slots, "b")
        assert await _taken(slots, "c")
        assert slots.free == 0 and not slots.waiters  # the refused waits left no waiter behind
        owners.discard("c")
        slots.release("c")  # c is gone: its slot may go to a
        assert await _taken(slots, "a")

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_fair_slots_hand_a_freed_slot_to_the_owner_holding_fewest() -> None:  # contract M2
    async def main() -> None:
        owners = {"a", "b"}
        slots = _FairSlots(4, owners)
        for who in ("a", "a", "a", "b"):
            await slots.acquire(who)
        order: list[str] = []
        async with trio.open_nursery() as n:

            async def want(who: str) -> None:
                await slots.acquire(who)
                order.append(who)

            n.start_soon(want, "a")
            await trio.testing.wait_all_tasks_blocked()
            n.start_soon(want, "b")
            await trio.testing.wait_all_tasks_blocked()
            slots.release("a")  # a waited first, but b holds fewer (1 against 2)
            await trio.testing.wait_all_tasks_blocked()
            assert order == ["b"]
            slots.release("b")
        assert order == ["b", "a"]
        assert slots.held == {"a": 3, "b": 1} and slots.free == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_fair_slots_a_cancelled_wait_gives_nothing_away() -> None:  # contract M2
    async def main() -> None:
        slots = _FairSlots(1, {"a", "b"})
        await slots.acquire("a")
        with trio.move_on_after(5):
            await slots.acquire("b")
        assert slots.free == 0 and slots.held == {"a": 1} and not slots.waiters
        slots.release("a")
        assert slots.free == 1 and slots.held == {}

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
