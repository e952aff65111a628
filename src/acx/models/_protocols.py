"""Protocol adapters (pure): OpenAI-chat-shaped requests to the wire shape of each protocol, and
each protocol's answer (in every known server dialect) back to one :class:`ModelResponse`.

Server differences tolerated (see the agent-harness research note §4.4): tool-call ``arguments`` as
a JSON string or object; reasoning under ``reasoning_content``, ``reasoning`` or
``reasoning_details`` (and Anthropic ``thinking`` blocks); ``max_tokens`` vs
``max_completion_tokens`` passed through as given (never injected for OpenAI); a missing or partial
``usage``; DeepSeek's ``prompt_cache_hit_tokens``; content given as a list of parts.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from acx.models._types import ChatRequest, Endpoint, ModelCallError, ModelResponse, Protocol, ToolCall, Usage

__all__ = [
    "RESERVED_PARAMS",
    "build_call",
    "call_path",
    "loads",
    "normalize_request",
    "parse_response",
    "parse_stream",
    "render_response",
    "request_problem",
    "translatable_params",
]

#: Request keys acx sets itself; a params map naming them is refused, never silently overridden.
RESERVED_PARAMS = frozenset({"model", "messages", "tools", "stream", "input", "system"})
#: Anthropic requires max_tokens; used when neither the request nor the endpoint sets one.
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096


def call_path(protocol: Protocol, base_url: str) -> str:
    """The URL of ``protocol``'s endpoint under ``base_url`` (OpenAI SDK / Anthropic SDK rules:
    OpenAI base URLs include ``/v1``; Anthropic's usually do not)."""
    base = base_url.rstrip("/")
    if protocol == "openai-chat":
        return f"{base}/chat/completions"
    if protocol == "openai-responses":
        return f"{base}/responses"
    return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"


def _merged_params(endpoint: Endpoint, request: ChatRequest) -> dict[str, Any]:
    params = {**endpoint.params, **request.params}
    bad = sorted(RESERVED_PARAMS & params.keys())
    if bad:
        raise ModelCallError(
            "bad_request",
            f"model params may not set {', '.join(bad)} (acx sets them from the task and harness)",
        )
    return params


def build_call(endpoint: Endpoint, request: ChatRequest) -> tuple[str, dict[str, Any], dict[str, str]]:
    """``(url, json body, headers)`` for one call; the API key goes only into the headers."""
    params = _merged_params(endpoint, request)
    url = call_path(endpoint.protocol, endpoint.base_url)
    if endpoint.protocol == "anthropic":
        body = _anthropic_body(endpoint.model, request, params)
    elif endpoint.protocol == "openai-responses":
        body = _responses_body(endpoint.model, request, params)
    else:
        body = {"model": endpoint.model, "messages": request.messages, **params}
        if request.tools:
            body["tools"] = request.tools
    return url, body, auth_headers(endpoint.protocol, endpoint.credential(), endpoint.anthropic_version)


def auth_headers(protocol: Protocol, api_key: str | None, anthropic_version: str = "2023-06-01") -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if protocol == "anthropic":
        headers["anthropic-version"] = anthropic_version
        if api_key:
            headers["x-api-key"] = api_key
    elif api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _text_of(content: Any) -> str:
    """Text of an OpenAI content value (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _max_tokens(params: dict[str, Any], out_key: str) -> dict[str, Any]:
    """Map either OpenAI spelling of the output budget to the protocol's one key."""
    params = dict(params)
    value = params.pop("max_completion_tokens", None)
    value = params.pop("max_tokens", value)
    if value is not None:
        params[out_key] = value
    return params


def _anthropic_body(model: str, request: ChatRequest, params: dict[str, Any]) -> dict[str, Any]:
    params = _max_tokens(params, "max_tokens")
    if "stop" in params:  # OpenAI's name for Anthropic's stop_sequences
        stop = params.pop("stop")
        params["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    params.setdefault("max_tokens", ANTHROPIC_DEFAULT_MAX_TOKENS)
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for msg in request.messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(msg.get("content")))
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": msg.get("tool_call_id", ""),
                "content": _text_of(msg.get("content")),
            }
            # Consecutive tool results travel in one user turn (the API alternates roles).
            if messages and messages[-1]["role"] == "user" and _all_tool_results(messages[-1]["content"]):
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            text = _text_of(msg.get("content"))
            if text:
                blocks.append({"type": "text", "text": text})
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function", {})
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc.get("id", ""),
                        "name": fn.get("name", ""),
                        "input": _args_dict(fn.get("arguments")),
                    }
                )
            messages.append({"role": "assistant", "content": blocks or [{"type": "text", "text": ""}]})
        else:
            messages.append({"role": "user", "content": _text_of(msg.get("content"))})
    body: dict[str, Any] = {"model": model, "messages": messages, **params}
    if system:
        body["system"] = "\n\n".join(system)
    if request.tools:
        body["tools"] = [
            {
                "name": t.get("function", t).get("name", ""),
                "description": t.get("function", t).get("description", ""),
                "input_schema": t.get("function", t).get("parameters") or {"type": "object", "properties": {}},
            }
            for t in request.tools
        ]
    return body


