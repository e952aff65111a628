"""Scripted OpenAI- and Anthropic-compatible model servers on loopback (for tests, yours and acx's).

A :class:`FakeModelServer` is a real HTTP/1.1 server (stdlib ``ThreadingHTTPServer``) bound to
``127.0.0.1`` on a free port. It serves the three wire protocols acx speaks:

- ``POST /v1/chat/completions`` (openai-chat),
- ``POST /v1/responses`` (openai-responses),
- ``POST /v1/messages`` (anthropic),

and answers each request with the next :class:`Step` of its script, rendered in the shape of the
protocol that was called. Every request (method, path, headers, parsed JSON body) is recorded in
:attr:`FakeModelServer.requests`. When the script runs out, the server answers with its
``default`` step (a plain text reply unless set to ``None``, in which case it answers 500 so a
test that makes an unplanned call fails loudly).

Steps::

    text("hello", usage=(10, 2))                       # assistant text; usage (prompt, completion[, cached])
    tool_call("bash", {"command": "ls"})               # one tool call (args as a JSON string on the wire)
    tool_call("bash", {...}, args_as_object=True)      # llama.cpp/TGI style: arguments as an object
    text("4", reasoning="2+2", reasoning_key="reasoning")  # vLLM >= 0.13 naming (default reasoning_content)
    error(429, retry_after=2)                          # an HTTP error, optionally with Retry-After
    text("late", delay=1.5)                            # any step can be delayed (seconds)
    malformed(b"<html>bad gateway</html>")             # status 200 with a non-JSON body
    drop()                                             # close the connection without a response
    text("no usage", usage=None)                       # a response without a usage block

Usage::

    with FakeModelServer([tool_call("bash", {"command": "ls"}), text("done")]) as srv:
        base_url = srv.base_url            # "http://127.0.0.1:PORT/v1"
        ...
        assert srv.requests[0].body["model"] == "m"

The server never calls out and never binds anything but loopback unless ``host`` says so (tests
that serve a container pass the address containers reach).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeModelServer",
    "RecordedRequest",
    "Step",
    "drop",
    "error",
    "malformed",
    "reflected",
    "text",
    "tool_call",
]


@dataclass(frozen=True)
class Step:
    """One scripted answer. Build steps with :func:`text`, :func:`tool_call`, :func:`error`,
    :func:`malformed` and :func:`drop` rather than by hand."""

    kind: str  # "message" | "error" | "malformed" | "drop"
    content: str | None = None
    tool_calls: tuple[tuple[str, str, Any], ...] = ()  # (id, name, arguments)
    args_as_object: bool = False
    reasoning: str | None = None
    reasoning_key: str = "reasoning_content"
    finish_reason: str | None = None
    usage: tuple[int, ...] | None = (10, 5)
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    delay: float = 0.0
    #: A hostile upstream: ``{auth}`` in ``content`` becomes the request's credential (the bearer
    #: value of ``Authorization``, else ``x-api-key``) — a server that reflects request headers.
    reflect: bool = False
    #: Write the answer in pieces of this many bytes, flushed one by one (splits anything in it
    #: across the client's reads).
    chunk_size: int | None = None
    #: Hang up after this many bytes of the answer's body (its Content-Length promised them all):
    #: an upstream that dies mid-answer.
    cut_after: int | None = None


def text(
    content: str,
    *,
    usage: tuple[int, ...] | None = (10, 5),
    reasoning: str | None = None,
    reasoning_key: str = "reasoning_content",
    finish_reason: str = "stop",
    delay: float = 0.0,
) -> Step:
    """An assistant text reply. ``usage`` is ``(prompt, completion)`` or ``(prompt, completion,
    cached)``; ``None`` leaves the usage block out (servers that do not report it)."""
    return Step(
        "message",
        content=content,
        usage=usage,
        reasoning=reasoning,
        reasoning_key=reasoning_key,
        finish_reason=finish_reason,
        delay=delay,
    )


def tool_call(
    name: str,
    arguments: Mapping[str, Any],
    *,
    call_id: str | None = None,
    content: str | None = None,
    args_as_object: bool = False,
    usage: tuple[int, ...] | None = (10, 5),
    delay: float = 0.0,
) -> Step:
    """An assistant reply with one tool call (add more with :meth:`Step` ``tool_calls``)."""
    return Step(
        "message",
        content=content,
        tool_calls=((call_id or f"call_{name}", name, dict(arguments)),),
        args_as_object=args_as_object,
        finish_reason="tool_calls",
        usage=usage,
        delay=delay,
    )


def error(
    status: int, message: str = "scripted error", *, retry_after: float | str | None = None, delay: float = 0.0
) -> Step:
    """An HTTP error with an OpenAI-style error body; ``retry_after`` sets ``Retry-After``."""
    headers = () if retry_after is None else (("Retry-After", str(retry_after)),)
    body = json.dumps({"error": {"message": message, "type": "scripted", "code": status}}).encode()
    return Step("error", status=status, headers=headers, body=body, delay=delay)


def malformed(body: bytes = b"<html>502 bad gateway</html>", *, status: int = 200, delay: float = 0.0) -> Step:
    """A response whose body is not what the protocol promises (status 200 by default)."""
    return Step("malformed", status=status, body=body, delay=delay)


def reflected(template: str, *, chunk_size: int | None = None, usage: tuple[int, ...] | None = (10, 5)) -> Step:
    """A text reply that echoes the request's credential where ``template`` says ``{auth}``."""
    return Step("message", content=template, usage=usage, finish_reason="stop", reflect=True, chunk_size=chunk_size)


