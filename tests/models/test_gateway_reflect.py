"""An upstream that reflects the real key: the gateway cuts it from every byte it relays to the
agent and from every record (contract M4; issue 24 item 2). The fake server is scripted to echo
the request's credential into its answer — a whole body, or a stream written in pieces of a few
bytes so the key arrives split across the relay's reads."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.models.test_gateway import KEY, roles, with_gateway

from acx.models import actf_trajectory
from acx.models._scrub import MASK, RelayScrubber, secret_forms
from acx.testing.fake_models import FakeModelServer, reflected

PAD = "." * 80  # the key stays inside the first of the fake stream's two text deltas


def _request(env: dict[str, str], protocol: str, stream: bool) -> tuple[str, dict[str, str], dict]:
    if protocol == "anthropic":
        url, h = f"{env['ANTHROPIC_BASE_URL']}/v1/messages", {"x-api-key": env["ANTHROPIC_API_KEY"]}
        return url, h, {"max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    h = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
    if protocol == "openai-chat":
        return (
            f"{env['OPENAI_BASE_URL']}/chat/completions",
            h,
            {"stream": stream, "messages": [{"role": "user", "content": "hi"}]},
        )
    return f"{env['OPENAI_BASE_URL']}/responses", h, {"stream": stream, "input": "hi"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_a_reflected_key_never_reaches_the_agent_or_the_records(protocol: str, stream: bool) -> None:
    # contract M4: the agent reads the answer over HTTP; neither it nor the transcript, the
    # trajectory or the session's issue source hold the key
    with FakeModelServer([reflected("key={auth}" + PAD, chunk_size=5)]) as srv:

        async def fn(gw):
            s = gw.open_session("t")
            url, h, body = _request(s.env(), protocol, stream)
            async with httpx.AsyncClient(timeout=30) as c, c.stream("POST", url, headers=h, json=body) as r:
                assert r.status_code == 200
                got = b"".join([chunk async for chunk in r.aiter_raw()])
            s.close()
            return s, got

        s, got = trio.run(with_gateway, roles(srv, protocol), fn)
    assert srv.requests and KEY not in got.decode()
    assert b"key=" + MASK in got
    assert s.secrets_cut >= 1  # a Responses stream repeats the text in its response.completed event
    records = json.dumps(s.transcript()) + json.dumps(actf_trajectory(s.calls))
    assert KEY not in records and "key=***" in records
    assert s.usage()["model_calls"] == 1  # the scrubbed stream still folds and counts


def test_a_reflected_key_in_a_translated_answer_is_cut() -> None:
    # contract M4: an agent speaking chat to an anthropic role gets the answer rendered by the gateway
    with FakeModelServer([reflected("key={auth}")]) as srv:

        async def fn(gw):
            s = gw.open_session("t")
            url, h, body = _request(s.env(), "openai-chat", False)
            async with httpx.AsyncClient(timeout=30) as c:
                r = await c.post(url, headers=h, json=body)
            s.close()
            return s, r

        s, r = trio.run(with_gateway, roles(srv, "anthropic"), fn)
    assert r.status_code == 200 and KEY not in r.text and "key=***" in r.text and s.secrets_cut == 1


@settings(max_examples=200, deadline=None)
@given(
    before=st.binary(max_size=40),
    after=st.binary(max_size=40),
    copies=st.integers(min_value=0, max_value=3),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_relay_scrubber_cuts_across_any_chunking(before: bytes, after: bytes, copies: int, cuts: list[int]) -> None:
    # contract M4: however the bytes are split, the output is the whole input with every
    # occurrence replaced, and no read ever passes on the key whole or split
    secret = "sk-ant-api03-AbCdEf/0123456789"
    forms = secret_forms([secret])
    data = before + (secret.encode() + after) * copies
    scrubber = RelayScrubber(forms)
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    out = b"".join(scrubber.feed(p) for p in pieces) + scrubber.flush()
    expected = RelayScrubber(forms).scrub(data)
    assert out == expected and secret.encode() not in out


def test_secret_forms_cover_json_escaping() -> None:
    forms = secret_forms(['k"ey/é-1234'])
    assert b'k\\"ey/\\u00e9-1234' in forms and b'k\\"ey\\/\\u00e9-1234' in forms and 'k"ey/é-1234'.encode() in forms
    assert secret_forms(["abc"]) == ()  # too short to cut without mangling answers


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_a_key_split_across_two_stream_events_is_kept_out_of_the_records(protocol: str) -> None:
    # contract M4: the fake stream sends the text in two deltas, cutting the key in half; the
    # folded answer (transcript, trajectory) never holds it
    with FakeModelServer([reflected("{auth}")]) as srv:

        async def fn(gw):
            s = gw.open_session("t")
            url, h, body = _request(s.env(), protocol, True)
            async with httpx.AsyncClient(timeout=30) as c, c.stream("POST", url, headers=h, json=body) as r:
                got = b"".join([chunk async for chunk in r.aiter_raw()])
            s.close()
            return s, got

        s, got = trio.run(with_gateway, roles(srv, protocol), fn)
    assert KEY[: len(KEY) // 2].encode() in got  # split: each half went by itself
    records = json.dumps(s.transcript()) + json.dumps(actf_trajectory(s.calls))
    assert KEY not in records and KEY[len(KEY) // 2 :] not in records