def _all_tool_results(content: Any) -> bool:
    return isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _responses_body(model: str, request: ChatRequest, params: dict[str, Any]) -> dict[str, Any]:
    params = _max_tokens(params, "max_output_tokens")
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for msg in request.messages:
        role = msg.get("role")
        if role in ("system", "developer") and not items:
            instructions.append(_text_of(msg.get("content")))
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id", ""),
                    "output": _text_of(msg.get("content")),
                }
            )
        elif role == "assistant":
            text = _text_of(msg.get("content"))
            if text:
                items.append({"role": "assistant", "content": text})
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function", {})
                args = fn.get("arguments")
                items.append(
                    {
                        "type": "function_call",
                        "call_id": tc.get("id", ""),
                        "name": fn.get("name", ""),
                        "arguments": args if isinstance(args, str) else json.dumps(args or {}),
                    }
                )
        else:
            items.append({"role": role or "user", "content": _text_of(msg.get("content"))})
    body: dict[str, Any] = {"model": model, "input": items, **params}
    if instructions:
        body["instructions"] = "\n\n".join(instructions)
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.get("function", t).get("name", ""),
                "description": t.get("function", t).get("description", ""),
                "parameters": t.get("function", t).get("parameters") or {"type": "object", "properties": {}},
            }
            for t in request.tools
        ]
    return body


# ---- responses ----------------------------------------------------------------------------------


def _malformed(what: str) -> ModelCallError:
    return ModelCallError("malformed_response", f"the model endpoint answered 200 but {what}")


def _args_dict(args: Any) -> dict[str, Any]:
    parsed = _parse_args(args)
    return parsed if parsed is not None else {}


def _parse_args(args: Any) -> dict[str, Any] | None:
    if isinstance(args, dict):
        return args
    if args is None or args == "":
        return {}
    if isinstance(args, str):
        try:
            value = json.loads(args)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def _tool_call(cid: Any, name: Any, args: Any) -> ToolCall:
    raw = args if isinstance(args, str) else json.dumps(args if args is not None else {})
    return ToolCall(id=str(cid or ""), name=str(name or ""), arguments=_parse_args(args), raw_arguments=raw)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _openai_usage(u: Any) -> Usage | None:
    if not isinstance(u, dict):
        return None
    prompt = u.get("prompt_tokens", u.get("input_tokens"))
    completion = u.get("completion_tokens", u.get("output_tokens"))
    if prompt is None and completion is None:
        return None
    pdet = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
    cdet = u.get("completion_tokens_details") or u.get("output_tokens_details") or {}
    cached = pdet.get("cached_tokens") if isinstance(pdet, dict) else None
    if cached is None:
        cached = u.get("prompt_cache_hit_tokens")  # DeepSeek
    reasoning = cdet.get("reasoning_tokens") if isinstance(cdet, dict) else None
    return Usage(_int(prompt), _int(completion), _int(cached), _int(reasoning))


def _parse_chat(body: dict[str, Any]) -> ModelResponse:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed("with no choices")
    choice = choices[0]
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise _malformed("choices[0] has no message")
    reasoning, key = None, None
    for k in ("reasoning_content", "reasoning"):
        if isinstance(msg.get(k), str) and msg[k]:
            reasoning, key = msg[k], k
            break
    if reasoning is None and isinstance(msg.get("reasoning_details"), list):
        text = "".join(d.get("text", "") for d in msg["reasoning_details"] if isinstance(d, dict))
        if text:
            reasoning, key = text, "reasoning_details"
    calls = []
    for tc in msg.get("tool_calls") or []:
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function") or {}
        calls.append(_tool_call(tc.get("id"), fn.get("name"), fn.get("arguments")))
    content = msg.get("content")
    return ModelResponse(
        content=_text_of(content) if content is not None else None,
        tool_calls=calls,
        reasoning=reasoning,
        reasoning_key=key,
        finish_reason=choice.get("finish_reason"),
        usage=_openai_usage(body.get("usage")),
        raw=body,
    )


