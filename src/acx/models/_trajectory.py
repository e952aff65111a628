"""Transcript → trajectory: an attempt's model calls as an AgentCompass ``ACTF_v1.0`` trajectory.

One step per model call that got an answer, ``step_id`` from 1, whoever made the call (a
host-side harness or an agent in the sandbox). Fields as AgentCompass's ``StepInfo``:
``system_prompt`` and ``tools`` on step 1; ``user_content`` = the user text new since the previous
call; ``assistant_content{content, reasoning_content, tool_calls[{id, type, function{name,
arguments: dict}}]}``; ``observation`` = the tool results the next call carried for this step's
tool calls; ``metric{prompt_tokens_len, completion_tokens_len, llm_infer_ms, env_action_ms,
stop_reason}``; ``started_at``/``finished_at`` in ISO 8601 UTC. acx adds ``role`` and ``model``, and
the keys a host-side harness annotated the call with (``GatewaySession.annotate``; terminus's
``context_management`` on its summarization calls).
"""

from __future__ import annotations

from typing import Any

from acx.models._gateway import CallRecord, iso_now

__all__ = ["actf_trajectory"]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _new_user_text(messages: list[dict[str, Any]]) -> str:
    """User text after the last assistant turn (the whole first turn on step 1)."""
    last_assistant = -1
    for i in range(len(messages) - 1, -1, -1):  # from the end: the conversation grows each turn
        if messages[i].get("role") == "assistant":
            last_assistant = i
            break
    parts = [_text(m.get("content")) for m in messages[last_assistant + 1 :] if m.get("role") == "user"]
    return "\n\n".join(p for p in parts if p)


def _reported(
    index: int, resp: Any, tool_results: dict[tuple[int, str], dict[str, Any]]
) -> tuple[list[dict[str, Any]], int] | None:
    """The observations a host-side agent reported for the tool calls of ``calls[index]``, and
    the time its tools took; ``None`` when it reported none (an agent acx did not write)."""
    found = [
        tool_results[(index, t.id)] | {"source_call_id": t.id} for t in resp.tool_calls if (index, t.id) in tool_results
    ]
    if not found:
        return None
    observation = [
        {"source_call_id": r["source_call_id"], "content": r["content"]}
        | {k: v for k, v in r.items() if k not in ("content", "duration_ms", "source_call_id")}
        for r in found
    ]
    return observation, sum(int(r["duration_ms"]) for r in found)


def actf_trajectory(
    calls: list[CallRecord], tool_results: dict[tuple[int, str], dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The ACTF v1.0 trajectory of ``calls`` (``None`` when no call got an answer).

    ``tool_results`` (``GatewaySession.tool_results``) are the observations a host-side agent
    loop reported, with their timings; without them a step's observation is read from the tool
    messages the next call carried."""
    answered = [c for c in calls if c.normalized_response is not None]
    if not answered:
        return None
    index_of = {id(c): i for i, c in enumerate(calls)}
    steps: list[dict[str, Any]] = []
    for i, call in enumerate(answered):
        req = call.chat_request()
        resp = call.normalized_response
        assert resp is not None
        messages = req.messages if req is not None else []
        step: dict[str, Any] = {"step_id": i + 1, "role": call.role, "model": call.model}
        if i == 0:
            system = [_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
            step["system_prompt"] = "\n\n".join(system) if system else None
            step["tools"] = req.tools if req is not None else []
        step["user_content"] = _new_user_text(messages)
        step["assistant_content"] = {
            "content": resp.content,
            "reasoning_content": resp.reasoning,
            "tool_calls": [
                {
                    "id": t.id,
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "arguments": t.arguments if t.arguments is not None else t.raw_arguments,
                    },
                }
                for t in resp.tool_calls
            ],
        }
        observation: list[dict[str, Any]] = []
        env_ms = 0
        nxt = answered[i + 1] if i + 1 < len(answered) else None
        nxt_req = nxt.chat_request() if nxt is not None else None
        reported = _reported(index_of[id(call)], resp, tool_results or {})
        if reported is not None:
            observation, env_ms = reported
        elif resp.tool_calls and nxt is not None and nxt_req is not None:
            ids = {t.id for t in resp.tool_calls}
            observation = [
                {"source_call_id": m.get("tool_call_id"), "content": _text(m.get("content"))}
                for m in nxt_req.messages
                if m.get("role") == "tool" and m.get("tool_call_id") in ids
            ]
            env_ms = max(0, int((nxt.started_at - call.finished_at) * 1000))
        step["observation"] = observation
        usage = call.usage or {}
        step["metric"] = {
            "prompt_tokens_len": usage.get("prompt_tokens"),
            "completion_tokens_len": usage.get("completion_tokens"),
            "cached_tokens_len": usage.get("cached_tokens"),
            "llm_infer_ms": int(call.duration_ms),
            "env_action_ms": env_ms,
            "stop_reason": resp.finish_reason,
            "cost_usd": call.cost_usd,
        }
        if call.cached:  # the recorded answer, not a new sample (honest at temperature > 0)
            step["cached"] = True
        for key, value in call.annotations.items():  # the harness's account (GatewaySession.annotate)
            step.setdefault(key, value)
        step["started_at"] = iso_now(call.started_at)
        step["finished_at"] = iso_now(call.finished_at)
        steps.append(step)
    return {
        "schema_version": "ACTF_v1.0",
        "steps": steps,
        "started_at": iso_now(answered[0].started_at),
        "finished_at": iso_now(answered[-1].finished_at),
    }
