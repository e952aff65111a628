"""What the records keep of huge answers (issue 24 item 3; contracts M4, M6): the agent gets the
whole answer, the call's record keeps at most MAX_CALL_RECORD_BYTES of it (a note says what was
left out, the trajectory keeps the start of each text), an attempt's records at most
MAX_ATTEMPT_RECORD_BYTES, and the attempt gets a ``model_record_cut`` warning; work that grows
with the answer (parsing, folding a stream) runs off the trio thread."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
import trio
from tests.models.test_gateway import roles, with_gateway
from tests.models.test_gateway_reflect import _request

from acx.ir import RunResult
from acx.models import KEPT_TEXT_CHARS, MAX_CALL_RECORD_BYTES, actf_trajectory
from acx.testing.fake_models import FakeModelServer, text

BIG = "0123456789abcdef" * (MAX_CALL_RECORD_BYTES // 16 + 4096)  # a bit over the per-call cap


def _call(srv: FakeModelServer, protocol: str, stream: bool, n: int = 1) -> tuple[object, list[bytes]]:
    async def fn(gw):
        s = gw.open_session("t")
        url, h, body = _request(s.env(), protocol, stream)
        got = []
        async with httpx.AsyncClient(timeout=120) as c:
            for _ in range(n):
                if stream:
                    async with c.stream("POST", url, headers=h, json=body) as r:
                        assert r.status_code == 200
                        got.append(b"".join([chunk async for chunk in r.aiter_raw()]))
                else:
                    r = await c.post(url, headers=h, json=body)
                    assert r.status_code == 200
                    got.append(r.content)
        s.close()
        return s, got

    return trio.run(with_gateway, roles(srv, protocol), fn)


@pytest.mark.parametrize("stream", [False, True])
def test_a_huge_answer_reaches_the_agent_whole_and_its_record_is_cut(stream: bool) -> None:  # M4, M6
    with FakeModelServer([text(BIG)]) as srv:
        s, (got,) = _call(srv, "openai-chat", stream)
    assert got.count(b"0123456789abcdef") >= len(BIG) // 16 - 2  # the agent got all of it
    (rec,) = s.calls
    out = rec.to_dict()
    assert "acx_note" in out["response"] and "not recorded" in out["response"]["acx_note"]
    assert out["response"]["acx_cut_bytes"] > MAX_CALL_RECORD_BYTES
    assert out["usage"] is not None  # what the call cost is still counted
    assert s.record_cuts and s.record_cuts[0].startswith("call 1: its answer")
    content = actf_trajectory(s.calls)["steps"][0]["assistant_content"]["content"]
    assert content.startswith(BIG[:1000]) and len(content) < KEPT_TEXT_CHARS + 200 and "acx: cut here" in content


def test_an_attempts_records_stop_at_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:  # contract M6
    from acx.models import _keep

    monkeypatch.setattr(_keep, "MAX_ATTEMPT_RECORD_BYTES", 5000)
    with FakeModelServer([text("x" * 1500) for _ in range(4)]) as srv:
        s, got = _call(srv, "openai-chat", False, n=4)
    assert all(b"x" * 1500 in g for g in got)
    kept = ["acx_note" not in (c.to_dict()["response"] or {}) for c in s.calls]
    assert kept[0] and not kept[-1], kept  # the first answers kept, the later ones noted
    assert "an attempt's records keep" in s.calls[-1].to_dict()["response"]["acx_note"]
    assert s.recorded_bytes <= 5000


def test_the_attempt_gets_a_model_record_cut_warning(tmp_path: Path) -> None:  # contract M6
    from acx.interpreter._models import merge_into_result
    from acx.secrets import Scrubber

    with FakeModelServer([text(BIG)]) as srv:
        s, _ = _call(srv, "openai-chat", False)
    result = RunResult(task_id="t", status="completed")
    merged, digest = trio.run(merge_into_result, result, s, tmp_path, Scrubber())
    (issue,) = [i for i in merged.issues if i.code == "model_record_cut"]
    assert issue.severity == "warning" and "call 1: its answer" in issue.message
    written = (tmp_path / "model_calls.json").read_bytes()
    assert digest and len(written) < MAX_CALL_RECORD_BYTES // 4  # the file does not carry the answer
    assert json.loads(written)["calls"][0]["response"]["acx_cut_bytes"] > MAX_CALL_RECORD_BYTES


@pytest.mark.parametrize("stream", [False, True])
def test_a_huge_answer_is_parsed_off_the_trio_thread(stream: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trio thread runs every attempt's calls: parsing or folding a 9 MiB answer there stalled
    them all (contract M4)."""
    from acx.models import _gateway, _protocols

    where: list[bool] = []
    parse = _protocols.parse_stream if stream else _protocols.parse_response

    def spy(*args, **kwargs):
        where.append(threading.current_thread() is threading.main_thread())
        return parse(*args, **kwargs)

    monkeypatch.setattr(_gateway, "parse_stream" if stream else "parse_response", spy)
    with FakeModelServer([text("small"), text(BIG)]) as srv:
        _call(srv, "openai-chat", stream, n=2)
    assert where == [True, False]  # the small answer inline, the huge one in a worker thread
