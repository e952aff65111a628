"""The gateway: in-process and HTTP calls, session tokens, limits, run cost limit, transcripts
and trajectories, the key never recorded. Contracts M4 (gateway), M5 (limits), M6 (transcripts)."""

from __future__ import annotations

import json
from functools import partial

import httpx
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.models import ChatRequest, Endpoint, Gateway, Limits, ModelCallError, Price, Role, actf_trajectory
from acx.testing.fake_models import FakeModelServer, error, text, tool_call

KEY = "sk-real-key-never-shown"
REQ = ChatRequest(messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])


def roles(
    srv: FakeModelServer, protocol: str = "openai-chat", price: Price | None = Price(1.0, 2.0)
) -> dict[str, Role]:
    base = srv.url if protocol == "anthropic" else srv.base_url
    ep = Endpoint(base_url=base, model="real-model", protocol=protocol, api_key=KEY, max_retries=1)  # type: ignore[arg-type]
    return {"agent": Role("agent", ep, price)}


async def with_gateway(rs, fn, **kw):
    async with trio.open_nursery() as n:
        gw = Gateway(rs, **kw)
        await gw.start(n)
        try:
            return await fn(gw)
        finally:
            await gw.aclose()


def test_in_process_call_recorded_and_counted() -> None:  # contract M4, M6
    with FakeModelServer(
        [tool_call("bash", {"command": "ls"}, usage=(100, 10)), text("done", usage=(150, 5, 50))]
    ) as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t1/1")
            r1 = await s.complete(REQ)
            follow = ChatRequest(
                messages=[
                    *REQ.messages,
                    r1.assistant_message(),
                    {"role": "tool", "tool_call_id": "call_bash", "content": "a.txt"},
                ]
            )
            r2 = await s.complete(follow)
            s.close()
            return s, r2

        s, r2 = trio.run(with_gateway, roles(srv), fn)
    assert r2.content == "done"
    u = s.usage()
    assert (u["model_calls"], u["prompt_tokens"], u["completion_tokens"], u["cached_tokens"]) == (2, 250, 15, 50)
    # 200 uncached + 50 cached (input price) at $1/M + 15 completion at $2/M
    assert u["cost_usd"] == pytest.approx((250 * 1.0 + 15 * 2.0) / 1e6)
    traj = actf_trajectory(s.calls)
    assert traj["schema_version"] == "ACTF_v1.0" and [st["step_id"] for st in traj["steps"]] == [1, 2]
    st1 = traj["steps"][0]
    assert st1["system_prompt"] == "sys" and st1["user_content"] == "hi"
    assert st1["assistant_content"]["tool_calls"][0]["function"] == {"name": "bash", "arguments": {"command": "ls"}}
    assert st1["observation"] == [{"source_call_id": "call_bash", "content": "a.txt"}]
    assert st1["metric"]["prompt_tokens_len"] == 100 and traj["steps"][1]["metric"]["stop_reason"] == "stop"
    assert KEY not in json.dumps(s.transcript()) and KEY not in json.dumps(traj)


def test_unknown_price_is_unknown_cost_never_zero() -> None:  # contract M5
    with FakeModelServer() as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t")
            await s.complete(REQ)
            return s

        s = trio.run(with_gateway, roles(srv, price=None), fn)
    assert s.usage()["cost_usd"] is None and s.usage()["total_tokens"] == 15


@pytest.mark.parametrize(
    ("limits", "allowed"),
    [
        (Limits(max_model_calls=2), 2),
        (Limits(max_tokens_total=30), 2),  # 15 tokens a call: the third call finds 30 used
        (Limits(max_cost_usd=20e-6), 1),  # 10*1 + 5*2 = 20 µ$ a call
    ],
)
def test_each_limit_refuses_the_crossing_call(limits: Limits, allowed: int) -> None:  # contract M5
    with FakeModelServer() as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t", limits)
            made = 0
            with pytest.raises(ModelCallError) as info:
                for _ in range(5):
                    await s.complete(REQ)
                    made += 1
            return s, made, info.value

        s, made, err = trio.run(with_gateway, roles(srv), fn)
    assert made == allowed and len(srv.requests) == allowed
    assert err.kind == "limit_exceeded" and "acx refused the model call" in err.message
    assert s.refusals == [err.message]


