"""The model client on real loopback sockets (acx.testing fake servers): each protocol, each
server dialect, each retry class, Retry-After, deadlines. Contract ids: M1 (protocols), M2
(retry layer), M3 (timeouts)."""

from __future__ import annotations

import json
import random

import pytest
import trio

from acx.models import ChatRequest, Endpoint, ModelCallError, ModelClient, RetryPolicy
from acx.testing.fake_models import FakeModelServer, drop, error, malformed, text, tool_call

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)


def run(fn, *args):
    return trio.run(fn, *args)


def ep(srv: FakeModelServer, protocol: str = "openai-chat", **kw) -> Endpoint:
    base = srv.url if protocol == "anthropic" else srv.base_url
    return Endpoint(base_url=base, model="m1", protocol=protocol, api_key="sk-secret-123", **kw)  # type: ignore[arg-type]


REQ = ChatRequest(
    messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}],
    tools=[{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}],
)


async def complete(endpoint: Endpoint, request: ChatRequest = REQ):
    async with ModelClient(retry=FAST, rng=random.Random(0)) as client:
        return await client.complete(endpoint, request)


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_each_protocol_text_and_tool_calls(protocol: str) -> None:  # contract M1
    with FakeModelServer([text("4", usage=(12, 3, 2)), tool_call("bash", {"command": "ls"})]) as srv:
        r1, _ = run(complete, ep(srv, protocol))
        r2, _ = run(complete, ep(srv, protocol))
    assert r1.content == "4" and r1.finish_reason == "stop"
    assert r1.usage is not None and (r1.usage.prompt_tokens, r1.usage.completion_tokens, r1.usage.cached_tokens) == (
        12,
        3,
        2,
    )
    assert r2.tool_calls[0].name == "bash" and r2.tool_calls[0].arguments == {"command": "ls"}
    assert r2.finish_reason == "tool_calls"
    sent = srv.requests[0]
    assert sent.body["model"] == "m1"
    if protocol == "anthropic":
        assert sent.path == "/v1/messages"
        assert sent.headers["x-api-key"] == "sk-secret-123" and "authorization" not in sent.headers
        assert sent.body["system"] == "be brief" and sent.body["messages"] == [{"role": "user", "content": "2+2?"}]
        assert sent.body["tools"][0]["input_schema"] == {"type": "object"} and sent.body["max_tokens"] == 4096
    elif protocol == "openai-responses":
        assert sent.path == "/v1/responses" and sent.body["instructions"] == "be brief"
        assert sent.body["tools"][0]["name"] == "bash"
    else:
        assert sent.path == "/v1/chat/completions" and sent.headers["authorization"] == "Bearer sk-secret-123"
        assert sent.body["messages"] == REQ.messages and "max_tokens" not in sent.body


def test_server_dialects_tolerated() -> None:  # contract M1
    steps = [
        tool_call("bash", {"command": "ls"}, args_as_object=True),  # llama.cpp / TGI
        text("x", reasoning="think", reasoning_key="reasoning"),  # vLLM >= 0.13
        text("y", reasoning="think2"),  # reasoning_content
        text("z", usage=None),  # no usage
    ]
    with FakeModelServer(steps) as srv:
        e = ep(srv)
        a = run(complete, e)[0]
        b = run(complete, e)[0]
        c = run(complete, e)[0]
        d = run(complete, e)[0]
    assert a.tool_calls[0].arguments == {"command": "ls"} and json.loads(a.tool_calls[0].raw_arguments) == {
        "command": "ls"
    }
    assert a.assistant_message()["tool_calls"][0]["function"]["arguments"] == '{"command": "ls"}'
    assert (b.reasoning, b.reasoning_key) == ("think", "reasoning")
    assert (c.reasoning, c.reasoning_key) == ("think2", "reasoning_content")
    assert c.assistant_message(keep_reasoning=True)["reasoning_content"] == "think2"
    assert d.usage is None


def test_max_tokens_mapped_per_protocol_and_reserved_params_refused() -> None:  # contract M1
    with FakeModelServer() as srv:
        run(complete, ep(srv, "anthropic", params={"max_completion_tokens": 77}))
        run(complete, ep(srv, "openai-responses", params={"max_tokens": 55}))
        run(complete, ep(srv, "openai-chat", params={"max_completion_tokens": 9}))
        with pytest.raises(ModelCallError, match="may not set stream"):
            run(complete, ep(srv, params={"stream": True}))
    assert srv.requests[0].body["max_tokens"] == 77
    assert srv.requests[1].body["max_output_tokens"] == 55 and "max_tokens" not in srv.requests[1].body
    assert srv.requests[2].body["max_completion_tokens"] == 9  # passed through as given


