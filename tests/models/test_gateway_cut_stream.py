"""A streamed answer cut before its end (the upstream hangs up, or the 64 MiB limit of a chunked
answer: the same path, ``Exchange.stream_error``) is an error the agent sees and an issue on the
attempt — never a 200 that merely ends and is recorded as fine (contract M4, M6; issue 24 item 3)."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
import trio
from tests.models.test_gateway import roles, with_gateway
from tests.models.test_gateway_reflect import _request

from acx.testing.fake_models import FakeModelServer, text


def _stream(srv: FakeModelServer, protocol: str) -> tuple[object, bytes]:
    async def fn(gw):
        s = gw.open_session("t")
        url, h, body = _request(s.env(), protocol, True)
        async with httpx.AsyncClient(timeout=30) as c, c.stream("POST", url, headers=h, json=body) as r:
            assert r.status_code == 200
            got = b"".join([chunk async for chunk in r.aiter_raw()])
        s.close()
        return s, got

    return trio.run(with_gateway, roles(srv, protocol), fn)


def _error_event(got: bytes) -> dict:
    events = [line[6:] for line in got.decode().splitlines() if line.startswith("data: {")]
    last = json.loads(events[-1])
    return last.get("error") if "error" in last and isinstance(last["error"], dict) else last


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_an_upstream_that_hangs_up_mid_stream_is_an_error_event(protocol: str) -> None:
    step = dataclasses.replace(text("a long answer " * 20), cut_after=120)
    with FakeModelServer([step]) as srv:
        s, got = _stream(srv, protocol)
    err = _error_event(got)
    assert "the model's answer was cut" in err["message"]
    assert s.stream_cuts and "agent:" in s.stream_cuts[0]
    (call,) = s.transcript()
    assert call["error"]["kind"] == "stream_cut"
    assert b"[DONE]" not in got