def drop(*, delay: float = 0.0) -> Step:
    """Close the connection without answering (a connection error for the client)."""
    return Step("drop", delay=delay)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it was not JSON
    received_at: float = field(default_factory=time.time)


class FakeModelServer:
    """A scripted model server on ``127.0.0.1:0``; a context manager (start/stop).

    ``script`` is consumed in order, one step per request, across all three endpoints; with
    ``per_path=True`` it is a mapping ``{"/v1/messages": [...], ...}`` consumed per path instead.
    """

    def __init__(
        self,
        script: Iterable[Step] | Mapping[str, Iterable[Step]] = (),
        *,
        default: Step | None = text("ok"),
        host: str = "127.0.0.1",
    ) -> None:
        if isinstance(script, Mapping):
            self._queues: dict[str | None, list[Step]] = {p: list(s) for p, s in script.items()}
        else:
            self._queues = {None: list(script)}
        self.default = default
        self.host = host
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeModelServer:
        server = _QuietServer((self.host, 0), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        # A short poll interval: serve_forever's default 0.5 s makes every shutdown cost 0.5 s.
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- addresses ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None, "start the server first"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (the Anthropic base URL form)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1`` (the OpenAI base URL form)."""
        return f"{self.url}/v1"

    # ---- script --------------------------------------------------------------------------------
    def push(self, *steps: Step, path: str | None = None) -> None:
        """Append steps to the script (to the queue of ``path`` when scripted per path)."""
        with self._lock:
            self._queues.setdefault(path, []).extend(steps)

    def _next(self, path: str) -> Step | None:
        with self._lock:
            queue = self._queues.get(path) if path in self._queues else self._queues.get(None)
            if queue:
                return queue.pop(0)
            return self.default

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)


class _QuietServer(ThreadingHTTPServer):
    # A deep accept queue: with the default 5, bursts of concurrent clients lose SYNs and wait
    # for the 1 s retransmit (a benchmark artefact, not server latency).
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (a timeout test) is expected, not a server bug worth a traceback.
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


# ---- rendering --------------------------------------------------------------------------------

_PROTOCOL_PATHS = {
    "/v1/chat/completions": "openai-chat",
    "/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
    "/responses": "openai-responses",
    "/v1/messages": "anthropic",
    "/messages": "anthropic",
}


def _usage(step: Step, protocol: str) -> dict[str, Any] | None:
    if step.usage is None:
        return None
    prompt, completion = step.usage[0], step.usage[1]
    cached = step.usage[2] if len(step.usage) > 2 else 0
    if protocol == "anthropic":
        return {
            "input_tokens": prompt - cached,
            "output_tokens": completion,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        }
    if protocol == "openai-responses":
        return {
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": cached},
        }
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def render(step: Step, protocol: str, model: str) -> dict[str, Any]:
    """The JSON body of a ``message`` step in ``protocol``'s response shape."""
    usage = _usage(step, protocol)
    if protocol == "anthropic":
        blocks: list[dict[str, Any]] = []
        if step.reasoning:
            blocks.append({"type": "thinking", "thinking": step.reasoning, "signature": "fake"})
        if step.content is not None:
            blocks.append({"type": "text", "text": step.content})
        for cid, name, args in step.tool_calls:
            blocks.append({"type": "tool_use", "id": cid, "name": name, "input": args})
        stop = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}.get(
            step.finish_reason or "stop", step.finish_reason or "end_turn"
        )
        out: dict[str, Any] = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
        }
    elif protocol == "openai-responses":
        items: list[dict[str, Any]] = []
        if step.reasoning:
            items.append(
                {"type": "reasoning", "id": "rs_fake", "summary": [{"type": "summary_text", "text": step.reasoning}]}
            )
        if step.content is not None:
            items.append(
                {
                    "type": "message",
                    "id": "msg_fake",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": step.content, "annotations": []}],
                }
            )
        for cid, name, args in step.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{cid}",
                    "call_id": cid,
                    "name": name,
                    "arguments": args if step.args_as_object else json.dumps(args),
                }
            )
        status = "incomplete" if step.finish_reason == "length" else "completed"
        out = {"id": "resp_fake", "object": "response", "model": model, "status": status, "output": items}
    else:
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        if step.reasoning:
            message[step.reasoning_key] = step.reasoning
        if step.tool_calls:
            message["tool_calls"] = [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": args if step.args_as_object else json.dumps(args)},
                }
                for cid, name, args in step.tool_calls
            ]
        out = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": step.finish_reason or "stop"}],
        }
    if usage is not None:
        out["usage"] = usage
    return out


