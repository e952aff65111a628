"""The gateway's HTTP/1.1 server on trio sockets (acx's own, no third-party HTTP library).

Each request is parsed here and handed to an async handler; keep-alive, ``Content-Length`` and
chunked request bodies, ``Expect: 100-continue``, responses with ``Content-Length`` or streamed
(chunked server-sent events). The parser is strict where leniency lets one request be read two
ways (request smuggling: both ``Content-Length`` and ``Transfer-Encoding``, differing lengths,
folded or space-before-colon headers) and bounded everywhere: hostile or broken input gets a 4xx
(400 malformed, 413 body too large, 431 head too large, 501 unknown transfer coding, 505 version)
and the connection is closed — never a crash, never unbounded memory or time.
"""

from __future__ import annotations

import math
import re
import select
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from http import HTTPStatus
from typing import Any

import trio

__all__ = ["Handler", "Reply", "serve_http"]

#: (status, body, extra headers); a body that is an async iterator of bytes is streamed (chunked,
#: ``text/event-stream``) as it is produced.
Reply = tuple[int, Any, list[tuple[str, str]]]
#: handler(method, target, headers (lower-case names), body) -> Reply
Handler = Callable[[str, str, dict[str, str], bytes], Awaitable[Reply]]

MAX_BODY = 64 * 1024 * 1024
#: The request line and headers together (and a chunked body's trailers).
MAX_HEAD = 64 * 1024
MAX_HEADERS = 128
#: A chunk-size line (hex digits and extensions).
MAX_CHUNK_LINE = 1024
#: Longest silence while waiting for (the rest of) a request.
IDLE_TIMEOUT = 600.0
_RECV = 65536
#: How often the connections whose requests are being handled are checked for a client gone.
WATCH_INTERVAL = 0.5

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Field values: visible ASCII, obs-text, space and tab (no CR, LF, NUL or other controls).
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
#: The request-target: visible ASCII only (RFC 9112 3.2; h11 refuses the rest, and a proxy might
#: re-encode it differently).
_TARGET = re.compile(rb"[\x21-\x7e]+")


class _Reject(Exception):
    """The request cannot be served: answer ``status`` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Request:
    __slots__ = ("body", "headers", "keep_alive", "method", "target", "version")

    def __init__(self, method: str, target: str, version: str, headers: dict[str, str]) -> None:
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.body = b""
        self.keep_alive = True


async def serve_http(
    handler: Handler, host: str, port: int = 0, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Listen on ``host:port`` (0 = a free port) and serve until cancelled; reports the port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    task_status.started(bound)
    watch = _ClientWatch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        await trio.serve_listeners(partial(serve_connection, handler, watch=watch), listeners)


class _ClientWatch:
    """Requests being handled, by their connection's descriptor, checked together every
    ``WATCH_INTERVAL``: a client that closed its side or reset the connection has its request's
    handler cancelled — its model call frees the endpoint's connection slot instead of waiting
    for an upstream that may never answer (issue 24 item 1). One ``poll`` for all of them from one
    task: a watcher task per request cost more than half the gateway's CPU per call."""

    def __init__(self) -> None:
        self.active: dict[int, trio.CancelScope] = {}

    async def run(self) -> None:
        while True:
            await trio.sleep(WATCH_INTERVAL)
            if self.active:
                self.sweep()

    def sweep(self) -> None:
        poller = select.poll()
        for fd in self.active:
            poller.register(fd, select.POLLRDHUP)  # POLLHUP, POLLERR and POLLNVAL come anyway
        try:
            ready = poller.poll(0)
        except OSError:
            return
        for fd, _events in ready:  # any of them: the client's side is closed or broken
            scope = self.active.get(fd)
            if scope is not None:
                scope.cancel()