def _parse_responses(body: dict[str, Any]) -> ModelResponse:
    output = body.get("output")
    if not isinstance(output, list):
        raise _malformed("with no output list")
    texts: list[str] = []
    reasoning: list[str] = []
    calls = []
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") in ("output_text", "text"):
                    texts.append(part.get("text", ""))
        elif kind == "function_call":
            calls.append(_tool_call(item.get("call_id") or item.get("id"), item.get("name"), item.get("arguments")))
        elif kind == "reasoning":
            for part in item.get("summary") or item.get("content") or []:
                if isinstance(part, dict):
                    reasoning.append(part.get("text", ""))
    finish = "tool_calls" if calls else "stop"
    if body.get("status") == "incomplete":
        finish = "length"
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=calls,
        reasoning="".join(reasoning) or None,
        reasoning_key="reasoning" if reasoning else None,
        finish_reason=finish,
        usage=_openai_usage(body.get("usage")),
        raw=body,
    )


_ANTHROPIC_STOP = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def _parse_anthropic(body: dict[str, Any]) -> ModelResponse:
    blocks = body.get("content")
    if not isinstance(blocks, list):
        raise _malformed("with no content blocks")
    texts: list[str] = []
    thinking: list[str] = []
    calls = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text":
            texts.append(b.get("text", ""))
        elif b.get("type") == "thinking":
            thinking.append(b.get("thinking", ""))
        elif b.get("type") == "tool_use":
            calls.append(_tool_call(b.get("id"), b.get("name"), b.get("input")))
    u = body.get("usage")
    usage = None
    if isinstance(u, dict) and ("input_tokens" in u or "output_tokens" in u):
        cached = _int(u.get("cache_read_input_tokens"))
        prompt = _int(u.get("input_tokens")) + cached + _int(u.get("cache_creation_input_tokens"))
        usage = Usage(prompt, _int(u.get("output_tokens")), cached, 0)
    stop = body.get("stop_reason")
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=calls,
        reasoning="".join(thinking) or None,
        reasoning_key="thinking" if thinking else None,
        finish_reason=_ANTHROPIC_STOP.get(stop, stop) if isinstance(stop, str) else None,
        usage=usage,
        raw=body,
    )


def loads(data: bytes) -> Any:
    """``json.loads`` semantics at msgspec's speed (every call of a run passes here twice): the
    stdlib decides only what msgspec refuses (``NaN``, integers beyond 64 bits, ...). Raises
    ``ValueError`` for what is not JSON, and for JSON nested too deeply to decode (both decoders
    recurse: ``[[[…]]]`` 200,000 deep is a ``RecursionError``, which is not a ``ValueError``)."""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _loads_event(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def parse_response(protocol: Protocol, data: bytes) -> ModelResponse:
    """Normalise a 200 body; a body that is not the protocol's shape is ``malformed_response``."""
    try:
        body = loads(data)
    except (ValueError, UnicodeDecodeError):
        raise _malformed("with a body that is not JSON (or JSON nested too deeply)") from None
    if not isinstance(body, dict):
        raise _malformed("with a JSON body that is not an object")
    try:
        if protocol == "anthropic":
            return _parse_anthropic(body)
        if protocol == "openai-responses":
            return _parse_responses(body)
        return _parse_chat(body)
    except _SHAPE_ERRORS as exc:  # a field of the wrong type deep inside (``"function": "x"``)
        raise _malformed(f"with a body not in the {protocol} shape ({_shape_error(exc)})") from None


#: What reading a JSON value of the wrong shape raises (``5[0]``, ``"x".get``, ``int([])``).
_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError)


def _shape_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:120]}"


# ---- the shape of an agent's request (the gateway, before it reads one) ------------------------

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _objects(value: Any, path: str) -> str | None:
    """A problem unless ``value`` is an array of objects."""
    if not isinstance(value, list):
        return f"{path} must be an array, not {_kind(value)}"
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return f"{path}[{i}] must be an object, not {_kind(item)}"
    return None


