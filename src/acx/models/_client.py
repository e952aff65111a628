"""The model client: the only module of acx that speaks HTTP as a client.

A lean HTTP/1.1 client on trio streams (no third-party HTTP library: httpx + httpcore + h11 cost
about four times the CPU of a plain request per call, see docs/models.md "The HTTP edge"):

- a keep-alive connection pool per origin, capped by the endpoint's ``max_connections``; an idle
  connection the server has closed is noticed before the request is sent and replaced (a request
  whose sending failed on a reused connection is sent once more on a new one; a request that was
  sent is never repeated here — the retry layer decides);
- requests with ``Content-Length``; responses framed by ``Content-Length``, chunked transfer
  encoding or the end of the connection; ``gzip``/``deflate`` bodies decoded;
- TLS with the stdlib's default context (system CA store, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``),
  SNI and host name verification;
- ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``/``NO_PROXY`` from the environment: an ``http://``
  proxy (absolute-form requests for http endpoints, a ``CONNECT`` tunnel for https ones); other
  proxy schemes are refused with a clear error, never ignored;
- explicit timeouts: connect (TCP, proxy tunnel and TLS handshake), read (the longest silence
  while sending or waiting for the answer) and a total deadline per call (a trio cancel scope
  around the attempts and their waits).

Retries follow :class:`acx.models.RetryPolicy` — this is the only retry layer for model calls in
acx.
"""

from __future__ import annotations

import base64
import inspect
import math
import os
import random
import re
import select
import ssl
import time
import urllib.request
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies_environment

import msgspec
import trio

from acx import __version__
from acx.models._keep import OFF_THREAD_BYTES
from acx.models._protocols import build_call, parse_response
from acx.models._retry import RetryPolicy, classify_status, parse_retry_after
from acx.models._types import ChatRequest, Endpoint, ErrorKind, ModelCallError, ModelResponse

__all__ = ["AttemptRecord", "Exchange", "ModelClient", "Transport", "chunks"]

# Not in typeshed, but public in every CPython 3 (urllib.request's NO_PROXY matcher).
proxy_bypass_environment: Callable[..., bool] = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]

T = TypeVar("T")

#: A stand-in for the network in unit tests: ``(method, url, headers, body) -> (status, headers,
#: body)`` (or an awaitable of it); raising ``OSError`` is a connection failure.
Transport = Callable[[str, str, dict[str, str], bytes], Any]

#: Bounds on what a server may send (a model answer is far smaller; memory stays bounded).
MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
MAX_LINE = 8 * 1024
#: An idle connection older than this is closed rather than reused (httpx's default too): many
#: servers drop idle connections after a few seconds, and a reuse racing that drop loses a request.
KEEPALIVE_EXPIRY = 5.0
_RECV = 65536
_USER_AGENT = f"acx/{__version__}"


@dataclass
class AttemptRecord:
    """One HTTP attempt of a call (for transcripts): when, how long, what came back."""

    started_at: float
    duration_ms: float
    status: int | None
    error: str | None = None
    #: Seconds waited after this attempt before the next one.
    wait_seconds: float = 0.0


@dataclass
class Exchange:
    """A finished call: status, body and headers of the last attempt plus every attempt."""

    status: int
    body: bytes
    headers: dict[str, str]
    attempts: list[AttemptRecord] = field(default_factory=list)
    parsed: Any = None
    #: A streamed answer not read yet (``exchange(stream=True)``): read it with
    #: :meth:`ModelClient.chunks`, which also closes it.
    response: Any = None
    #: Why a streamed answer ended before its end (set by :func:`chunks`): the body limit, the
    #: upstream closing the connection, a read timeout. ``None``: it ended normally.
    stream_error: str | None = None


# ---- transport errors ----------------------------------------------------------------------------


class _TransportError(Exception):
    """A failure below HTTP semantics. ``phase``: ``connect`` (no connection was made), ``send``
    (the request was not fully sent), ``read`` (sent, no complete answer). ``timeout``: it was a
    timeout rather than a broken or refused connection."""

    def __init__(self, phase: str, reason: str, *, timeout: bool = False) -> None:
        super().__init__(reason)
        self.phase = phase
        self.reason = reason
        self.timeout = timeout


class _Refused(Exception):
    """A request acx will not make (configuration error): never retried."""


# ---- connections ---------------------------------------------------------------------------------


class _TotalTimeout(Exception):
    """The call's total deadline passed."""