def _sse(events: list[dict[str, Any]], *, named: bool = False, done: bool = False) -> bytes:
    out = []
    for e in events:
        head = f"event: {e['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(e)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def _halves(text: str) -> list[str]:
    """Text in two deltas, so clients must join the pieces."""
    cut = len(text) // 2
    return [p for p in (text[:cut], text[cut:]) if p]


def _responses_events(full: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses answer as the event sequence OpenAI streams (what the Codex CLI and the OpenAI
    SDKs assemble): ``response.created``/``in_progress``; per output item ``output_item.added``,
    its parts (``content_part.added``, ``output_text.delta`` x2, ``output_text.done``,
    ``content_part.done`` for a message; ``function_call_arguments.delta`` x2 and ``.done`` for a
    function call; ``reasoning_summary_text.delta``/``.done`` for reasoning), ``output_item.done``;
    then ``response.completed`` (or ``response.incomplete``) with the whole response and usage.
    Every event has a ``sequence_number``."""
    events: list[dict[str, Any]] = []
    pending = {**full, "status": "in_progress", "output": []}
    pending.pop("usage", None)
    events.append({"type": "response.created", "response": pending})
    events.append({"type": "response.in_progress", "response": pending})
    for index, item in enumerate(full["output"]):
        iid = item.get("id", f"item_{index}")
        at: dict[str, Any] = {"item_id": iid, "output_index": index}
        if item["type"] == "message":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            for ci, part in enumerate(item["content"]):
                text_ = part.get("text", "")
                events.append(
                    {"type": "response.content_part.added", **at, "content_index": ci, "part": {**part, "text": ""}}
                )
                for piece in _halves(text_):
                    events.append({"type": "response.output_text.delta", **at, "content_index": ci, "delta": piece})
                events.append({"type": "response.output_text.done", **at, "content_index": ci, "text": text_})
                events.append({"type": "response.content_part.done", **at, "content_index": ci, "part": part})
        elif item["type"] == "function_call":
            args = item["arguments"] if isinstance(item["arguments"], str) else json.dumps(item["arguments"])
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            for piece in _halves(args):
                events.append({"type": "response.function_call_arguments.delta", **at, "delta": piece})
            events.append({"type": "response.function_call_arguments.done", **at, "arguments": args})
            item = {**item, "status": "completed"}
        else:  # reasoning
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, "summary": []}}
            )
            for si, part in enumerate(item.get("summary") or []):
                summary = part.get("text", "")
                events.append(
                    {"type": "response.reasoning_summary_text.delta", **at, "summary_index": si, "delta": summary}
                )
                events.append(
                    {"type": "response.reasoning_summary_text.done", **at, "summary_index": si, "text": summary}
                )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = "response.incomplete" if full.get("status") == "incomplete" else "response.completed"
    events.append({"type": final, "response": full})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def render_stream(step: Step, protocol: str, model: str, request: dict[str, Any]) -> bytes:
    """A ``message`` step as the protocol's server-sent events (what ``stream: true`` gets)."""
    full = render(step, protocol, model)
    if protocol == "openai-responses":
        return _sse(_responses_events(full), named=True)
    if protocol == "anthropic":
        usage = full.get("usage") or {}
        start = {k: v for k, v in full.items() if k not in ("content", "stop_reason")}
        start["usage"] = {k: v for k, v in usage.items() if k != "output_tokens"}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": {**start, "content": []}}]
        for i, block in enumerate(full["content"]):
            if block["type"] == "text":
                events.append(
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
                )
                for piece in _halves(block["text"]):
                    events.append(
                        {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece}}
                    )
            elif block["type"] == "tool_use":
                opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                events.append({"type": "content_block_start", "index": i, "content_block": opening})
                for piece in _halves(json.dumps(block["input"])):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    events.append({"type": "content_block_delta", "index": i, "delta": delta})
            else:
                events.append(
                    {"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}}
                )
                delta = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
            events.append({"type": "content_block_stop", "index": i})
        tail = {"type": "message_delta", "delta": {"stop_reason": full["stop_reason"]}}
        if usage:
            tail["usage"] = {"output_tokens": usage.get("output_tokens", 0)}
        events += [tail, {"type": "message_stop"}]
        return _sse(events, named=True)
    message = full["choices"][0]["message"]
    chunks: list[dict[str, Any]] = []

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model, "choices": [choice]}

    chunks.append(chunk({"role": "assistant"}))
    if step.reasoning:
        chunks.append(chunk({step.reasoning_key: step.reasoning}))
    for piece in _halves(message.get("content") or ""):
        chunks.append(chunk({"content": piece}))
    for i, tc in enumerate(message.get("tool_calls") or []):
        args = tc["function"]["arguments"]
        args = args if isinstance(args, str) else json.dumps(args)
        first, *rest = _halves(args) or [""]
        opening = {
            "index": i,
            "id": tc["id"],
            "type": "function",
            "function": {"name": tc["function"]["name"], "arguments": first},
        }
        chunks.append(chunk({"tool_calls": [opening]}))
        for piece in rest:
            chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, full["choices"][0]["finish_reason"]))
    options = request.get("stream_options") or {}
    if full.get("usage") and isinstance(options, dict) and options.get("include_usage"):
        chunks.append(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [],
                "usage": full["usage"],
            }
        )
    return _sse(chunks, done=True)