def _content(value: Any, path: str, *, text_only: bool = False) -> str | None:
    """A message content: a string, null or an array of objects (parts, blocks)."""
    if value is None or isinstance(value, str):
        return None
    if text_only or not isinstance(value, list):
        return f"{path} must be a string{'' if text_only else ' or an array of content parts'}, not {_kind(value)}"
    return _objects(value, path)


def _chat_messages(messages: Any) -> str | None:
    problem = _objects(messages, "messages")
    if problem is not None:
        return problem
    for i, m in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(m.get("role"), str):
            return f"{at}.role must be a string, not {_kind(m.get('role'))}"
        problem = _content(m.get("content"), f"{at}.content")
        if problem is None and m.get("tool_calls") is not None:
            problem = _objects(m["tool_calls"], f"{at}.tool_calls")
            for j, tc in enumerate(m["tool_calls"] if problem is None else ()):
                fn = tc.get("function")
                if fn is not None and not isinstance(fn, dict):
                    problem = f"{at}.tool_calls[{j}].function must be an object, not {_kind(fn)}"
                    break
        if problem is not None:
            return problem
    return None


def _anthropic_messages(messages: Any) -> str | None:
    problem = _objects(messages, "messages")
    if problem is not None:
        return problem
    for i, m in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(m.get("role"), str):
            return f"{at}.role must be a string, not {_kind(m.get('role'))}"
        if m.get("content") is None:
            return f"{at}.content is missing"
        problem = _content(m["content"], f"{at}.content")
        if problem is not None:
            return problem
    return None


def _responses_input(items: Any) -> str | None:
    if items is None or isinstance(items, str):
        return None
    if not isinstance(items, list):
        return f"input must be a string or an array of input items, not {_kind(items)}"
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            return f"input[{i}] must be an object, not {_kind(it)}"
        if "role" in it:
            if not isinstance(it["role"], str):
                return f"input[{i}].role must be a string, not {_kind(it['role'])}"
            problem = _content(it.get("content"), f"input[{i}].content")
            if problem is not None:
                return problem
    return None