class _Timer:
    """The timeouts of one request — waiting for a connection slot, sending, each read, and the
    call's total deadline — as a single cancel scope whose deadline moves at each wait: a scope
    per wait (or per call) cost more than the rest of a gateway call's Python work."""

    __slots__ = ("phase", "scope", "timeout", "total_at")

    def __init__(self, total_at: float) -> None:
        self.scope = trio.CancelScope(deadline=total_at)
        self.total_at = total_at
        self.phase = "pool"
        self.timeout = math.inf

    def arm(self, phase: str, timeout: float) -> None:
        """The next wait: ``phase`` for at most ``timeout`` seconds (and never past the total)."""
        self.phase, self.timeout = phase, timeout
        self.scope.deadline = min(trio.current_time() + timeout, self.total_at)

    def expired(self) -> Exception:
        """What the scope's deadline meant, once it has cancelled the request."""
        if trio.current_time() >= self.total_at:
            return _TotalTimeout()
        return self.error()

    def error(self) -> _TransportError:
        if self.phase == "send":
            return _TransportError("send", f"took in nothing of the request for {self.timeout:g} s", timeout=True)
        return _TransportError("read", f"sent nothing for {self.timeout:g} s", timeout=True)


class _Conn:
    """One HTTP/1.1 connection and the bytes received but not consumed yet. ``timer``: the
    current request's (None: each wait gets its own timeout scope, as for a streamed body)."""

    __slots__ = ("buf", "fd", "idle_since", "stream", "timer")

    def __init__(self, stream: trio.abc.Stream, fd: int) -> None:
        self.stream = stream
        self.fd = fd
        self.buf = bytearray()
        self.idle_since = 0.0
        self.timer: _Timer | None = None

    async def send(self, data: bytes, timeout: float) -> None:
        timer = self.timer
        try:
            if timer is not None:
                timer.arm("send", timeout)
                await self.stream.send_all(data)
            else:
                with trio.fail_after(timeout):
                    await self.stream.send_all(data)
        except trio.TooSlowError:
            raise _TransportError("send", f"took in nothing of the request for {timeout:g} s", timeout=True) from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise _TransportError("send", f"the connection broke while sending ({_cause(exc)})") from None

    async def fill(self, timeout: float) -> bool:
        """Receive more bytes into ``buf``; False at the end of the stream."""
        timer = self.timer
        try:
            if timer is not None:
                timer.arm("read", timeout)
                data = await self.stream.receive_some(_RECV)
            else:
                with trio.fail_after(timeout):
                    data = await self.stream.receive_some(_RECV)
        except trio.TooSlowError:
            raise _TransportError("read", f"sent nothing for {timeout:g} s", timeout=True) from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise _TransportError("read", f"the connection broke ({_cause(exc)})") from None
        if not data:
            return False
        self.buf += data
        return True

    def stale(self, now: float) -> bool:
        """Idle too long, or readable while idle (the server closed it, or sent something
        unasked): either way not fit for the next request."""
        if now - self.idle_since > KEEPALIVE_EXPIRY or self.buf:
            return True
        poller = select.poll()  # not select.select: descriptors above 1023 are common in a run
        poller.register(self.fd, select.POLLIN | select.POLLPRI)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True

    def close(self) -> None:
        # Forceful (no TLS close_notify, no await): a clean close may wait on a peer that is gone,
        # and this runs in cancelled contexts too.
        stream = self.stream
        if isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        if isinstance(stream, trio.SocketStream):
            stream.socket.close()


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__ or exc
    text = str(inner) or type(inner).__name__
    return text[:200]


@dataclass(frozen=True)
class _Route:
    """Where the bytes of a request go: the origin and, if any, the http proxy in front of it."""

    scheme: str
    host: str
    port: int
    proxy: tuple[str, int, str | None] | None = None  # (host, port, Proxy-Authorization value)

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


class _Waiter:
    __slots__ = ("event", "granted", "owner")

    def __init__(self, owner: str | None) -> None:
        self.owner = owner
        self.event = trio.Event()
        self.granted = False


class _FairSlots:
    """The ``limit`` request slots of one endpoint, shared fairly by the sessions (owners) of the
    run (issue 24 item 1; contract M2):

    - an owner that holds no slot takes a free one at once;
    - an owner that holds some takes one more only while a free slot is left for every other open
      owner that holds none — one attempt's parallel or hanging calls can never leave another
      attempt without a slot;
    - a freed slot goes to the waiting owner that holds the fewest (first come among equals), so
      while others wait no owner keeps more than its fair share for longer than its calls last.

    ``owners`` is the client's set of open owners (shared by its pools); ``None`` is an owner of
    its own that is never reserved for (calls made outside any session)."""

    def __init__(self, limit: int, owners: set[str]) -> None:
        self.free = limit
        self.owners = owners
        self.held: dict[str | None, int] = {}
        self.waiters: list[_Waiter] = []

    def _may_take(self, owner: str | None) -> bool:
        if self.free <= 0:
            return False
        if not self.held.get(owner):
            return True
        holding = sum(1 for o in self.held if o in self.owners and o != owner)
        empty_others = len(self.owners) - holding - (owner in self.owners)
        return self.free - 1 >= empty_others

    def _take(self, owner: str | None) -> None:
        self.free -= 1
        self.held[owner] = self.held.get(owner, 0) + 1

    async def acquire(self, owner: str | None) -> None:
        if not self.waiters and self._may_take(owner):
            await trio.lowlevel.checkpoint_if_cancelled()
            self._take(owner)
            return
        waiter = _Waiter(owner)
        self.waiters.append(waiter)
        self.wake()  # a free slot this owner may not take could still go to one that waits
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release(owner)
            else:
                self.waiters.remove(waiter)
                self.wake()
            raise

    def release(self, owner: str | None) -> None:
        left = self.held[owner] - 1
        if left:
            self.held[owner] = left
        else:
            del self.held[owner]
        self.free += 1
        self.wake()

    def wake(self) -> None:
        """Hand free slots to waiters: the owner holding fewest first, first come among equals."""
        while self.free > 0 and self.waiters:
            best: _Waiter | None = None
            for w in self.waiters:
                if self._may_take(w.owner) and (
                    best is None or self.held.get(w.owner, 0) < self.held.get(best.owner, 0)
                ):
                    best = w
            if best is None:
                return
            self.waiters.remove(best)
            self._take(best.owner)
            best.granted = True
            best.event.set()