@pytest.mark.parametrize("status", [429, 500, 502, 503, 408])
def test_retryable_statuses_retry(status: int) -> None:  # contract M2
    with FakeModelServer([error(status), error(status), text("ok")]) as srv:
        r, ex = run(complete, ep(srv))
    assert r.content == "ok" and len(ex.attempts) == 3 and [a.status for a in ex.attempts] == [status, status, 200]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_never_retry(status: int) -> None:  # contract M2
    with FakeModelServer([error(status, "nope"), text("never")]) as srv, pytest.raises(ModelCallError) as info:
        run(complete, ep(srv))
    assert len(srv.requests) == 1
    assert info.value.status == status and "nope" in info.value.message
    assert info.value.kind == ("auth" if status in (401, 403) else "bad_request")


def test_context_length_never_retries() -> None:  # contract M2
    script = [error(400, "This model's maximum context length is 8192 tokens"), text("x")]
    with FakeModelServer(script) as srv, pytest.raises(ModelCallError) as info:
        run(complete, ep(srv))
    assert info.value.kind == "context_length" and len(srv.requests) == 1


def test_connection_drop_and_malformed_bodies_retry() -> None:  # contract M2
    with FakeModelServer([drop(), malformed(), malformed(b'{"choices": []}'), text("fine")]) as srv:
        r, ex = run(complete, ep(srv))
    assert r.content == "fine" and len(ex.attempts) == 4


def test_retries_exhausted_reports_attempts() -> None:  # contract M2
    with FakeModelServer([error(503)] * 5) as srv, pytest.raises(ModelCallError) as info:
        run(complete, ep(srv, max_retries=2))
    assert info.value.kind == "server_error" and info.value.attempts == 3 and len(srv.requests) == 3
    assert "after 3 attempts" in info.value.message


def test_connection_refused_is_a_connection_error() -> None:  # contract M2
    with FakeModelServer() as srv:
        port = srv.port
    e = Endpoint(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1)
    with pytest.raises(ModelCallError) as info:
        run(complete, e)
    assert info.value.kind == "connection" and info.value.attempts == 2


def test_retry_after_honoured_on_real_socket() -> None:  # contract M2
    with FakeModelServer([error(429, retry_after=0.3), text("ok")]) as srv:

        async def go():
            t0 = trio.current_time()
            r, ex = await complete(ep(srv))
            return r, ex, trio.current_time() - t0

        r, ex, elapsed = run(go)
    assert r.content == "ok" and ex.attempts[0].wait_seconds == 0.3 and elapsed >= 0.3


def test_read_timeout_and_total_deadline() -> None:  # contract M3
    with FakeModelServer([text("slow", delay=1.0)] * 3) as srv:
        with pytest.raises(ModelCallError) as info:
            run(complete, ep(srv, read_timeout=0.1, max_retries=0))
        assert info.value.kind == "timeout" and "sent nothing for 0.1 s" in info.value.message
        with pytest.raises(ModelCallError) as info2:
            run(complete, ep(srv, total_timeout=0.3))
        assert info2.value.kind == "timeout" and "total deadline of 0.3 s" in info2.value.message


def test_key_scrubbed_from_error_messages() -> None:  # contract M2 (secrets)
    script = [error(401, "Incorrect API key provided: sk-secret-123")]
    with FakeModelServer(script) as srv, pytest.raises(ModelCallError) as info:
        run(complete, ep(srv))
    assert "sk-secret-123" not in str(info.value) and "***" in info.value.message
    assert info.value.body is not None and b"sk-secret-123" not in info.value.body


def test_wrap_api_key() -> None:  # contract M1 (model.wrap_api_key)
    import base64

    with FakeModelServer() as srv:
        run(complete, ep(srv, wrap_session_id="/runs/r1"))
    sent = srv.requests[0].headers["authorization"].removeprefix("Bearer ")
    assert base64.b64decode(sent).decode() == "<api_secret>sk-secret-123</api_secret><session_id>/runs/r1</session_id>"


def test_max_connections_caps_concurrency() -> None:  # contract M2
    with FakeModelServer([text("x", delay=0.2)] * 4) as srv:
        e = ep(srv, max_connections=2)

        async def go():
            async with ModelClient(retry=FAST) as client:
                t0 = trio.current_time()
                async with trio.open_nursery() as n:
                    for _ in range(4):
                        n.start_soon(client.complete, e, REQ)
                return trio.current_time() - t0

        elapsed = run(go)
    assert elapsed >= 0.4  # 4 calls of 0.2 s through 2 connections: two rounds