class _Reader:
    """Bytes received on a connection and not consumed yet. ``idle`` is the connection's cancel
    scope: its deadline is set while waiting for the client (and lifted while a request is
    handled) — one scope per connection, not one per read."""

    __slots__ = ("buf", "idle", "in_request", "stream")

    def __init__(self, stream: trio.abc.Stream, idle: trio.CancelScope) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.idle = idle
        #: A request has begun arriving and is not complete yet.
        self.in_request = False

    async def fill(self) -> bool:
        """More bytes into ``buf``; False when the peer closed. Silence longer than
        ``IDLE_TIMEOUT`` cancels the connection's scope."""
        self.idle.deadline = trio.current_time() + IDLE_TIMEOUT
        data = await self.stream.receive_some(_RECV)
        self.idle.deadline = math.inf
        if data:
            self.buf += data
            return True
        return False

    async def head(self) -> bytes | None:
        """The next request head (without its blank line); None when the client is gone first."""
        buf = self.buf
        start = 0
        while True:
            # Empty lines before a request line are allowed (RFC 9112 §2.2).
            while buf[:2] == b"\r\n":
                del buf[:2]
            end = buf.find(b"\r\n\r\n", start)
            if end > MAX_HEAD or (end < 0 and len(buf) > MAX_HEAD):
                raise _Reject(431, "the request head is too large")
            if end >= 0:
                head = bytes(buf[:end])
                del buf[: end + 4]
                return head
            start = max(0, len(buf) - 3)
            self.in_request = bool(buf)
            if not await self.fill():
                if buf:
                    raise _Reject(400, "the request head is incomplete")
                return None

    async def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not await self.fill():
                raise _Reject(400, "the request body is incomplete")
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    async def line(self, limit: int) -> bytes:
        start = 0
        while True:
            end = self.buf.find(b"\r\n", start)
            if end > limit or (end < 0 and len(self.buf) > limit):
                raise _Reject(400, "a chunk-size or trailer line is too long")
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[: end + 2]
                return line
            start = max(0, len(self.buf) - 1)
            if not await self.fill():
                raise _Reject(400, "the chunked request body is incomplete")