class _Pool:
    """Keep-alive connections to one route; at most ``limit`` open (idle + in use)."""

    def __init__(self, route: _Route, limit: int, tls: Callable[[], ssl.SSLContext], owners: set[str]) -> None:
        self.route = route
        self.slots = _FairSlots(limit, owners)
        self.idle: list[_Conn] = []
        self._tls = tls

    def take_idle(self) -> _Conn | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()  # the most recently used: the least likely to be dropped
            if not conn.stale(now):
                return conn
            conn.close()
        return None

    def give_back(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()

    async def connect(self, timeout: float) -> _Conn:
        r = self.route
        host, port = (r.proxy[0], r.proxy[1]) if r.proxy else (r.host, r.port)
        try:
            with trio.fail_after(timeout):
                sock = await trio.open_tcp_stream(host, port)
                try:
                    return await self._establish(sock, timeout)
                except BaseException:
                    sock.socket.close()
                    raise
        except trio.TooSlowError:
            raise _TransportError("connect", f"could not connect within {timeout:g} s", timeout=True) from None
        except (OSError, trio.BrokenResourceError) as exc:
            where = f"the proxy {host}:{port}" if r.proxy else "it"
            raise _TransportError("connect", f"could not connect to {where} ({_cause(exc)})") from None

    async def _establish(self, sock: trio.SocketStream, timeout: float) -> _Conn:
        conn = _Conn(sock, sock.socket.fileno())
        r = self.route
        if r.scheme != "https":
            return conn
        if r.proxy:
            await _tunnel(conn, r, timeout)
        tls = trio.SSLStream(sock, self._tls(), server_hostname=r.host, https_compatible=True)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLCertVerificationError):
                why = f"TLS certificate verification failed: {cause.verify_message}"
                raise _TransportError("connect", why) from None
            raise
        conn.stream = tls
        conn.buf = bytearray()
        return conn


async def _tunnel(conn: _Conn, r: _Route, timeout: float) -> None:
    """``CONNECT host:port`` through an http proxy; the TLS session then runs inside the tunnel."""
    assert r.proxy is not None
    target = f"[{r.host}]:{r.port}" if ":" in r.host else f"{r.host}:{r.port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}", f"User-Agent: {_USER_AGENT}"]
    if r.proxy[2]:
        lines.append(f"Proxy-Authorization: {r.proxy[2]}")
    await conn.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), timeout)
    status, _headers = await _read_head(conn, timeout)
    if not 200 <= status < 300:
        raise _TransportError("connect", f"the proxy {r.proxy[0]}:{r.proxy[1]} refused the tunnel (HTTP {status})")
    if conn.buf:
        raise _TransportError("connect", "the proxy sent data before the tunnel was established")


# ---- the wire: heads and bodies -------------------------------------------------------------------


async def _read_head(conn: _Conn, timeout: float) -> tuple[int, dict[str, str]]:
    """Status and headers (lower-case names; repeated names joined by ``, ``) of the next final
    response; interim 1xx responses are skipped."""
    while True:
        buf = conn.buf
        start = 0
        while True:
            end = buf.find(b"\r\n\r\n", start)
            if end > MAX_HEAD or (end < 0 and len(buf) > MAX_HEAD):
                raise _TransportError("read", f"the response head exceeds {MAX_HEAD} bytes")
            if end >= 0:
                break
            start = max(0, len(buf) - 3)
            if not await conn.fill(timeout):
                raise _TransportError("read", "the server closed the connection without answering")
            buf = conn.buf
        head = bytes(buf[:end])
        del buf[: end + 4]
        status, headers = _parse_head(head)
        if status >= 200 or status == 101:
            return status, headers