def request_problem(protocol: Protocol, body: dict[str, Any], *, translated: bool = False) -> str | None:
    """What makes ``body`` (a JSON object an agent sent) no ``protocol`` request, with the field's
    path (``messages[2].content must be ...``); ``None`` when the gateway can read it. Only the
    fields the gateway reads are checked, the model server judges the rest: a request passed
    through in its own protocol has its top-level switches checked (O(1) per call), one the
    gateway ``translated`` to another protocol its messages, input and tools too."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return f"stream must be a boolean, not {_kind(stream)}"
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return f"stream_options must be an object, not {_kind(options)}"
    if not translated:
        return None
    if body.get("tools") is not None:
        problem = _objects(body["tools"], "tools")
        if problem is not None:
            return problem
    if protocol == "openai-responses":
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            return f"instructions must be a string, not {_kind(instructions)}"
        return _responses_input(body.get("input"))
    if "messages" not in body:
        return "messages is missing"
    if protocol == "anthropic":
        system = body.get("system")
        if system is not None and not isinstance(system, str):
            problem = _objects(system, "system")
            if problem is not None:
                return problem.replace("must be an array", "must be a string or an array of text blocks")
        return _anthropic_messages(body["messages"])
    return _chat_messages(body["messages"])


def normalize_request(protocol: Protocol, body: dict[str, Any]) -> ChatRequest:
    """An incoming wire request as an OpenAI-chat :class:`ChatRequest` (for transcripts and
    trajectories); parameters other than the messages and tools are kept in ``params``."""
    skip = {"model", "messages", "tools", "system", "input", "instructions"}
    params = {k: v for k, v in body.items() if k not in skip}
    messages: list[dict[str, Any]] = []
    raw_tools = body.get("tools")
    tools: list[dict[str, Any]] = [t for t in raw_tools if isinstance(t, dict)] if isinstance(raw_tools, list) else []
    if protocol == "anthropic":
        system = body.get("system")
        if system:
            messages.append({"role": "system", "content": _text_of(system) if not isinstance(system, str) else system})
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if isinstance(content, list):
                results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
                for r in results:
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": r.get("tool_use_id", ""),
                            "content": _text_of(r.get("content")),
                        }
                    )
                text = _text_of([b for b in content if isinstance(b, dict) and b.get("type") == "text"])
                uses = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
                if text or uses or not results:
                    msg: dict[str, Any] = {"role": m.get("role", "user"), "content": text}
                    if uses:
                        msg["tool_calls"] = [
                            {
                                "id": u.get("id"),
                                "type": "function",
                                "function": {"name": u.get("name"), "arguments": json.dumps(u.get("input") or {})},
                            }
                            for u in uses
                        ]
                    messages.append(msg)
            else:
                messages.append({"role": m.get("role", "user"), "content": content})
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema"),
                },
            }
            for t in tools
            if isinstance(t, dict)
        ]
    elif protocol == "openai-responses":
        if body.get("instructions"):
            messages.append({"role": "system", "content": body["instructions"]})
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        for it in items or []:
            if not isinstance(it, dict):
                continue
            if it.get("type") == "function_call_output":
                messages.append(
                    {"role": "tool", "tool_call_id": it.get("call_id", ""), "content": _text_of(it.get("output"))}
                )
            elif it.get("type") == "function_call":
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": it.get("call_id"),
                                "type": "function",
                                "function": {"name": it.get("name"), "arguments": it.get("arguments")},
                            }
                        ],
                    }
                )
            elif "role" in it:
                content = it.get("content")
                if isinstance(content, list):
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                messages.append({"role": it["role"], "content": content})
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description", ""),
                    "parameters": t.get("parameters"),
                },
            }
            for t in tools
            if isinstance(t, dict)
        ]
    else:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return ChatRequest(messages=messages, tools=tools, params=params)


# ---- translation between protocols (the gateway, when an agent speaks another protocol) --------

#: Request parameters the gateway can carry from one protocol to another, by their common name.
_COMMON_PARAMS = {
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "stop": "stop",
    "stop_sequences": "stop",
}


def translatable_params(params: dict[str, Any], target: Protocol) -> tuple[dict[str, Any], list[str]]:
    """The parameters of a request in another protocol, renamed for ``target``'s request builder,
    and the names that cannot be translated (refused by the gateway, never dropped silently)."""
    out: dict[str, Any] = {}
    bad: list[str] = []
    for key, value in params.items():
        if key == "stream" and not value:
            continue
        if key == "tool_choice" and value in ("auto", {"type": "auto"}):
            continue  # every protocol's default
        name = _COMMON_PARAMS.get(key)
        if name is None or (name == "stop" and target == "openai-responses"):
            bad.append(key)
        else:
            out[name] = value
    return out, sorted(bad)


def _usage_dict(protocol: Protocol, usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    if protocol == "anthropic":
        return {
            "input_tokens": max(0, usage.prompt_tokens - usage.cached_tokens),
            "output_tokens": usage.completion_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "cache_creation_input_tokens": 0,
        }
    if protocol == "openai-responses":
        return {
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        }
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


_TO_ANTHROPIC_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def render_response(protocol: Protocol, resp: ModelResponse, model: str) -> dict[str, Any]:
    """A normalised answer in ``protocol``'s response shape (what an agent speaking it expects)."""
    usage = _usage_dict(protocol, resp.usage)
    out: dict[str, Any]
    if protocol == "anthropic":
        blocks: list[dict[str, Any]] = []
        if resp.reasoning:
            blocks.append({"type": "thinking", "thinking": resp.reasoning, "signature": ""})
        if resp.content:
            blocks.append({"type": "text", "text": resp.content})
        for t in resp.tool_calls:
            blocks.append({"type": "tool_use", "id": t.id, "name": t.name, "input": t.arguments or {}})
        stop = _TO_ANTHROPIC_STOP.get(resp.finish_reason or "stop", resp.finish_reason or "end_turn")
        out = {"id": "msg_acx", "type": "message", "role": "assistant", "model": model, "content": blocks}
        out["stop_reason"] = stop
        out["stop_sequence"] = None
    elif protocol == "openai-responses":
        items: list[dict[str, Any]] = []
        if resp.reasoning:
            items.append(
                {"type": "reasoning", "id": "rs_acx", "summary": [{"type": "summary_text", "text": resp.reasoning}]}
            )
        if resp.content is not None:
            text = {"type": "output_text", "text": resp.content, "annotations": []}
            items.append(
                {"type": "message", "id": "msg_acx", "role": "assistant", "status": "completed", "content": [text]}
            )
        for t in resp.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{t.id}",
                    "call_id": t.id,
                    "name": t.name,
                    "arguments": t.raw_arguments,
                }
            )
        status = "incomplete" if resp.finish_reason == "length" else "completed"
        out = {"id": "resp_acx", "object": "response", "model": model, "status": status, "output": items}
    else:
        message = resp.assistant_message(keep_reasoning=True)
        out = {
            "id": "chatcmpl-acx",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": resp.finish_reason or "stop"}],
        }
    if usage is not None:
        out["usage"] = usage
    return out


