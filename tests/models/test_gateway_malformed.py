"""Malformed agent requests get a 400 with a clear message naming the field, never a 500
"internal error" (issue 24 item 4): JSON nested too deeply, a wrong type where the gateway reads or
translates, in every protocol, passed through or translated. Hostile upstream answers of the
wrong shape are ``malformed_response`` errors, never a crash. Contract M4 (the gateway is the
agent's one way to a model: it answers every request), M1 (the protocols' shapes)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acx.models import Endpoint, Gateway, ModelCallError, Role, parse_response, parse_stream
from acx.testing.fake_models import FakeModelServer, malformed

PATHS = {"openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses", "anthropic": "/v1/messages"}


def _roles(srv: FakeModelServer, protocol: str) -> dict[str, Role]:
    base = srv.url if protocol == "anthropic" else srv.base_url
    ep = Endpoint(base_url=base, model="m", protocol=protocol, api_key="sk-malformed-test", max_retries=0)  # type: ignore[arg-type]
    return {"agent": Role("agent", ep)}


async def _post_all(srv: FakeModelServer, model_protocol: str, posts: list[tuple[str, bytes]]) -> list[httpx.Response]:
    async with trio.open_nursery() as n:
        gw = Gateway(_roles(srv, model_protocol))
        await gw.start(n)
        env = gw.open_session("t").env()
        out = []
        async with httpx.AsyncClient(timeout=30) as c:
            for path, body in posts:
                url = env["ANTHROPIC_BASE_URL"] + path
                headers = {"authorization": f"Bearer {env['OPENAI_API_KEY']}", "content-type": "application/json"}
                out.append(await c.post(url, content=body, headers=headers))
        await gw.aclose()
        n.cancel_scope.cancel()
    return out


DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.mark.parametrize("model_protocol", ["openai-chat", "anthropic"])
def test_deeply_nested_and_mistyped_bodies_are_400(model_protocol: str) -> None:  # contract M4
    bodies = [
        ("/v1/chat/completions", DEEP),
        ("/v1/chat/completions", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("/v1/responses", json.dumps({"model": "x", "input": 5}).encode()),
        ("/v1/messages", json.dumps({"model": "x", "messages": [{"role": "user", "content": 7}]}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [], "stream": "yes"}).encode()),
    ]
    with FakeModelServer() as srv:
        answers = trio.run(_post_all, srv, model_protocol, bodies)
    if model_protocol == "anthropic":
        # Its own protocol: passed through, the model server judges the content (this fake takes it).
        assert answers.pop(3).status_code == 200 and srv.requests[-1].path == "/v1/messages"
        bodies.pop(3)
    for (path, _), r in zip(bodies, answers, strict=True):
        assert r.status_code == 400, (path, r.status_code, r.text[:300])
        message = r.json()["error"]["message"]
        assert "internal error" not in message and message.startswith("acx gateway: "), message
    assert "nested too deeply" in answers[0].json()["error"]["message"]
    assert "input must be a string or an array" in answers[2].json()["error"]["message"]
    if model_protocol == "openai-chat":  # translated from anthropic: its content is checked
        assert "messages[0].content must be a string" in answers[3].json()["error"]["message"]
    assert "stream must be a boolean" in answers[-1].json()["error"]["message"]
    assert all(r.path == "/v1/messages" for r in srv.requests)


# ---- a property over the three protocols' request shapes -----------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
#: Where the wire formats put things, filled with any JSON value (and sometimes the right kind).
PART = st.fixed_dictionaries(
    {}, optional={"type": st.sampled_from(["text", "tool_use", "tool_result", "input_text"]) | JSON, "text": JSON}
)
MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "system", "tool"]) | JSON,
        "content": st.text(max_size=5) | st.lists(PART | JSON, max_size=3) | JSON,
        "tool_calls": st.lists(st.fixed_dictionaries({}, optional={"id": JSON, "function": JSON}) | JSON, max_size=2)
        | JSON,
        "tool_call_id": JSON,
    },
)
ITEM = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "function_call", "function_call_output"]) | JSON,
        "role": st.sampled_from(["user", "assistant"]) | JSON,
        "content": JSON | st.lists(PART, max_size=2),
        "call_id": JSON,
        "name": JSON,
        "arguments": JSON,
        "output": JSON,
    },
)
BODY = st.fixed_dictionaries(
    {},
    optional={
        "model": JSON,
        "messages": st.lists(MESSAGE | JSON, max_size=3) | JSON,
        "input": st.text(max_size=5) | st.lists(ITEM | JSON, max_size=3) | JSON,
        "system": st.text(max_size=5) | st.lists(PART, max_size=2) | JSON,
        "instructions": JSON,
        "tools": st.lists(st.fixed_dictionaries({}, optional={"name": JSON, "function": JSON}) | JSON, max_size=2)
        | JSON,
        "max_tokens": JSON,
        "temperature": JSON,
        "stream": st.just(False) | JSON,
        "stream_options": JSON,
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(list(PATHS)),
    st.sampled_from(["openai-chat", "openai-responses", "anthropic"]),
    st.lists(BODY | JSON, min_size=1, max_size=4),
)
def test_no_request_shape_makes_the_gateway_fail(agent: str, model: str, bodies: list[Any]) -> None:  # contract M4
    """Any JSON where the request shapes have their fields: a 4xx naming the problem or the model's
    answer — never a 5xx of the gateway's own, never a crash. Requests without ``stream: true``
    (a stream across protocols is a 400 already covered elsewhere)."""
    posts = [(PATHS[agent], json.dumps(b).encode()) for b in bodies]
    with FakeModelServer() as srv:
        answers = trio.run(_post_all, srv, model, posts)
    for (_, body), r in zip(posts, answers, strict=True):
        assert r.status_code < 500, (agent, model, body, r.status_code, r.text[:400])
        if r.status_code >= 400:
            message = r.json()["error"]["message"]
            assert "internal error" not in message and message.startswith("acx gateway: "), message


# ---- hostile upstream answers --------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [{"message": {"tool_calls": [{"function": "x"}]}}]}',
        b'{"output": [{"type": "message", "content": 5}]}',
        b'{"content": [{"type": "text", "text": 5}], "usage": "many"}',
        DEEP,
    ],
)
def test_answers_of_the_wrong_shape_are_malformed_never_a_crash(protocol: str, body: bytes) -> None:  # contract M1
    try:
        parse_response(protocol, body)  # type: ignore[arg-type]
    except ModelCallError as exc:
        assert exc.kind == "malformed_response"
    events = b"data: " + body + b"\n\n"
    events += b'data: {"type": "content_block_start", "index": "x"}\n\n'
    events += b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "x"}]}}]}\n\n'
    with pytest.raises(ModelCallError) as info:
        parse_stream(protocol, events)  # type: ignore[arg-type]
    assert info.value.kind == "malformed_response"


def test_a_hostile_upstream_answer_reaches_the_agent_as_502() -> None:  # contract M4
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    with FakeModelServer([malformed(b'{"choices": [{"message": {"tool_calls": [{"function": "x"}]}}]}')]) as srv:
        (r,) = trio.run(_post_all, srv, "openai-chat", [("/v1/chat/completions", body)])
    assert r.status_code == 502, r.text
    assert "answered 200 but with a body not in the openai-chat shape" in r.json()["error"]["message"]