def test_run_cost_limit_stops_every_session() -> None:  # contract M5
    stops: list[str] = []
    with FakeModelServer() as srv:

        async def fn(gw: Gateway):
            a, b = gw.open_session("a"), gw.open_session("b")
            await a.complete(REQ)
            await b.complete(REQ)  # reaches 40 µ$
            with pytest.raises(ModelCallError, match="run's max_cost_usd"):
                await a.complete(REQ)
            return gw

        trio.run(partial(with_gateway, roles(srv), fn, run_max_cost_usd=40e-6, on_run_limit=stops.append))
    assert len(stops) == 1 and "max_cost_usd = 4e-05 reached" in stops[0] and len(srv.requests) == 2


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_http_passthrough_per_protocol(protocol: str) -> None:  # contract M4
    with FakeModelServer([text("hello", usage=(7, 3))]) as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t")
            env = s.env()
            async with httpx.AsyncClient() as c:
                if protocol == "anthropic":
                    r = await c.post(
                        f"{env['ANTHROPIC_BASE_URL']}/v1/messages",
                        headers={"x-api-key": env["ANTHROPIC_API_KEY"]},
                        json={"model": "whatever", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
                    )
                else:
                    path = "chat/completions" if protocol == "openai-chat" else "responses"
                    body = (
                        {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
                        if protocol == "openai-chat"
                        else {"model": "x", "input": "hi"}
                    )
                    r = await c.post(
                        f"{env['OPENAI_BASE_URL']}/{path}",
                        headers={"Authorization": f"Bearer {env['OPENAI_API_KEY']}"},
                        json=body,
                    )
            s.close()
            return s, env, r

        s, env, r = trio.run(with_gateway, roles(srv, protocol), fn)
    assert r.status_code == 200
    up = srv.requests[0]
    assert up.body["model"] == "real-model"  # the run decides the model
    assert KEY in (up.headers.get("authorization", "") + up.headers.get("x-api-key", ""))  # real key upstream only
    assert KEY not in json.dumps(env) and env["OPENAI_API_KEY"].startswith("acx-gw-")
    assert s.usage()["total_tokens"] == 10 and s.calls[0].via == "http"
    traj = actf_trajectory(s.calls)
    assert traj["steps"][0]["user_content"] == "hi" and traj["steps"][0]["assistant_content"]["content"] == "hello"


def test_token_refused_after_session_closes_and_unknown_tokens() -> None:  # contract M4
    with FakeModelServer() as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t")
            env = s.env()
            url = f"{env['OPENAI_BASE_URL']}/chat/completions"
            body = {"messages": [{"role": "user", "content": "hi"}]}
            async with httpx.AsyncClient() as c:
                ok = await c.post(url, headers={"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}, json=body)
                s.close()
                late = await c.post(url, headers={"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}, json=body)
                none = await c.post(url, json=body)
                real = await c.post(url, headers={"Authorization": f"Bearer {KEY}"}, json=body)
            return ok, late, none, real

        ok, late, none, real = trio.run(with_gateway, roles(srv), fn)
    assert ok.status_code == 200
    assert late.status_code == 401 and "session has ended" in late.json()["error"]["message"]
    assert none.status_code == 401 and real.status_code == 401
    assert len(srv.requests) == 1


def test_http_limits_errors_and_refusals_reach_the_agent() -> None:  # contract M4, M5
    with FakeModelServer([error(400, "bad thing"), error(503), error(503)]) as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t", Limits(max_model_calls=2))
            env = s.env()
            h = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
            url = env["OPENAI_BASE_URL"]
            body = {"messages": [{"role": "user", "content": "hi"}]}
            async with httpx.AsyncClient(timeout=30) as c:
                r400 = await c.post(f"{url}/chat/completions", headers=h, json=body)
                r502 = await c.post(f"{url}/chat/completions", headers=h, json=body)
                rlim = await c.post(f"{url}/chat/completions", headers=h, json=body)
                rstream = await c.post(f"{url}/chat/completions", headers=h, json={**body, "stream": True})
                rproto = await c.post(f"{url}/messages", headers=h, json=body)
            return s, r400, r502, rlim, rstream, rproto

        s, r400, r502, rlim, rstream, rproto = trio.run(with_gateway, roles(srv), fn)
    assert r400.status_code == 400 and r400.json()["error"]["message"] == "bad thing"
    assert r502.status_code == 502 and "after 2 attempts" in r502.json()["error"]["message"]
    failed = s.calls[1].to_dict()  # the transcript keeps the retries of a call that failed for good
    assert failed["retries"] == 1 and [a["status"] for a in failed["attempts"]] == [503, 503]
    assert rlim.status_code == 400 and rlim.json()["error"]["type"] == "limit_exceeded"
    assert "max_model_calls = 2 reached" in rlim.json()["error"]["message"]
    assert rstream.status_code == 400  # refused by the limit (the stream itself would pass through)
    assert rproto.status_code == 400 and rproto.json()["error"]["type"] == "limit_exceeded"
    assert len(s.refusals) >= 1


@pytest.mark.parametrize(
    ("agent", "model"), [("anthropic", "openai-chat"), ("openai-chat", "anthropic"), ("openai-responses", "anthropic")]
)
def test_agent_speaking_another_protocol_is_translated(agent: str, model: str) -> None:  # contract M4
    script = [tool_call("bash", {"command": "ls"}, usage=(9, 4)), text("done", usage=(12, 2))]
    with FakeModelServer(script) as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t")
            env = s.env()
            async with httpx.AsyncClient() as c:
                if agent == "anthropic":
                    url, h = f"{env['ANTHROPIC_BASE_URL']}/v1/messages", {"x-api-key": env["ANTHROPIC_API_KEY"]}
                    first = {"max_tokens": 50, "system": "sys", "messages": [{"role": "user", "content": "hi"}]}
                elif agent == "openai-chat":
                    url = f"{env['OPENAI_BASE_URL']}/chat/completions"
                    h = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
                    first = {
                        "max_tokens": 50,
                        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
                    }
                else:
                    url = f"{env['OPENAI_BASE_URL']}/responses"
                    h = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
                    first = {"max_output_tokens": 50, "instructions": "sys", "input": "hi"}
                r1 = await c.post(url, headers=h, json=first)
                bad = await c.post(url, headers=h, json={**first, "logit_bias": {"1": 2}})
            s.close()
            return s, r1, bad

        s, r1, bad = trio.run(with_gateway, roles(srv, model), fn)
    assert r1.status_code == 200, r1.text
    body = r1.json()
    if agent == "anthropic":
        assert body["content"][0] == {"type": "tool_use", "id": "call_bash", "name": "bash", "input": {"command": "ls"}}
        assert body["stop_reason"] == "tool_use" and body["usage"]["output_tokens"] == 4
    elif agent == "openai-chat":
        assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
        assert body["choices"][0]["finish_reason"] == "tool_calls" and body["usage"]["completion_tokens"] == 4
    else:
        assert body["output"][0]["type"] == "function_call" and body["output"][0]["name"] == "bash"
    up = srv.requests[0]
    if model == "anthropic":
        assert up.path == "/v1/messages" and up.body["system"] == "sys" and up.body["max_tokens"] == 50
    else:
        assert up.path == "/v1/chat/completions" and up.body["messages"][0] == {"role": "system", "content": "sys"}
        assert up.body["max_tokens"] == 50
    assert bad.status_code == 400 and "logit_bias cannot be translated" in bad.json()["error"]["message"]
    assert len(srv.requests) == 1 and s.usage()["completion_tokens"] == 4
    traj = actf_trajectory(s.calls)
    assert traj["steps"][0]["system_prompt"] == "sys" and traj["steps"][0]["user_content"] == "hi"


def test_a_role_has_its_own_limits() -> None:  # contract M5 (roles)
    with FakeModelServer() as srv:
        ep = Endpoint(base_url=srv.base_url, model="judge", api_key=KEY, max_retries=0)
        rs = {**roles(srv), "grader": Role("grader", ep, None, Limits(max_model_calls=1))}

        async def fn(gw: Gateway):
            s = gw.open_session("t", Limits(max_model_calls=3))
            await s.complete(REQ, role="grader")
            with pytest.raises(ModelCallError, match="the grader role's max_model_calls = 1 reached"):
                await s.complete(REQ, role="grader")
            await s.complete(REQ)  # the agent role is not held by the grader's limit
            await s.complete(REQ)  # ... but the task's limit (3 calls, all roles) is reached now
            with pytest.raises(ModelCallError, match="max_model_calls = 3 reached"):
                await s.complete(REQ)
            return s

        s = trio.run(with_gateway, rs, fn)
    assert len(srv.requests) == 3 and len(s.refusals) == 2
    assert s.usage()["by_role"]["grader"]["model_calls"] == 1


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_streamed_calls_pass_through_and_are_counted(protocol: str) -> None:  # contracts M4, M6
    script = [tool_call("bash", {"command": "ls -la"}, usage=(21, 6)), text("all done", usage=(30, 4, 8))]
    with FakeModelServer(script) as srv:

        async def fn(gw: Gateway):
            s = gw.open_session("t")
            env = s.env()
            if protocol == "anthropic":
                url, h = f"{env['ANTHROPIC_BASE_URL']}/v1/messages", {"x-api-key": env["ANTHROPIC_API_KEY"]}
                body = {"max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            elif protocol == "openai-chat":
                url = f"{env['OPENAI_BASE_URL']}/chat/completions"
                h = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
                body = {"stream": True, "messages": [{"role": "user", "content": "hi"}]}
            else:
                url = f"{env['OPENAI_BASE_URL']}/responses"
                h = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
                body = {"stream": True, "input": "hi"}
            got = []
            async with httpx.AsyncClient() as c:
                for _ in range(2):
                    async with c.stream("POST", url, headers=h, json=body) as r:
                        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                        got.append(b"".join([chunk async for chunk in r.aiter_raw()]))
            s.close()
            return s, got

        s, got = trio.run(with_gateway, roles(srv, protocol), fn)
    assert all(b"data:" in g for g in got)
    if protocol == "openai-chat":  # the gateway asks for usage in the stream
        assert srv.requests[0].body["stream_options"] == {"include_usage": True}
    u = s.usage()
    assert (u["model_calls"], u["prompt_tokens"], u["completion_tokens"], u["cached_tokens"]) == (2, 51, 10, 8)
    traj = actf_trajectory(s.calls)
    call = traj["steps"][0]["assistant_content"]["tool_calls"][0]
    assert call["function"] == {"name": "bash", "arguments": {"command": "ls -la"}}
    assert traj["steps"][1]["assistant_content"]["content"] == "all done"


def test_streaming_across_protocols_is_refused() -> None:  # contract M4
    with FakeModelServer() as srv:

        async def fn(gw: Gateway):
            env = gw.open_session("t").env()
            async with httpx.AsyncClient() as c:
                return await c.post(
                    f"{env['ANTHROPIC_BASE_URL']}/v1/messages",
                    headers={"x-api-key": env["ANTHROPIC_API_KEY"]},
                    json={"max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                )

        r = trio.run(with_gateway, roles(srv), fn)
    assert r.status_code == 400 and "streaming across protocols" in r.json()["error"]["message"]
    assert srv.requests == []


def test_a_transcript_holds_no_key_even_escaped_and_is_not_copied_without_one() -> None:  # contract M6
    # The record's fast check (one search in the JSON encoding) must find the key wherever a
    # string holds it, escaped characters around it included; a record without it is kept as is.
    from acx.models import CallRecord

    key = 'sk-"quoted"\\é-key'
    rec = CallRecord(seq=1, role="agent", model="m", protocol="openai-chat", via="http", started_at=0.0)
    rec.secrets = (key, KEY)
    rec.request = {"messages": [{"role": "user", "content": f"\n<{key}>\u2028"}], "n": [1, 2.5, None]}
    rec.response = {"choices": [{"message": {"content": 'no secret here "x"'}}]}
    out = rec.to_dict()
    assert key not in json.dumps(out, ensure_ascii=False) and "***" in out["request"]["messages"][0]["content"]
    assert out["response"] is rec.response
    rec.response = {"k": [KEY[:-1], {"deep": f"x{KEY}"}]}
    assert KEY not in json.dumps(rec.to_dict())


def test_a_stream_the_agent_never_read_frees_its_upstream_connection() -> None:  # contract M4, M6
    """The agent hangs up before the first chunk: the server closes the relay unread; the
    upstream answer is closed (its max_connections slot freed) and the call still recorded."""
    with FakeModelServer([text("a"), text("b")]) as srv:
        rs = roles(srv)
        ep = rs["agent"].endpoint
        rs = {"agent": Role("agent", Endpoint(**{**ep.__dict__, "max_connections": 1}), None)}

        async def fn(gw: Gateway):
            s = gw.open_session("t")
            h = {"authorization": f"Bearer {s.token()}"}
            body = json.dumps({"stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
            status, relay, _ = await gw._handle("POST", "/v1/chat/completions", h, body)
            await relay.aclose()  # never iterated
            with trio.fail_after(5):  # the only connection slot is free again
                status2, relay2, _ = await gw._handle("POST", "/v1/chat/completions", h, body)
                got = b"".join([c async for c in relay2])
                await relay2.aclose()
            return s, status, status2, got

        s, status, status2, got = trio.run(with_gateway, rs, fn)
    assert status == status2 == 200 and b"data:" in got
    assert len(s.calls) == 2 and s.calls[0].finished_at and s.calls[0].error is not None
    assert s.calls[1].error is None and s.usage()["model_calls"] == 2


@settings(max_examples=500, deadline=None)
@given(
    ts=st.floats(min_value=-2e9, max_value=253402300799.0, allow_nan=False)
    | st.builds(
        lambda s, f: s + f,
        st.integers(min_value=0, max_value=2**33),
        st.sampled_from([0.0, 0.0005, 0.0004999, 0.9995, 0.9999995, 0.9999996, 0.5, 0.0000005, 0.0000015]),
    )
)
def test_trajectory_timestamps_are_what_datetime_gives(ts: float) -> None:
    # contract M6: iso_now's per-second cache and its own rounding give datetime's text exactly
    # (microseconds rounded half-even, then cut to milliseconds), carries and negatives included.
    from datetime import UTC, datetime

    from acx.models._gateway import iso_now

    want = datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert iso_now(ts) == want
    assert iso_now(ts) == want  # the cached second gives the same


def test_annotate_marks_that_calls_step_and_refuses_a_foreign_response() -> None:  # contract M6
    with FakeModelServer([text("one"), text("two")]) as srv:

        async def fn(gw: Gateway):
            s, other = gw.open_session("t"), gw.open_session("u")
            first = await s.complete(REQ)
            second = await s.complete(REQ)
            s.annotate(first, context_management={"part": "summary"}, metric={"forged": 1})
            with pytest.raises(ValueError, match="not an answer of this session"):
                other.annotate(second, context_management={})
            s.close()
            other.close()
            return s

        s = trio.run(with_gateway, roles(srv), fn)
    steps = actf_trajectory(s.calls)["steps"]
    assert steps[0]["context_management"] == {"part": "summary"}
    assert "context_management" not in steps[1]
    # An annotation never overwrites what the gateway itself recorded for the step.
    assert steps[0]["metric"]["stop_reason"] == "stop"
