"""The model-call cache in the gateway (issue 26 item 1): answers stored per canonical request,
re-served — streamed ones as the same events, which real SDK clients assemble into the same
message — in ``read``/``replay`` modes with the model server stopped; a ``replay`` miss is an
error the agent sees; concurrent and killed writers; LRU bound; no secret in an entry.
Contracts M4 (no key in any record), M6 (call records)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acx.models import (
    CallCache,
    ChatRequest,
    Endpoint,
    Gateway,
    ModelCallError,
    Price,
    Role,
    actf_trajectory,
    cache_key,
)
from acx.testing.fake_models import FakeModelServer, reflected, text, tool_call

KEY = "sk-cache-test-real-key-0042"
PROTOCOLS = ["openai-chat", "openai-responses", "anthropic"]


def role(base: str, protocol: str, mode: str) -> dict[str, Role]:
    url = base if protocol == "anthropic" else f"{base}/v1"
    ep = Endpoint(base_url=url, model="real-model", protocol=protocol, api_key=KEY, max_retries=0)  # type: ignore[arg-type]
    return {"agent": Role("agent", ep, Price(1.0, 2.0), cache=mode)}


async def with_gateway(rs: dict[str, Role], cache: CallCache, fn: Any) -> Any:
    async with trio.open_nursery() as n:
        gw = Gateway(rs, cache=cache)
        await gw.start(n)
        try:
            return await fn(gw)
        finally:
            await gw.aclose()


def sdk_calls(protocol: str, env: dict[str, str]) -> list[Any]:
    """A streamed and a plain call with the protocol's real SDK; what the SDK assembled."""
    if protocol == "anthropic":
        import anthropic

        a = anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"], api_key=env["ANTHROPIC_API_KEY"], max_retries=0)
        msgs = [{"role": "user", "content": "list the files"}]
        with a.messages.stream(model="x", max_tokens=64, messages=msgs) as s:  # type: ignore[arg-type]
            events = [e.model_dump() for e in s]
            final = s.get_final_message().model_dump()
        plain = a.messages.create(model="x", max_tokens=64, messages=[{"role": "user", "content": "hi"}]).model_dump()
        return [events, final, plain]
    import openai

    o = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0)
    if protocol == "openai-chat":
        msgs = [{"role": "user", "content": "list the files"}]
        chunks = [c.model_dump() for c in o.chat.completions.create(model="x", messages=msgs, stream=True)]  # type: ignore[arg-type]
        plain = o.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}]).model_dump()  # type: ignore[arg-type]
        return [chunks, plain]
    events = [e.model_dump() for e in o.responses.create(model="x", input="list the files", stream=True)]
    plain = o.responses.create(model="x", input="hi").model_dump()
    return [events, plain]


