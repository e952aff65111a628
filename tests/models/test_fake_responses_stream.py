"""acx.testing.fake_models streams the Responses API the way OpenAI does, completely enough that
a real client (the Codex CLI: tests/agents/test_codex_real.py) assembles a message and tool
calls from the events, not only from ``response.completed`` (issue 23)."""

from __future__ import annotations

import json
from typing import Any

from acx.models import parse_stream
from acx.testing.fake_models import Step, render_stream, text, tool_call


def _events(step: Step) -> list[tuple[str, dict[str, Any]]]:
    raw = render_stream(step, "openai-responses", "m", {"stream": True}).decode()
    out = []
    for block in raw.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        event = json.loads(data[len("data: ") :])
        assert event["type"] == name[len("event: ") :]
        out.append((event["type"], event))
    return out


def test_text_reply_events_in_order() -> None:
    events = _events(text("hello world", usage=(9, 3)))
    kinds = [k for k, _ in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    by = dict(events)
    assert by["response.created"]["response"]["status"] == "in_progress"
    assert by["response.created"]["response"]["output"] == []
    added = by["response.output_item.added"]
    assert added["output_index"] == 0 and added["item"]["type"] == "message" and added["item"]["content"] == []
    deltas = [e for k, e in events if k == "response.output_text.delta"]
    assert "".join(d["delta"] for d in deltas) == "hello world"
    assert all(d["item_id"] == added["item"]["id"] and d["content_index"] == 0 for d in deltas)
    assert by["response.output_text.done"]["text"] == "hello world"
    done = by["response.output_item.done"]["item"]
    assert done["content"][0] == {"type": "output_text", "text": "hello world", "annotations": []}
    completed = by["response.completed"]["response"]
    assert completed["status"] == "completed"
    assert completed["usage"]["input_tokens"] == 9 and completed["usage"]["output_tokens"] == 3


def test_function_call_arguments_arrive_as_deltas() -> None:
    events = _events(tool_call("bash", {"command": "ls -la"}, call_id="call_7"))
    kinds = [k for k, _ in events]
    assert kinds[2:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    by = dict(events)
    opening = by["response.output_item.added"]["item"]
    assert opening["type"] == "function_call" and opening["call_id"] == "call_7" and opening["name"] == "bash"
    assert opening["arguments"] == "" and opening["status"] == "in_progress"
    pieces = [e["delta"] for k, e in events if k == "response.function_call_arguments.delta"]
    assert json.loads("".join(pieces)) == {"command": "ls -la"}
    assert json.loads(by["response.function_call_arguments.done"]["arguments"]) == {"command": "ls -la"}
    final = by["response.output_item.done"]["item"]
    assert final["status"] == "completed" and json.loads(final["arguments"]) == {"command": "ls -la"}


def test_text_and_tool_call_and_reasoning_have_their_own_output_index() -> None:
    step = Step(
        "message",
        content="let me look",
        reasoning="think",
        tool_calls=(("c1", "bash", {"command": "ls"}),),
        finish_reason="tool_calls",
    )
    events = _events(step)
    added = [e for k, e in events if k == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"]) for e in added] == [
        (0, "reasoning"),
        (1, "message"),
        (2, "function_call"),
    ]
    summary = [e for k, e in events if k == "response.reasoning_summary_text.done"]
    assert summary[0]["text"] == "think"


def test_a_cut_off_answer_ends_incomplete() -> None:
    events = _events(text("trunc", usage=(1, 1), finish_reason="length"))
    assert events[-1][0] == "response.incomplete"
    assert events[-1][1]["response"]["status"] == "incomplete"


def test_the_gateway_folds_the_full_stream() -> None:
    raw = render_stream(tool_call("bash", {"command": "ls"}, call_id="c9"), "openai-responses", "m", {"stream": True})
    folded = parse_stream("openai-responses", raw)
    assert folded.tool_calls[0].id == "c9" and folded.tool_calls[0].name == "bash"