#: The status line as RFC 9112 4 writes it (HTTP/1.x only); the reason phrase without controls.
_STATUS_LINE = re.compile(rb"HTTP/1\.[0-9] ([0-9]{3})(?: [\t\x20-\x7e\x80-\xff]*)?")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
#: A header line: a token, a colon, a value without controls (obs-text allowed).
_HEADER_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):([\t\x20-\x7e\x80-\xff]*)")


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    # As strict as h11 (the parser behind httpx) or stricter, never looser: a response two parsers
    # read differently is how a relay and an agent end up disagreeing on an answer (issue 24).
    lines = head.split(b"\r\n")
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise _TransportError("read", f"not an HTTP/1.x response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    last = ""
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and last:  # obsolete line folding: part of the previous value
            if not _HEADER_LINE.fullmatch(b"x:" + line):
                raise _TransportError("read", f"malformed response header line {line[:80]!r}")
            more = line.decode("latin-1").strip(" \t")
            headers[last] = f"{headers[last]} {more}"
            continue
        match = _HEADER_LINE.fullmatch(line)
        if match is None:
            raise _TransportError("read", f"malformed response header line {line[:80]!r}")
        last = match[1].decode("ascii").lower()
        value = match[2].decode("latin-1").strip(" \t")
        headers[last] = f"{headers[last]}, {value}" if last in headers else value
    if lines[0].startswith(b"HTTP/1.0") and "keep-alive" not in headers.get("connection", "").lower():
        headers.setdefault("connection", "close")
    return int(status[1]), headers


class _Body:
    """The framing of one response body, read piece by piece from its connection."""

    def __init__(self, conn: _Conn, status: int, headers: dict[str, str], method: str, timeout: float) -> None:
        self.conn = conn
        self.timeout = timeout
        self.done = False
        self.reusable = "close" not in headers.get("connection", "").lower()
        te = headers.get("transfer-encoding", "").lower()
        cl = headers.get("content-length")
        self.chunked = False
        self.remaining: int | None = None  # None: until the connection closes
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self.remaining = 0
        elif te:
            if te.rsplit(",", 1)[-1].strip(" \t") != "chunked":
                raise _TransportError("read", f"unsupported Transfer-Encoding {te[:40]!r}")
            self.chunked = True
        elif cl is not None:
            # HTTP's whitespace is SP and HTAB only: str.strip() would also take latin-1's NEL
            # (0x85) and NBSP, and read "Content-Length:\x8512" as 12 where h11 refuses it.
            values = {v.strip(" \t") for v in cl.split(",")}
            # isdigit alone takes "¹00" (superscripts), which int() refuses: ASCII digits only
            if len(values) != 1 or not (next(iter(values)).isascii() and next(iter(values)).isdigit()):
                raise _TransportError("read", f"invalid Content-Length {cl[:40]!r}")
            self.remaining = int(next(iter(values)))
            if self.remaining > MAX_BODY:
                raise _TransportError("read", f"the response body ({self.remaining} bytes) exceeds {MAX_BODY}")
        else:
            self.reusable = False
        self._chunk_left = 0
        self.decoder = _decoder(headers.get("content-encoding", ""))
        self.received = 0

    async def read_all(self) -> bytes:
        """The whole (decoded) body. Fast path: a Content-Length body already received."""
        buf = self.conn.buf
        n = self.remaining
        if n is not None and not self.chunked and self.decoder is None and len(buf) >= n:
            data = bytes(buf[:n])
            del buf[:n]
            self.done = True
            return data
        out = bytearray()
        while True:
            piece = await self.next_piece()
            if piece is None:
                return bytes(out)
            out += piece

    async def next_piece(self) -> bytes | None:
        """The next decoded bytes of the body; ``None`` at its end."""
        while not self.done:
            raw = await self._next_raw()
            if raw is None:
                self.done = True
                if self.decoder is not None:
                    tail = self.decoder.flush()
                    if tail:
                        return self._count(tail)
                return None
            if self.decoder is not None:
                try:
                    raw = self.decoder.decompress(raw, MAX_BODY + 1 - self.received)
                except zlib.error as exc:
                    raise _TransportError("read", f"the response body does not decode ({exc})") from None
                if self.decoder.unconsumed_tail:
                    raise _TransportError("read", f"the decoded response body exceeds {MAX_BODY} bytes")
            if raw:
                return self._count(raw)
        return None

    def _count(self, data: bytes) -> bytes:
        self.received += len(data)
        if self.received > MAX_BODY:
            raise _TransportError("read", f"the response body exceeds {MAX_BODY} bytes")
        return data

    async def _next_raw(self) -> bytes | None:
        conn = self.conn
        if self.chunked:
            return await self._next_chunk()
        if self.remaining == 0:
            return None
        if not conn.buf and not await conn.fill(self.timeout):
            if self.remaining is None:
                return None  # read until close: the end of the body
            raise _TransportError("read", "the server closed the connection in the middle of the body")
        take = len(conn.buf) if self.remaining is None else min(self.remaining, len(conn.buf))
        data = bytes(conn.buf[:take])
        del conn.buf[:take]
        if self.remaining is not None:
            self.remaining -= take
        return data

    async def _line(self) -> bytes:
        conn = self.conn
        start = 0
        while True:
            end = conn.buf.find(b"\r\n", start)
            if end >= 0:
                line = bytes(conn.buf[:end])
                del conn.buf[: end + 2]
                return line
            if len(conn.buf) > MAX_LINE:
                raise _TransportError("read", "a chunk-size or trailer line is too long")
            start = max(0, len(conn.buf) - 1)
            if not await conn.fill(self.timeout):
                raise _TransportError("read", "the server closed the connection in the middle of a chunked body")

    async def _next_chunk(self) -> bytes | None:
        conn = self.conn
        if self._chunk_left == 0:
            size_text = (await self._line()).split(b";", 1)[0].rstrip(b" \t")
            # Hex digits only: int(..., 16) also takes "0x1f", "+1" and "1_0".
            if not _CHUNK_SIZE.fullmatch(size_text):
                raise _TransportError("read", f"invalid chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                while line := await self._line():  # trailers: ignored, but well-formed
                    if not _HEADER_LINE.fullmatch(line):
                        raise _TransportError("read", f"malformed trailer line {line[:80]!r}")
                return None
            self._chunk_left = size
        if not conn.buf and not await conn.fill(self.timeout):
            raise _TransportError("read", "the server closed the connection in the middle of a chunked body")
        take = min(self._chunk_left, len(conn.buf))
        data = bytes(conn.buf[:take])
        del conn.buf[:take]
        self._chunk_left -= take
        if self._chunk_left == 0 and await self._line() != b"":
            raise _TransportError("read", "a chunk does not end with CRLF")
        return data


def _decoder(encoding: str) -> Any:
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return None
    if enc in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if enc == "deflate":
        return _Deflate()
    raise _TransportError("read", f"the server sent Content-Encoding {enc[:40]!r}, which acx did not ask for")


class _Deflate:
    """``deflate`` is zlib-wrapped per the RFC, raw in some servers: decide on the first bytes."""

    def __init__(self) -> None:
        self._d: Any = None
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._d is None:
            self._d = zlib.decompressobj()
            try:
                out: bytes = self._d.decompress(data, max_length)
            except zlib.error:
                self._d = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self._d.decompress(data, max_length)
        else:
            out = self._d.decompress(data, max_length)
        self.unconsumed_tail = self._d.unconsumed_tail
        return out

    def flush(self) -> bytes:
        return b"" if self._d is None else bytes(self._d.flush())


class _Response:
    """A streamed response: its status and headers, and its body read with :meth:`pieces`.
    Closing it gives the connection back to the pool when the body was read to its end."""

    def __init__(
        self, pool: _Pool, conn: _Conn, status: int, headers: dict[str, str], body: _Body, owner: str | None
    ) -> None:
        self.pool = pool
        self.owner = owner
        self.conn: _Conn | None = conn
        self.status_code = status
        self.headers = headers
        self.body = body

    async def pieces(self) -> AsyncIterator[bytes]:
        while True:
            piece = await self.body.next_piece()
            if piece is None:
                return
            yield piece

    async def aread(self) -> bytes:
        return await self.body.read_all()

    async def aclose(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if self.body.done and self.body.reusable:
            self.pool.give_back(conn)
        else:
            conn.close()
        self.pool.slots.release(self.owner)


# ---- proxies and TLS from the environment --------------------------------------------------------


class _Environment:
    """What the environment says about proxies and CA certificates (read once per client)."""

    def __init__(self, trust_env: bool) -> None:
        self.proxies = {k: v for k, v in getproxies_environment().items()} if trust_env else {}
        self.cafile = (os.environ.get("SSL_CERT_FILE") or None) if trust_env else None
        self.capath = (os.environ.get("SSL_CERT_DIR") or None) if trust_env else None
        self._ctx: ssl.SSLContext | None = None

    def tls(self) -> ssl.SSLContext:
        if self._ctx is None:
            try:
                ctx = ssl.create_default_context(cafile=self.cafile, capath=self.capath)
            except (OSError, ssl.SSLError) as exc:
                names = [f"SSL_CERT_FILE={self.cafile}"] if self.cafile else []
                names += [f"SSL_CERT_DIR={self.capath}"] if self.capath else []
                raise _Refused(
                    f"the CA certificates named by {' and '.join(names) or 'the system'} cannot be loaded "
                    f"({exc}); point SSL_CERT_FILE/SSL_CERT_DIR at PEM certificates or unset them"
                ) from None
            ctx.set_alpn_protocols(["http/1.1"])
            self._ctx = ctx
        return self._ctx

    def proxy_for(self, scheme: str, host: str) -> tuple[str, int, str | None] | None:
        if not self.proxies:
            return None
        url = self.proxies.get(scheme) or self.proxies.get("all")
        if not url or proxy_bypass_environment(host, self.proxies):
            return None
        var = f"{scheme.upper()}_PROXY" if self.proxies.get(scheme) else "ALL_PROXY"
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            shown = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
            raise _Refused(
                f"{var} names the proxy {shown}; acx's model client speaks only to http:// proxies "
                f"(it tunnels https through them with CONNECT): use an http:// proxy, or exempt the "
                f"model host with NO_PROXY={host}"
            )
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return parts.hostname, parts.port or 80, auth


# ---- the client ----------------------------------------------------------------------------------


class ModelClient:
    """Makes model calls. One instance per run (it pools connections per endpoint); close it with
    :meth:`aclose` or use it as an async context manager.

    ``transport`` replaces the network (a :data:`Transport` function in unit tests); ``rng`` fixes
    the jitter; ``retry`` the backoff rules (its ``max_retries`` is replaced by each endpoint's);
    ``trust_env=False`` ignores proxy and CA variables of the environment.
    """

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        transport: Transport | None = None,
        rng: random.Random | None = None,
        trust_env: bool = True,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._transport = transport
        self._rng = rng or random.Random()
        self._env = _Environment(trust_env)
        self._pools: dict[tuple[_Route, int], _Pool] = {}
        self._routes: dict[str, tuple[_Route, str]] = {}
        #: The open owners (gateway sessions) the pools share their slots among (_FairSlots).
        self._owners: set[str] = set()

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    # ---- owners ----------------------------------------------------------------------------------
    def open_owner(self, owner: str) -> None:
        """``owner`` (a gateway session) takes part in the fair sharing of every endpoint's slots."""
        self._owners.add(owner)

    def close_owner(self, owner: str) -> None:
        """``owner`` is gone: the slots kept free for it go to whoever waits."""
        self._owners.discard(owner)
        for pool in self._pools.values():
            pool.slots.wake()

    # ---- calls -----------------------------------------------------------------------------------
    async def complete(self, endpoint: Endpoint, request: ChatRequest) -> tuple[ModelResponse, Exchange]:
        """One model call in ``endpoint.protocol``: the normalised answer and the exchange."""
        url, body, headers = build_call(endpoint, request)
        ex = await self.exchange(
            endpoint, url, body, headers, parse=lambda data: parse_response(endpoint.protocol, data)
        )
        return ex.parsed, ex

    async def exchange(
        self,
        endpoint: Endpoint,
        url: str,
        body: dict[str, Any] | bytes,
        headers: dict[str, str],
        *,
        parse: Callable[[bytes], Any] | None = None,
        stream: bool = False,
        owner: str | None = None,
    ) -> Exchange:
        """POST ``body`` (a JSON object, or its encoding) to ``url`` with retries. A 200 whose
        body ``parse`` rejects (raising a ``malformed_response`` :class:`ModelCallError`) is
        retried like a 5xx. Raises :class:`ModelCallError` when the call fails for good. With
        ``stream=True`` a 2xx answer is returned unread (``Exchange.response``, read with
        :func:`chunks`): retries happen only before an answer starts. ``owner`` (an open owner,
        see :meth:`open_owner`) is who the call's connection slot is counted against."""
        attempts: list[AttemptRecord] = []
        deadline = endpoint.total_timeout
        data = body if isinstance(body, bytes) else msgspec.json.encode(body)
        # The total deadline is enforced by each request's own scope and before each wait, not
        # by one more cancel scope around the call (the costliest part of a call's Python work).
        total_at = trio.current_time() + deadline if deadline is not None else math.inf
        try:
            return await self._attempts(endpoint, url, data, headers, parse, attempts, stream, total_at, owner)
        except _TotalTimeout:
            assert deadline is not None
            exc = ModelCallError(
                "timeout",
                f"the model call did not finish within its total deadline of {deadline:g} s "
                f"({len(attempts)} attempt(s))",
                attempts=len(attempts),
            )
            exc.records = list(attempts)
            raise exc from None
        except ModelCallError as exc:
            exc.records = list(attempts)
            raise

    async def _attempts(
        self,
        endpoint: Endpoint,
        url: str,
        data: bytes,
        headers: dict[str, str],
        parse: Callable[[bytes], Any] | None,
        attempts: list[AttemptRecord],
        stream: bool,
        total_at: float,
        owner: str | None,
    ) -> Exchange:
        policy = self.retry
        retry_index = 0
        while True:
            started = time.time()
            t0 = trio.current_time()
            if t0 >= total_at:
                raise _TotalTimeout()
            failure: ModelCallError
            try:
                resp = await self._send(endpoint, url, data, headers, stream, total_at, owner)
            except _Refused as exc:
                attempts.append(AttemptRecord(started, _ms(t0), None, str(exc)))
                raise _scrubbed(ModelCallError("refused", str(exc), attempts=len(attempts)), endpoint) from None
            except _TransportError as exc:
                kind: ErrorKind = "timeout" if exc.timeout and exc.phase != "connect" else "connection"
                failure = ModelCallError(kind, _transport_message(exc, endpoint))
                attempts.append(AttemptRecord(started, _ms(t0), None, failure.message))
            else:
                status, resp_headers, content, live = resp
                rec = AttemptRecord(started, _ms(t0), status)
                attempts.append(rec)
                if live is not None:
                    return Exchange(status, b"", resp_headers, attempts, response=live)
                if 200 <= status < 300:
                    try:
                        parsed = (
                            None
                            if parse is None
                            else parse(content)
                            if len(content) < OFF_THREAD_BYTES
                            # a huge body is parsed off the trio thread: every other call waits
                            # for the trio thread (issue 24 item 3)
                            else await trio.to_thread.run_sync(parse, content)
                        )
                    except ModelCallError as exc:
                        failure = exc
                        rec.error = exc.message
                    else:
                        return Exchange(status, content, resp_headers, attempts, parsed)
                else:
                    kind = classify_status(status, content)
                    retry_after = parse_retry_after(resp_headers, time.time())
                    failure = ModelCallError(
                        kind,
                        f"HTTP {status} from the model endpoint: {_error_text(content)}",
                        status=status,
                        retry_after=retry_after,
                    )
                    rec.error = failure.message
                    if not policy.retryable(kind):
                        # 4xx other than 408/409/429 are the caller's problem: pass the server's
                        # answer through unchanged (the gateway forwards it to the agent).
                        failure.attempts = len(attempts)
                        failure.body = content
                        raise _scrubbed(failure, endpoint)
            if not policy.retryable(failure.kind) or retry_index >= endpoint.max_retries:
                failure.attempts = len(attempts)
                if retry_index:
                    failure.message = f"{failure.message} (after {len(attempts)} attempts)"
                raise _scrubbed(failure, endpoint)
            wait = policy.delay(retry_index, failure.retry_after, self._rng)
            remaining = min(total_at, trio.current_effective_deadline()) - trio.current_time()
            if wait is None or wait >= remaining:
                failure.attempts = len(attempts)
                why = (
                    f"the server asked to retry after {failure.retry_after:g} s"
                    if failure.retry_after is not None
                    else f"the next retry would wait {wait:g} s"
                )
                failure.message = f"{failure.message}; gave up: {why}, past the call's deadline or the retry cap"
                raise _scrubbed(failure, endpoint)
            attempts[-1].wait_seconds = round(wait, 3)
            await trio.sleep(wait)
            retry_index += 1

    # ---- one HTTP request ------------------------------------------------------------------------
    async def _send(
        self,
        endpoint: Endpoint,
        url: str,
        data: bytes,
        headers: dict[str, str],
        stream: bool,
        total_at: float,
        owner: str | None,
    ) -> tuple[int, dict[str, str], bytes, _Response | None]:
        """One POST: (status, headers, body, None), or for a streamed 2xx (status, headers, b"",
        the open response)."""
        if self._transport is not None:
            return await self._mock(url, data, headers)
        route, target = self._route(url)
        head = _request_head(route, target, headers, len(data), stream)
        pool = self._pool(route, endpoint.max_connections)
        timer = _Timer(total_at)
        conn: _Conn | None = None
        holds_slot = False
        try:
            with timer.scope:
                # Waiting for a free connection is bounded by the call's total deadline only.
                await pool.slots.acquire(owner)
                holds_slot = True
                conn = await self._sent(pool, head, data, endpoint, timer)
                status, resp_headers = await _read_head(conn, endpoint.read_timeout)
                body = _Body(conn, status, resp_headers, "POST", endpoint.read_timeout)
                if stream and 200 <= status < 300:
                    conn.timer = None  # the body is read later, each wait with its own timeout
                    live = _Response(pool, conn, status, resp_headers, body, owner)
                    conn, holds_slot = None, False  # the response owns both now
                    return status, resp_headers, b"", live
                content = await body.read_all()
                conn.timer = None
                live = _Response(pool, conn, status, resp_headers, body, owner)
                conn, holds_slot = None, False
                await live.aclose()  # back to the pool (or closed) and the slot released
                return status, resp_headers, content, None
            raise timer.expired()  # the scope's deadline passed: which one
        except BaseException:
            if conn is not None:
                conn.timer = None
                conn.close()
            if holds_slot:  # also when no connection could be made: the slot is free again
                pool.slots.release(owner)
            raise

    async def _sent(self, pool: _Pool, head: bytes, data: bytes, endpoint: Endpoint, timer: _Timer) -> _Conn:
        """A connection the request went out on. A reused connection that breaks while sending
        (closed by the server as we picked it) is replaced by a new one, once: the server never
        got the request."""
        # A small request is one write (one packet); a large body is not copied to join it.
        first, rest = (head + data, b"") if len(data) < 65536 else (head, data)
        conn = pool.take_idle()
        reused = conn is not None
        for _ in range(2):
            if conn is None:
                timer.arm("connect", math.inf)  # connecting has its own timeout (within the total)
                conn = await pool.connect(endpoint.connect_timeout)
            conn.timer = timer
            try:
                await conn.send(first, endpoint.read_timeout)
                if rest:
                    await conn.send(rest, endpoint.read_timeout)
                return conn
            except _TransportError:
                conn.close()
                if not reused:
                    raise
                conn, reused = None, False
        raise AssertionError("unreachable")  # pragma: no cover

    def _route(self, url: str) -> tuple[_Route, str]:
        known = self._routes.get(url)
        if known is None:
            known = self._parse_route(url)
            if len(self._routes) < 1024:  # a run calls a handful of URLs; never grows unbounded
                self._routes[url] = known
        return known

    def _parse_route(self, url: str) -> tuple[_Route, str]:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise _Refused(f"the model URL must be http:// or https:// with a host (got scheme {scheme!r})")
        if parts.username is not None or parts.password is not None:
            raise _Refused(
                "the model base URL holds user:password@ credentials, which acx does not send; "
                "remove them and give the key in model.api_key"
            )
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise _Refused("the model URL has an invalid port") from None
        proxy = self._env.proxy_for(scheme, parts.hostname)
        route = _Route(scheme, parts.hostname, port, proxy)
        path = parts.path or "/"
        if parts.query:
            path = f"{path}?{parts.query}"
        # Through an http proxy an http request names its whole URL (absolute form).
        target = f"http://{route.authority}{path}" if proxy and scheme == "http" else path
        return route, target

    def _pool(self, route: _Route, limit: int) -> _Pool:
        key = (route, limit)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(route, limit, self._env.tls, self._owners)
        return pool

    async def _mock(
        self, url: str, data: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes, _Response | None]:
        assert self._transport is not None
        try:
            out = self._transport("POST", url, dict(headers), data)
            if inspect.isawaitable(out):
                out = await out
        except OSError as exc:
            raise _TransportError("read", f"the connection broke ({exc})") from None
        status, resp_headers, content = out
        return status, {k.lower(): v for k, v in resp_headers.items()}, content, None


def _request_head(route: _Route, target: str, headers: dict[str, str], length: int, stream: bool) -> bytes:
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {route.authority}",
        f"User-Agent: {_USER_AGENT}",
        "Accept: text/event-stream" if stream else "Accept: application/json",
        "Accept-Encoding: gzip, deflate",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    if route.proxy and route.scheme == "http" and route.proxy[2]:
        lines.append(f"Proxy-Authorization: {route.proxy[2]}")
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            # A key read from a file with its line ending would split the request: refuse.
            raise _Refused(f"the request header {name.strip()[:40]!r} holds a line break; check the key's value")
        lines.append(f"{name}: {value}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise _Refused(
            "a request header (the API key?) holds characters outside Latin-1, which HTTP cannot carry"
        ) from None


async def chunks(ex: Exchange) -> AsyncIterator[bytes]:
    """The (decoded) bytes of a streamed answer as they arrive; closes the response at the end
    (or when the consumer stops). A transport failure mid-stream ends the stream early and says
    why in ``ex.stream_error`` — the caller must not pass the cut answer on as a whole one."""
    resp: _Response = ex.response
    try:
        async for piece in resp.pieces():
            yield piece
    except _TransportError as exc:
        ex.stream_error = exc.reason
        return
    finally:
        await resp.aclose()


def _scrubbed(exc: ModelCallError, endpoint: Endpoint) -> ModelCallError:
    """Servers echo keys in error messages ("Incorrect API key provided: sk-..."): cut them out."""
    for secret in {endpoint.api_key, endpoint.credential()}:
        if secret and len(secret) >= 4:
            exc.message = exc.message.replace(secret, "***")
            if exc.body is not None:
                exc.body = exc.body.replace(secret.encode(), b"***")
    exc.args = (exc.message,)
    return exc


def _ms(t0: float) -> float:
    return round((trio.current_time() - t0) * 1000.0, 3)


def _transport_message(exc: _TransportError, endpoint: Endpoint) -> str:
    """A transport failure in words, without the URL's path, query, credentials or any header."""
    parts = urlsplit(endpoint.base_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    where = f"{parts.scheme}://{parts.hostname}" + (f":{port}" if port else "")
    if exc.phase == "connect":
        if exc.timeout:
            return f"could not connect to the model endpoint {where} within {endpoint.connect_timeout:g} s"
        return f"connection to the model endpoint {where} failed: {exc.reason}"
    if exc.timeout:
        return f"the model endpoint {where} {exc.reason}"
    return f"connection to the model endpoint {where} failed: {exc.reason}"


def _error_text(data: bytes) -> str:
    """The server's error message (OpenAI/Anthropic error shapes), else a body excerpt."""
    import json

    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
        if isinstance(body.get("message"), str):
            return str(body["message"])[:500]
    text = data[:300].decode("utf-8", "replace").strip()
    return text or "(empty body)"