def raw_stream(protocol: str, env: dict[str, str]) -> bytes:
    if protocol == "anthropic":
        url, h = f"{env['ANTHROPIC_BASE_URL']}/v1/messages", {"x-api-key": env["ANTHROPIC_API_KEY"]}
        body: dict[str, Any] = {"max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": "raw"}]}
    else:
        path = "chat/completions" if protocol == "openai-chat" else "responses"
        url, h = f"{env['OPENAI_BASE_URL']}/{path}", {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
        body = {
            "stream": True,
            **({"messages": [{"role": "user", "content": "raw"}]} if protocol == "openai-chat" else {"input": "raw"}),
        }
    with httpx.stream("POST", url, headers=h, json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return b"".join(r.iter_raw())


def session_run(base: str, protocol: str, mode: str, cache: CallCache) -> tuple[list[Any], bytes, Any]:
    async def fn(gw: Gateway) -> tuple[list[Any], bytes, Any]:
        s = gw.open_session("t/attempt-1/try-1")
        env = s.env()
        got = await trio.to_thread.run_sync(sdk_calls, protocol, env)
        raw = await trio.to_thread.run_sync(raw_stream, protocol, env)
        await trio.sleep(0.05)  # the last stream's record is finished after its final bytes
        s.close()
        return got, raw, s

    return trio.run(with_gateway, role(base, protocol, mode), cache, fn)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_write_then_replay_with_the_server_stopped_re_streams_identically(protocol: str, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    cache = CallCache(tmp_path / "cache")
    script = [
        tool_call("bash", {"command": "ls -la"}, usage=(21, 6)),
        text("hello there", usage=(5, 2)),
        text("raw answer"),
    ]
    with FakeModelServer(script) as srv:
        base = srv.url
        first, raw1, s1 = session_run(base, protocol, "write", cache)
        upstream = len(srv.requests)
    assert upstream == 3 and cache.stats().entries == 3
    assert not any(c.cached for c in s1.calls)
    # The server is gone: every answer now comes from the cache.
    second, raw2, s2 = session_run(base, protocol, "replay", cache)
    assert second == first  # the SDKs assembled the same events and messages
    assert raw2 == raw1  # byte for byte the same event stream
    assert [c.cached for c in s2.calls] == [True, True, True]
    assert all(c.to_dict()["cached"] is True for c in s2.calls)
    u = s2.usage()
    assert u["cost_usd"] == 0 and u["cached_calls"] == 3 and u["unpaid_cost_usd"] == s1.usage()["cost_usd"] > 0
    assert u["prompt_tokens"] == s1.usage()["prompt_tokens"]  # consumed: the token limits count it
    t1, t2 = actf_trajectory(s1.calls), actf_trajectory(s2.calls)
    assert all(step["cached"] is True for step in t2["steps"])
    assert [st["assistant_content"] for st in t1["steps"]] == [st["assistant_content"] for st in t2["steps"]]


def test_read_mode_falls_back_to_the_upstream_and_replay_refuses_a_miss(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "cache")
    req = ChatRequest(messages=[{"role": "user", "content": "q"}])
    other = ChatRequest(messages=[{"role": "user", "content": "another question"}])
    with FakeModelServer([text("a1"), text("a2")]) as srv:

        async def fn(gw: Gateway) -> Any:
            s = gw.open_session("t")
            r1 = await s.complete(req)  # write: stored
            gw.roles["agent"] = Role("agent", gw.roles["agent"].endpoint, gw.roles["agent"].price, cache="read")
            r2 = await s.complete(req)  # read: a hit
            r3 = await s.complete(other)  # read: a miss goes upstream (and is not stored)
            gw.roles["agent"] = Role("agent", gw.roles["agent"].endpoint, gw.roles["agent"].price, cache="replay")
            with pytest.raises(ModelCallError) as miss:
                await s.complete(other)
            env = s.env()
            r = await trio.to_thread.run_sync(
                lambda: httpx.post(
                    f"{env['OPENAI_BASE_URL']}/chat/completions",
                    headers={"Authorization": f"Bearer {env['OPENAI_API_KEY']}"},
                    json={"messages": [{"role": "user", "content": "never asked"}]},
                )
            )
            s.close()
            return s, (r1, r2, r3), miss.value, r

        s, (r1, r2, r3), miss, r = trio.run(with_gateway, role(srv.url, "openai-chat", "write"), cache, fn)
    assert len(srv.requests) == 2 and (r1.content, r2.content, r3.content) == ("a1", "a1", "a2")
    assert [c.cached for c in s.calls] == [False, True, False, False, False]
    assert miss.kind == "cache_miss" and "replay mode" in miss.message
    # The agent over HTTP gets an error in the shape its SDK reads, never an answer.
    assert r.status_code == 404 and r.json()["error"]["code"] == "cache_miss"
    assert len(s.cache_misses) == 2 and cache.stats().entries == 1


def test_the_key_is_the_request_as_sent_upstream() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.5}
    assert cache_key("openai-chat", body) == cache_key("openai-chat", dict(reversed(list(body.items()))))
    assert cache_key("openai-chat", body) != cache_key("anthropic", body)
    assert cache_key("openai-chat", body) != cache_key("openai-chat", {**body, "temperature": 0.7})
    assert cache_key("openai-chat", body) != cache_key("openai-chat", {**body, "stream": True})


def test_headers_and_tokens_are_not_part_of_the_key(tmp_path: Path) -> None:
    """Two sessions (different tokens), two keys, two ports: one entry, the second call a hit."""
    cache = CallCache(tmp_path / "cache")
    for upstream_key in ("sk-first-key-aaaaaaaa", "sk-second-key-bbbbbbb"):
        with FakeModelServer([text("same")]) as srv:
            rs = role(srv.url, "openai-chat", "read-write")
            ep = rs["agent"].endpoint
            rs = {"agent": Role("agent", Endpoint(ep.base_url, ep.model, api_key=upstream_key), cache="read-write")}

            async def fn(gw: Gateway) -> Any:
                s = gw.open_session("t")
                env = s.env()
                return await trio.to_thread.run_sync(
                    lambda: httpx.post(
                        f"{env['OPENAI_BASE_URL']}/chat/completions",
                        headers={"Authorization": f"Bearer {env['OPENAI_API_KEY']}"},
                        json={"messages": [{"role": "user", "content": "hi"}]},
                    ).json()
                )

            trio.run(with_gateway, rs, cache, fn)
            asked = len(srv.requests)
        assert asked == (1 if upstream_key.startswith("sk-first") else 0)
    assert cache.stats().entries == 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(min_value=1, max_value=40), stream=st.booleans())
def test_no_secret_in_a_cache_entry_even_split_across_events(tmp_path_factory: Any, chunk: int, stream: bool) -> None:
    """An upstream that reflects the key (whole, or split across the reads and events of a
    stream) has it cut before the answer is stored (contract M4)."""
    root = tmp_path_factory.mktemp("cache")
    cache = CallCache(root, scrub=lambda s: s.replace("run-secret-value-77", "***"))
    with FakeModelServer([reflected("key={auth} other=run-secret-value-77", chunk_size=chunk)]) as srv:

        async def fn(gw: Gateway) -> Any:
            s = gw.open_session("t")
            env = s.env()
            url = f"{env['OPENAI_BASE_URL']}/chat/completions"
            h = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
            body = {"stream": stream, "messages": [{"role": "user", "content": "echo"}]}
            r = await trio.to_thread.run_sync(lambda: httpx.post(url, headers=h, json=body, timeout=30))
            await trio.sleep(0.05)
            return r

        r = trio.run(with_gateway, role(srv.url, "openai-chat", "write"), cache, fn)
    assert r.status_code == 200 and KEY not in r.text
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 1
    data = files[0].read_bytes()
    assert KEY.encode() not in data and b"run-secret-value-77" not in data and b"***" in data


# ---- the store -----------------------------------------------------------------------------------

WRITER = r"""
import sys, time
from acx.models._cache import CachedAnswer, CallCache
root, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = CallCache(root)
start = float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
for i in range(n):
    key = f"{i:064x}"
    cache.put(CachedAnswer(key, "openai-chat", "m", False, 200, (tag * 5000 + str(i)).encode()))
"""


def test_two_concurrent_writers_keep_one_whole_answer_per_key(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    start = str(time.time() + 1.0)
    procs = [subprocess.Popen([sys.executable, str(script), str(root), tag, "200", start], env=env) for tag in "AB"]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    cache = CallCache(root)
    assert cache.stats().entries == 200 and cache.stats().tmp_files == 0
    for i in range(200):
        entry = cache.get(f"{i:064x}")
        assert entry is not None
        body = entry.body.decode()
        assert body in ("A" * 5000 + str(i), "B" * 5000 + str(i))  # one writer's answer, whole


KILLED = r"""
import os, sys, time
from acx.models import _cache
from acx.models._cache import CachedAnswer, CallCache
real_fsync = os.fsync
def slow_fsync(fd):
    open(sys.argv[2], "w").close()   # the data is written, not yet linked: kill me now
    time.sleep(60)
_cache.os.fsync = slow_fsync
CallCache(sys.argv[1]).put(CachedAnswer("ab" * 32, "openai-chat", "m", False, 200, b"x" * 100000))
"""


def test_a_killed_writer_leaves_no_partial_entry(tmp_path: Path) -> None:
    root, flag = tmp_path / "cache", tmp_path / "in-write"
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.Popen([sys.executable, str(script), str(root), str(flag)], env=env)
    deadline = time.time() + 60
    while not flag.exists():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    cache = CallCache(root)
    assert cache.get("ab" * 32) is None and cache.stats().entries == 0
    (tmp,) = cache._tmp_files()  # what the killed writer left: never taken for an entry
    old = time.time() - 7200
    os.utime(tmp, (old, old))
    cache.prune()
    assert cache.stats().tmp_files == 0


def _answer(i: int, size: int = 1000) -> Any:
    from acx.models._cache import CachedAnswer

    return CachedAnswer(f"{i:064x}", "openai-chat", "m", False, 200, b"y" * size)


def test_the_store_is_bounded_least_recently_used_first(tmp_path: Path) -> None:
    cache = CallCache(tmp_path, max_bytes=10_000)
    for i in range(8):
        assert cache.put(_answer(i))
        t = time.time() - 1000 + i  # distinct ages, oldest first
        os.utime(cache.path(f"{i:064x}"), (t, t))
    # Used now by another run (this process would answer from memory, touching the file at most
    # once a minute): the youngest on disk.
    assert CallCache(tmp_path).get(f"{0:064x}") is not None
    for i in range(8, 14):
        cache.put(_answer(i))
    stats = cache.stats()
    assert stats.bytes <= 10_000
    assert cache.get(f"{0:064x}") is not None and cache.get(f"{1:064x}") is None
    assert cache.put(_answer(13)) is False  # a key already stored keeps its first answer


def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path: Path) -> None:
    cache = CallCache(tmp_path)
    cache.put(_answer(1))
    path = cache.path(f"{1:064x}")
    path.write_bytes(b"not an entry")
    assert cache.get(f"{1:064x}") is not None  # this process wrote it: it knows the answer
    assert CallCache(tmp_path).get(f"{1:064x}") is None and not path.exists()  # another run does not


def test_hits_are_answered_from_memory_bounded(tmp_path: Path) -> None:
    cache = CallCache(tmp_path, memory_bytes=8000)
    for i in range(20):
        cache.put(_answer(i))
    assert cache._held_bytes <= 8000 and len(cache._memory) == 8  # the newest eight
    for p, _ in cache._entries():
        p.unlink()  # gone from disk: only what memory holds still answers
    assert [cache.get(f"{i:064x}") is not None for i in (0, 11, 12, 19)] == [False, False, True, True]
    cache.clear()
    assert cache.get(f"{19:064x}") is None


def test_clear_and_prune(tmp_path: Path) -> None:
    cache = CallCache(tmp_path)
    for i in range(5):
        cache.put(_answer(i))
    old = time.time() - 10 * 86400
    os.utime(cache.path(f"{0:064x}"), (old, old))
    removed, left = cache.prune(older_than=86400)
    assert removed == 1 and cache.stats().entries == 4 and left == cache.stats().bytes
    assert cache.clear() == 4 and cache.stats().entries == 0
    assert json.dumps(cache.stats().to_dict())


def test_limits_count_what_was_consumed_cost_limits_what_was_paid(tmp_path: Path) -> None:  # contract M5
    from acx.models import Limits

    cache = CallCache(tmp_path / "cache")
    req = ChatRequest(messages=[{"role": "user", "content": "q"}])
    with FakeModelServer([text("a", usage=(1_000_000, 0))]) as srv:

        async def record(gw: Gateway) -> None:
            await gw.open_session("t").complete(req)  # $1 paid, stored

        trio.run(with_gateway, role(srv.url, "openai-chat", "write"), cache, record)

        async def replay(gw: Gateway) -> Any:
            # max_cost_usd 0.5: the $1 answer, from the cache, costs nothing and refuses nothing.
            cost = gw.open_session("c", Limits(max_cost_usd=0.5))
            got = [(await cost.complete(req)).content for _ in range(3)]
            calls = gw.open_session("n", Limits(max_model_calls=2))
            await calls.complete(req)
            await calls.complete(req)
            with pytest.raises(ModelCallError) as refused:
                await calls.complete(req)  # cached calls are calls the agent made
            return cost, got, refused.value, gw.totals

        cost, got, refused, totals = trio.run(with_gateway, role(srv.url, "openai-chat", "replay"), cache, replay)
        assert len(srv.requests) == 1
    assert got == ["a", "a", "a"] and cost.refusals == []
    assert cost.usage()["cost_usd"] == 0 and cost.usage()["unpaid_cost_usd"] == 3.0
    assert cost.usage()["prompt_tokens"] == 3_000_000  # consumed: a token limit would count it
    assert refused.kind == "limit_exceeded" and "max_model_calls = 2" in refused.message
    assert totals.cost_usd == 0 and totals.cached_calls == 5


# ---- acx run --replay at the gateway: transcripts answer the calls -----------------------------


def _final(protocol: str, got: list[Any]) -> Any:
    """What the SDK assembled, without the chunk boundaries (a replay rebuilds the events)."""
    if protocol == "anthropic":
        final = dict(got[1])
        return {k: final[k] for k in ("content", "stop_reason", "usage")}, got[2]["content"]
    if protocol == "openai-chat":
        text_ = "".join((c["choices"][0]["delta"].get("content") or "") for c in got[0] if c["choices"])
        calls = [tc for c in got[0] if c["choices"] for tc in (c["choices"][0]["delta"].get("tool_calls") or [])]
        names = [tc["function"]["name"] for tc in calls if tc["function"].get("name")]
        args = "".join(tc["function"].get("arguments") or "" for tc in calls)
        usage = next(c["usage"] for c in got[0] if c.get("usage"))
        return text_, names, json.loads(args) if args else None, usage, got[1]["choices"]
    completed = next(e for e in got[0] if e["type"] == "response.completed")["response"]
    return completed["output"], completed["usage"], got[1]["output"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_replay_from_a_transcript_streams_what_the_sdk_assembles_the_same(protocol: str, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    from acx.models import Replay

    script = [tool_call("bash", {"command": "ls -la"}, usage=(21, 6)), text("hello there", usage=(5, 2)), text("raw")]
    with FakeModelServer(script) as srv:
        base = srv.url
        first, _, s1 = session_run(base, protocol, "off", CallCache(tmp_path / "unused"))
    transcript = json.loads(json.dumps(s1.transcript()))
    replay = Replay("RUN", {("t", 1, ""): transcript})

    async def fn(gw: Gateway) -> Any:
        s = gw.open_session("t/attempt-1/try-1")
        got = await trio.to_thread.run_sync(sdk_calls, protocol, s.env())
        await trio.sleep(0.05)
        s.close()
        return got, s

    async def with_replay(gw_roles: dict[str, Role]) -> Any:
        async with trio.open_nursery() as n:
            gw = Gateway(gw_roles, replay=replay)
            await gw.start(n)
            try:
                return await fn(gw)
            finally:
                await gw.aclose()

    second, s2 = trio.run(with_replay, role(base, protocol, "off"))  # the server is stopped
    assert _final(protocol, second) == _final(protocol, first)
    assert [c.cached for c in s2.calls] == [True, True] and s2.replay_divergences == []
    paid_first = sum(c.cost_usd or 0 for c in s1.calls[:2])  # the SDK calls (not the raw stream after them)
    assert s2.usage()["cost_usd"] == 0 and s2.usage()["unpaid_cost_usd"] == pytest.approx(paid_first)


def test_replay_names_the_first_differing_field_and_refuses_the_rest(tmp_path: Path) -> None:
    from acx.models import Replay

    req = ChatRequest(messages=[{"role": "user", "content": "q"}])
    with FakeModelServer([text("a1"), text("a2")]) as srv:
        rs = role(srv.url, "openai-chat", "off")

        async def record(gw: Gateway) -> Any:
            s = gw.open_session("t/attempt-1/try-1")
            await s.complete(req)
            await s.complete(ChatRequest(messages=[*req.messages, {"role": "user", "content": "more"}]))
            return json.loads(json.dumps(s.transcript()))

        transcript = trio.run(with_gateway, rs, CallCache(tmp_path), record)
    replay = Replay("RUN", {("t", 1, ""): transcript})

    async def diverge(gw: Gateway) -> Any:
        s = gw.open_session("t/attempt-1/try-2")  # another try of the same attempt: from the start
        first = await s.complete(req)
        with pytest.raises(ModelCallError) as second:
            await s.complete(ChatRequest(messages=[*req.messages, {"role": "user", "content": "other"}]))
        with pytest.raises(ModelCallError) as third:
            await s.complete(req)
        return s, first, second.value, third.value

    async def run() -> Any:
        async with trio.open_nursery() as n:
            gw = Gateway(rs, replay=replay)
            await gw.start(n)
            try:
                return await diverge(gw)
            finally:
                await gw.aclose()

    s, first, second, third = trio.run(run)
    assert first.content == "a1"
    assert second.kind == third.kind == "replay_diverged"
    assert "call 2 differs from the recorded one first at request.messages[1].content" in second.message
    assert len(s.replay_divergences) == 1


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=3),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3),
        max_leaves=8,
    ),
    st.data(),
)
@settings(max_examples=150, deadline=None)
def test_first_difference_is_none_exactly_when_equal(value: Any, data: Any) -> None:
    from acx.models._replay import first_difference

    assert first_difference(value, json.loads(json.dumps(value))) is None
    other = data.draw(
        st.recursive(
            st.none() | st.integers() | st.text(max_size=3),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3),
            max_leaves=8,
        )
    )
    assert (first_difference(value, other) is None) == (value == other and json.dumps(value) == json.dumps(other))