def _make_handler(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like real model servers

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read .requests
            return

        def do_GET(self) -> None:
            self._reply(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except (ValueError, UnicodeDecodeError):
                body = raw.decode("utf-8", "replace")
            path = self.path.split("?", 1)[0]
            server._record(RecordedRequest("POST", path, {k.lower(): v for k, v in self.headers.items()}, body))
            step = server._next(path)
            if step is None:
                self._reply(500, {"error": {"message": f"fake server: script exhausted at {path}"}})
                return
            if step.delay:
                time.sleep(step.delay)
            if step.kind == "drop":
                self.close_connection = True
                self.wfile.flush()
                self.connection.close()
                return
            if step.kind in ("error", "malformed"):
                self._send(step.status, step.body or b"", dict(step.headers), "application/json")
                return
            protocol = _PROTOCOL_PATHS.get(path)
            if protocol is None:
                self._reply(404, {"error": {"message": f"fake server: no endpoint {path}"}})
                return
            if step.reflect:
                auth = self.headers.get("Authorization") or ""
                credential = auth.split(" ", 1)[1] if " " in auth else self.headers.get("x-api-key") or ""
                step = dataclasses.replace(step, content=(step.content or "").replace("{auth}", credential))
            model = body.get("model", "fake-model") if isinstance(body, dict) else "fake-model"
            if isinstance(body, dict) and body.get("stream"):
                data = render_stream(step, protocol, str(model), body)
                self._send(200, data, dict(step.headers), "text/event-stream", step.chunk_size, step.cut_after)
                return
            data = json.dumps(render(step, protocol, str(model))).encode()
            self._send(200, data, dict(step.headers), "application/json", step.chunk_size)

        def _reply(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(obj).encode(), headers or {}, "application/json")

        def setup(self) -> None:
            super().setup()
            # Small replies, written at once: no Nagle/delayed-ACK stalls between header and body.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _send(
            self,
            status: int,
            data: bytes,
            headers: dict[str, str],
            ctype: str,
            chunk_size: int | None = None,
            cut_after: int | None = None,
        ) -> None:
            reason = self.responses.get(status, ("",))[0]
            lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}", f"Content-Length: {len(data)}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            if cut_after is not None:
                self.wfile.write(head + data[:cut_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if not chunk_size:
                self.wfile.write(head + data)
                return
            self.wfile.write(head)
            for i in range(0, len(data), chunk_size):
                self.wfile.write(data[i : i + chunk_size])
                self.wfile.flush()
                time.sleep(0.002)  # separate TCP segments: the client reads them apart

    return Handler