# ---- streamed answers (server-sent events), folded back into one response ------------------------


def _sse_events(data: bytes) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for block in data.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [ln[5:].strip() for ln in block.split(b"\n") if ln.startswith(b"data:")]
        payload = b"\n".join(lines)
        if not payload or payload == b"[DONE]":
            continue
        try:
            obj = _loads_event(payload)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict):
            events.append(obj)
    return events


def _fold_chat(events: list[dict[str, Any]]) -> dict[str, Any]:
    content: list[str] = []
    reasoning: list[str] = []
    key = "reasoning_content"
    calls: dict[int, dict[str, str]] = {}
    finish = None
    usage = None
    for obj in events:
        if isinstance(obj.get("usage"), dict):
            usage = obj["usage"]
        for ch in obj.get("choices") or []:
            if not isinstance(ch, dict) or ch.get("index", 0) != 0:
                continue
            d = ch.get("delta") or {}
            if isinstance(d.get("content"), str):
                content.append(d["content"])
            for k in ("reasoning_content", "reasoning"):
                if isinstance(d.get(k), str) and d[k]:
                    reasoning.append(d[k])
                    key = k
            for tc in d.get("tool_calls") or []:
                slot = calls.setdefault(int(tc.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                fn = tc.get("function") or {}
                slot["id"] = tc.get("id") or slot["id"]
                slot["name"] = fn.get("name") or slot["name"]
                args = fn.get("arguments")
                slot["arguments"] += args if isinstance(args, str) else json.dumps(args) if args else ""
            finish = ch.get("finish_reason") or finish
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content else None}
    if reasoning:
        message[key] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    body: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return body


def _fold_anthropic(events: list[dict[str, Any]]) -> dict[str, Any]:
    blocks: dict[int, dict[str, Any]] = {}
    usage: dict[str, Any] = {}
    stop = None
    for obj in events:
        kind = obj.get("type")
        if kind == "message_start":
            usage.update((obj.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            blocks[int(obj.get("index", 0))] = dict(obj.get("content_block") or {}, _json="")
        elif kind == "content_block_delta":
            b = blocks.setdefault(int(obj.get("index", 0)), {"type": "text", "text": "", "_json": ""})
            d = obj.get("delta") or {}
            if d.get("type") == "text_delta":
                b["text"] = b.get("text", "") + d.get("text", "")
            elif d.get("type") == "input_json_delta":
                b["_json"] += d.get("partial_json", "")
            elif d.get("type") == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + d.get("thinking", "")
        elif kind == "message_delta":
            stop = (obj.get("delta") or {}).get("stop_reason") or stop
            usage.update(obj.get("usage") or {})
    content = []
    for _, b in sorted(blocks.items()):
        raw = b.pop("_json", "")
        if b.get("type") == "tool_use" and raw:
            try:
                b["input"] = _loads_event(raw.encode())
            except ValueError:
                b["input"] = raw
        content.append(b)
    return {"content": content, "stop_reason": stop, "usage": usage}


def parse_stream(protocol: Protocol, data: bytes) -> ModelResponse:
    """A streamed answer (server-sent events) folded into one normalised response; an event
    stream not in the protocol's shape is ``malformed_response``."""
    try:
        return _parse_events(protocol, _sse_events(data))
    except _SHAPE_ERRORS as exc:
        raise _malformed(f"with an event stream not in the {protocol} shape ({_shape_error(exc)})") from None


def _parse_events(protocol: Protocol, events: list[dict[str, Any]]) -> ModelResponse:
    if protocol == "openai-responses":
        for obj in reversed(events):
            if obj.get("type") in ("response.completed", "response.incomplete") and isinstance(
                obj.get("response"), dict
            ):
                return _parse_responses(obj["response"])
        raise _malformed("its event stream ended without response.completed")
    if not events:
        raise _malformed("its event stream carried no events")
    if protocol == "anthropic":
        return _parse_anthropic(_fold_anthropic(events))
    return _parse_chat(_fold_chat(events))