GOLDEN = Path(__file__).parent / "golden"
RECORDED = {
    "openai-chat": {
        "id": "chatcmpl-1",
        "model": "real-model",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    },
    "openai-responses": {
        "id": "resp_1",
        "object": "response",
        "model": "real-model",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "done", "annotations": []}],
            },
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "bash", "arguments": '{"command": "ls"}'},
        ],
        "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
    },
    "anthropic": {
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "tu_1", "name": "bash", "input": {"command": "ls"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 12, "output_tokens": 5},
    },
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_recorded_answer_re_streams_as_the_golden_events_and_folds_back(protocol: str) -> None:
    from acx.models import parse_response, parse_stream
    from acx.models._replay import render_stream

    body = RECORDED[protocol]
    request = {"model": "real-model", "stream": True, "stream_options": {"include_usage": True}}
    data = render_stream(protocol, body, request)
    path = GOLDEN / f"replay_stream_{protocol}.sse"
    if os.environ.get("ACX_UPDATE_GOLDEN") == "1":
        path.write_bytes(data)
    assert data == path.read_bytes(), f"{path.name} differs (ACX_UPDATE_GOLDEN=1 to accept)"
    folded, whole = parse_stream(protocol, data), parse_response(protocol, json.dumps(body).encode())  # type: ignore[arg-type]
    assert (folded.content, folded.tool_calls, folded.finish_reason, folded.usage) == (
        whole.content,
        whole.tool_calls,
        whole.finish_reason,
        whole.usage,
    )
