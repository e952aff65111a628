"""What the gateway's records keep of a call (issue 24 item 3; contract M6): a call's request and
answer are stored whole up to ``MAX_CALL_RECORD_BYTES`` each, and an attempt's records up to
``MAX_ATTEMPT_RECORD_BYTES`` together; past either, the record keeps a note of what was left out
(and the trajectory the first ``KEPT_TEXT_CHARS`` of each text), and the attempt gets a
``model_record_cut`` warning. What the agent gets is never cut — only what acx writes down: a
300 MB answer was written three times (``model_calls.json``, the trajectory in ``result.json``,
the checkpoint's copy)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from acx.models._types import ModelResponse

__all__ = [
    "KEPT_TEXT_CHARS",
    "MAX_ATTEMPT_RECORD_BYTES",
    "MAX_CALL_RECORD_BYTES",
    "OFF_THREAD_BYTES",
    "keep_within_caps",
]

#: Each of a call's request and answer, as stored in model_calls.json.
MAX_CALL_RECORD_BYTES = 8 * 1024 * 1024
#: All of an attempt's stored requests and answers together.
MAX_ATTEMPT_RECORD_BYTES = 128 * 1024 * 1024
#: What the trajectory keeps of each text of an answer whose record was cut.
KEPT_TEXT_CHARS = 64 * 1024
#: Work that grows with an answer (parsing, folding a stream, encoding records) runs in a worker
#: thread from this size on, so one huge answer cannot stall every other attempt's calls.
OFF_THREAD_BYTES = 1024 * 1024


class _Record(Protocol):
    seq: int
    request: Any
    response: Any
    normalized_request: Any
    normalized_response: ModelResponse | None


class _Budget(Protocol):
    recorded_bytes: int
    record_cuts: list[str]


def keep_within_caps(rec: _Record, session: _Budget, *, answer_bytes: int, request_bytes: int = 0) -> None:
    """Apply the caps to ``rec`` (its ``request``/``response`` and their normalised views), counting
    what it keeps against ``session``'s budget; a cut is noted in ``session.record_cuts``."""
    cuts: list[str] = []
    if request_bytes:
        limit = _limit(session)
        if request_bytes > limit:
            rec.request = _note("request", request_bytes, limit)
            rec.normalized_request = None  # its trajectory view would hold what the record left out
            cuts.append(f"its request ({request_bytes} bytes)")
        else:
            session.recorded_bytes += request_bytes
    limit = _limit(session)
    if answer_bytes > limit:
        rec.response = _note("answer", answer_bytes, limit)
        if rec.normalized_response is not None:
            rec.normalized_response = _cut_response(rec.normalized_response)
        cuts.append(f"its answer ({answer_bytes} bytes)")
    else:
        session.recorded_bytes += answer_bytes
    if cuts:
        session.record_cuts.append(f"call {rec.seq}: {' and '.join(cuts)}")


def _limit(session: _Budget) -> int:
    return max(0, min(MAX_CALL_RECORD_BYTES, MAX_ATTEMPT_RECORD_BYTES - session.recorded_bytes))


def _note(what: str, size: int, limit: int) -> dict[str, Any]:
    why = (
        f"more than the {MAX_CALL_RECORD_BYTES} bytes a call's record keeps"
        if limit == MAX_CALL_RECORD_BYTES
        else f"past the {MAX_ATTEMPT_RECORD_BYTES} bytes an attempt's records keep"
    )
    return {"acx_note": f"not recorded: the {what} was {size} bytes, {why}", "acx_cut_bytes": size}


def _cut_text(text: str | None) -> str | None:
    if text is None or len(text) <= KEPT_TEXT_CHARS:
        return text
    return f"{text[:KEPT_TEXT_CHARS]}\n[acx: cut here; the whole text was {len(text)} characters]"


def _cut_response(resp: ModelResponse) -> ModelResponse:
    calls = [
        t
        if len(t.raw_arguments) <= KEPT_TEXT_CHARS
        else dataclasses.replace(t, arguments=None, raw_arguments=_cut_text(t.raw_arguments) or "")
        for t in resp.tool_calls
    ]
    return dataclasses.replace(
        resp, content=_cut_text(resp.content), reasoning=_cut_text(resp.reasoning), tool_calls=calls, raw={}
    )
