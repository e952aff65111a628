"""Replaying a run's own transcripts (``acx run --replay RUN_DIR``, issue 26 item 3) — pure.

Each gateway session of the new run (one attempt try, or its scorers' session) is answered from
the recorded calls of the same task and attempt (``model_calls.json``; ``judge_calls.json`` for
the scorers), in order. A call is answered only when it is the recorded one: same role, protocol
and request body as sent upstream (the record's, scrubbed the same way). The first call that
differs ends the replay of that session: it and every later call get a ``replay_diverged`` error
naming the first differing field, and the attempt one ``replay_diverged`` issue.

A recorded streamed answer is kept folded in the transcript (one response, not its events), so
it is re-streamed as the protocol's events rebuilt from it (:func:`render_stream`): the SDKs
assemble the same message, though not from the same chunks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Replay", "ReplayCursor", "first_difference", "render_stream"]


@dataclass
class ReplayCursor:
    """Where one session is in its recorded calls."""

    calls: list[dict[str, Any]]
    next: int = 0
    #: Why the session diverged (then every later call is refused with it).
    diverged: str | None = None


@dataclass
class Replay:
    """The recorded calls of a run: ``(task_id, attempt, stage)`` → the calls, in order
    (``stage`` ``""`` for the agent's session, ``"evaluate"`` for the scorers')."""

    source: str
    calls: Mapping[tuple[str, int, str], list[dict[str, Any]]] = field(default_factory=dict)
    #: The run's secret scrubber (of JSON-like data): a new request is compared with the recorded
    #: one as the record would hold it.
    scrub: Callable[[Any], Any] | None = None

    def cursor(self, session_key: str) -> ReplayCursor:
        """The calls of a gateway session key (``TASK/attempt-N/try-M[/STAGE]``)."""
        task, attempt, stage = _parse_key(session_key)
        recorded = self.calls.get((task, attempt, stage), [])
        # Calls a limit refused were never made: there is nothing to replay for them.
        made = [c for c in recorded if (c.get("error") or {}).get("kind") != "limit_exceeded"]
        return ReplayCursor(made)


def _parse_key(key: str) -> tuple[str, int, str]:
    parts = key.split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].startswith("attempt-") and parts[i][8:].isdigit():
            stage = parts[i + 2] if len(parts) > i + 2 else ""
            return "/".join(parts[:i]), int(parts[i][8:]), stage
    return key, 1, ""


def first_difference(recorded: Any, got: Any, path: str = "") -> str | None:
    """The path of the first field where ``got`` differs from ``recorded`` (``None``: equal)."""
    if isinstance(recorded, dict) and isinstance(got, dict):
        for k in sorted(set(recorded) | set(got), key=str):
            if k not in recorded or k not in got:
                return f"{path}.{k}" if path else str(k)
            found = first_difference(recorded[k], got[k], f"{path}.{k}" if path else str(k))
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(recorded, got, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        if len(recorded) != len(got):
            return f"{path}[{min(len(recorded), len(got))}]"
        return None
    if type(recorded) is not type(got) or recorded != got:
        return path or "(the whole value)"
    return None


def _sse(events: list[dict[str, Any]], *, named: bool) -> bytes:
    out = []
    for e in events:
        head = f"event: {e['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(e)}\n\n")
    return "".join(out).encode()


def render_stream(protocol: str, body: dict[str, Any], request: Mapping[str, Any]) -> bytes:
    """The server-sent events of a recorded (folded) answer in ``protocol``."""
    if protocol == "openai-responses":
        return _sse(_responses_events(body), named=True)
    if protocol == "anthropic":
        return _sse(_anthropic_events(body, str(request.get("model") or "")), named=True)
    return _chat_events(body, request)


def _chat_events(body: dict[str, Any], request: Mapping[str, Any]) -> bytes:
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    base: dict[str, Any] = {k: body[k] for k in ("id", "model", "created") if k in body}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant"})]
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            chunks.append(chunk({key: message[key]}))
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for i, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") or {}
        opening = {"index": i, "id": tc.get("id"), "type": "function", "function": fn}
        chunks.append(chunk({"tool_calls": [opening]}))
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    options = request.get("stream_options")
    if body.get("usage") and isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": body["usage"]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _anthropic_events(body: dict[str, Any], model: str) -> list[dict[str, Any]]:
    usage = dict(body.get("usage") or {})
    start = {k: v for k, v in body.items() if k not in ("content", "stop_reason", "usage")}
    # A folded stream keeps no id or model: the fields clients expect in message_start.
    start.setdefault("id", "msg_acx_replay")
    start.setdefault("model", model)
    start.setdefault("type", "message")
    start.setdefault("role", "assistant")
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"}
    start_usage["output_tokens"] = 0
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**start, "content": [], "usage": start_usage}}
    ]
    for i, block in enumerate(body.get("content") or []):
        kind = block.get("type")
        if kind == "tool_use":
            opening = {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {}}
            raw = block.get("input")
            delta = {"type": "input_json_delta", "partial_json": raw if isinstance(raw, str) else json.dumps(raw)}
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": block.get("signature", "")}
            delta = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
        else:
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block.get("text", "")}
        events.append({"type": "content_block_start", "index": i, "content_block": opening})
        events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": body.get("stop_sequence")},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _responses_events(full: dict[str, Any]) -> list[dict[str, Any]]:
    pending = {**full, "status": "in_progress", "output": []}
    pending.pop("usage", None)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for index, item in enumerate(full.get("output") or []):
        iid = item.get("id", f"item_{index}")
        at = {"item_id": iid, "output_index": index}
        kind = item.get("type")
        if kind == "message":
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}}
            )
            for ci, part in enumerate(item.get("content") or []):
                text = part.get("text", "")
                events.append(
                    {"type": "response.content_part.added", **at, "content_index": ci, "part": {**part, "text": ""}}
                )
                events.append({"type": "response.output_text.delta", **at, "content_index": ci, "delta": text})
                events.append({"type": "response.output_text.done", **at, "content_index": ci, "text": text})
                events.append({"type": "response.content_part.done", **at, "content_index": ci, "part": part})
        elif kind == "function_call":
            args = item.get("arguments")
            args = args if isinstance(args, str) else json.dumps(args)
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, "arguments": ""}}
            )
            events.append({"type": "response.function_call_arguments.delta", **at, "delta": args})
            events.append({"type": "response.function_call_arguments.done", **at, "arguments": args})
        else:
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = "response.incomplete" if full.get("status") == "incomplete" else "response.completed"
    events.append({"type": final, "response": full})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]