def parse_head(head: bytes) -> _Request:
    """The request line and headers (pure; raises :class:`_Reject`)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise _Reject(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method) or not _TARGET.fullmatch(target):
        raise _Reject(400, "malformed request line")
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        if version.startswith(b"HTTP/") and re.fullmatch(rb"HTTP/\d\.\d", version):
            raise _Reject(505, "only HTTP/1.1 and HTTP/1.0 are served")
        raise _Reject(400, "malformed request line")
    if len(lines) - 1 > MAX_HEADERS:
        raise _Reject(431, f"more than {MAX_HEADERS} request headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            # Also folded lines (leading space) and a space before the colon: refused, as both
            # let two parsers disagree on what the headers are.
            raise _Reject(400, "malformed request header line")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise _Reject(400, "a request header value holds a control character")
        key = name.decode("ascii").lower()
        text = value.decode("latin-1")
        if key in headers:
            if key in ("content-length", "host"):
                if key == "host" or headers[key] != text:
                    raise _Reject(400, f"conflicting {key} headers")
                continue
            text = f"{headers[key]}, {text}"
        headers[key] = text
    req = _Request(method.decode("ascii"), target.decode("latin-1"), version.decode("ascii"), headers)
    if req.version == "HTTP/1.1" and "host" not in headers:
        raise _Reject(400, "an HTTP/1.1 request must have a Host header")
    conn = headers.get("connection", "").lower()
    req.keep_alive = req.version == "HTTP/1.1" and "close" not in conn
    return req


def _framing(req: _Request) -> tuple[bool, int]:
    """(chunked, content length) of the request body."""
    te = req.headers.get("transfer-encoding")
    cl = req.headers.get("content-length")
    if te is not None:
        if cl is not None:
            raise _Reject(400, "both Content-Length and Transfer-Encoding")
        if te.strip(" \t").lower() != "chunked":
            raise _Reject(501, "only the chunked transfer coding is supported")
        if req.version != "HTTP/1.1":
            raise _Reject(400, "Transfer-Encoding in an HTTP/1.0 request")
        return True, 0
    if cl is None:
        return False, 0
    cl = cl.strip(" \t")  # SP and HTAB only (str.strip() also takes NEL and NBSP)
    if not cl.isdigit() or not cl.isascii() or len(cl) > 19:
        raise _Reject(400, "invalid Content-Length")
    length = int(cl)
    if length > MAX_BODY:
        raise _Reject(413, f"the request body is larger than {MAX_BODY} bytes")
    return False, length


async def _body(reader: _Reader, req: _Request, stream: trio.abc.Stream) -> bytes:
    chunked, length = _framing(req)
    if (chunked or length) and req.headers.get("expect", "").lower() == "100-continue":
        await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
    if not chunked:
        return await reader.exactly(length) if length else b""
    body = bytearray()
    while True:
        size_text = (await reader.line(MAX_CHUNK_LINE)).split(b";", 1)[0].rstrip(b" \t")
        if not size_text or len(size_text) > 16 or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
            raise _Reject(400, "invalid chunk size")
        size = int(size_text, 16)
        if size == 0:
            break
        if len(body) + size > MAX_BODY:
            raise _Reject(413, f"the request body is larger than {MAX_BODY} bytes")
        body += await reader.exactly(size)
        if await reader.exactly(2) != b"\r\n":
            raise _Reject(400, "a chunk does not end with CRLF")
    trailers = 0
    while await reader.line(MAX_HEAD):  # trailers: read (bounded) and dropped
        trailers += 1
        if trailers > MAX_HEADERS:
            raise _Reject(431, "too many trailer lines")
    return bytes(body)


_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}


def _status_line(status: int) -> str:
    return _STATUS_LINES.get(status) or f"HTTP/1.1 {status} Status\r\n"


def _head(status: int, headers: list[tuple[str, str]], defaults: list[tuple[str, str]], close: bool) -> bytes:
    given = {k.lower() for k, _ in headers}
    lines = [_status_line(status)]
    lines += [f"{k}: {v}\r\n" for k, v in defaults if k not in given]
    lines += [f"{k}: {v}\r\n" for k, v in headers]
    if close:
        lines.append("connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


async def _send(stream: trio.abc.Stream, reply: Reply, req: _Request | None, close: bool) -> None:
    status, body, headers = reply
    if not isinstance(body, bytes):
        await _send_stream(stream, status, body, headers, req, close)
        return
    defaults = [("content-type", "application/json"), ("content-length", str(len(body)))]
    head = _head(status, [h for h in headers if h[0].lower() != "content-length"], defaults, close)
    await stream.send_all(head + body if req is None or req.method != "HEAD" else head)


async def _send_stream(
    stream: trio.abc.Stream,
    status: int,
    body: AsyncIterator[bytes],
    headers: list[tuple[str, str]],
    req: _Request | None,
    close: bool,
) -> None:
    chunked = req is not None and req.version == "HTTP/1.1"
    defaults = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
    if chunked:
        defaults.append(("transfer-encoding", "chunked"))
    # An HTTP/1.0 client reads the stream until the connection closes.
    await stream.send_all(_head(status, headers, defaults, close or not chunked))
    try:
        async for chunk in body:
            if chunk:
                await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        if chunked:
            await stream.send_all(b"0\r\n\r\n")
    finally:
        closer = getattr(body, "aclose", None)
        if closer is not None:  # a client that hung up: the producer's clean-up runs now
            with trio.CancelScope(shield=True):
                await closer()


def _error(status: int, message: str) -> Reply:
    import json

    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return status, json.dumps(body).encode(), []


async def serve_connection(handler: Handler, stream: trio.abc.Stream, *, watch: _ClientWatch | None = None) -> None:
    """Serve requests on one connection until either side closes it. With ``watch`` (a socket
    stream), the end of the client's side while a request is handled means the client is gone (as
    Go's net/http and uvicorn take it): the handler is cancelled and the connection closed;
    without, a client may half-close after its requests and still read the replies."""
    fd = stream.socket.fileno() if watch is not None and isinstance(stream, trio.SocketStream) else -1
    try:
        with trio.CancelScope() as idle:
            reader = _Reader(stream, idle)
            await _serve_requests(handler, stream, reader, watch if fd >= 0 else None, fd)
        if idle.cancelled_caught and reader.in_request:
            # Silent in the middle of a request: say so (the client may still be reading).
            with trio.move_on_after(5):
                await _send(stream, _error(400, "acx gateway: the request did not arrive in time"), None, close=True)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)


async def _serve_requests(
    handler: Handler, stream: trio.abc.Stream, reader: _Reader, watch: _ClientWatch | None, fd: int
) -> None:
    while True:
        req: _Request | None = None
        try:
            head = await reader.head()
            if head is None:
                return
            reader.in_request = True
            req = parse_head(head)
            body = await _body(reader, req, stream)
            reader.in_request = False
        except _Reject as exc:
            # The rest of the stream cannot be trusted to start a request: answer and close.
            await _send(stream, _error(exc.status, f"acx gateway: {exc.message}"), req, close=True)
            return
        if watch is None:
            await _send(stream, await _handled(handler, req, body), req, close=not req.keep_alive)
        else:
            with trio.CancelScope() as work:
                watch.active[fd] = work
                try:
                    await _send(stream, await _handled(handler, req, body), req, close=not req.keep_alive)
                finally:
                    del watch.active[fd]
            if work.cancelled_caught:
                return  # the client is gone
        if not req.keep_alive:
            return


async def _handled(handler: Handler, req: _Request, body: bytes) -> Reply:
    try:
        return await handler(req.method, req.target, req.headers, body)
    except Exception as exc:  # a handler bug fails its request, not the whole server
        req.keep_alive = False
        return _error(500, f"acx gateway: internal error ({type(exc).__name__})")
