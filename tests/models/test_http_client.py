"""The model client's own HTTP/1.1 (acx.models._client) against loopback servers written in the
test, byte by byte: framing (Content-Length, chunked, until close), gzip/deflate, keep-alive reuse,
a server closing an idle connection, proxies from the environment (a loopback proxy started
here), TLS against a loopback server with a CA made here, timeouts under MockClock, and the
refusals (credentials in a base URL, line breaks in a header). Contracts M2 (retry classes),
M3 (timeouts), M4 (the key stays with acx)."""

from __future__ import annotations

import gzip
import json
import random
import shutil
import ssl
import subprocess
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from acx.errors import AcxPlanError
from acx.models import ChatRequest, Endpoint, ModelCallError, ModelClient, RetryPolicy

OK = {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
OK_BYTES = json.dumps(OK).encode()
REQ = ChatRequest(messages=[{"role": "user", "content": "hi"}])
FAST = RetryPolicy(base_delay=0.01, max_delay=0.02)

ConnHandler = Callable[[trio.abc.Stream, int], Awaitable[None]]


async def read_request(stream: trio.abc.Stream, buf: bytearray) -> tuple[bytes, bytes] | None:
    """One request (head, body) from ``stream``; ``None`` when the client closed."""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buf += data
    end = buf.index(b"\r\n\r\n")
    head = bytes(buf[:end])
    del buf[: end + 4]
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buf) < length:
        buf += await stream.receive_some(65536)
    body = bytes(buf[:length])
    del buf[:length]
    return head, body


def reply(body: bytes = OK_BYTES, status: int = 200, headers: tuple[str, ...] = ()) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def serve(nursery: trio.Nursery, handler: ConnHandler, wrap: ssl.SSLContext | None = None) -> int:
    """A loopback server calling ``handler(stream, connection_number)`` per connection."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    count = [0]

    async def per_conn(stream: trio.SocketStream) -> None:
        count[0] += 1
        s: trio.abc.Stream = stream
        if wrap is not None:
            s = trio.SSLStream(stream, wrap, server_side=True)
        try:
            await handler(s, count[0])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(s)

    nursery.start_soon(trio.serve_listeners, per_conn, listeners)
    return int(listeners[0].socket.getsockname()[1])


def endpoint(port: int, scheme: str = "http", host: str = "127.0.0.1", **kw) -> Endpoint:
    return Endpoint(base_url=f"{scheme}://{host}:{port}/v1", model="m", api_key="sk-test-key", **kw)


async def call(ep: Endpoint, client: ModelClient | None = None):
    own = client is None
    c = client or ModelClient(retry=FAST, rng=random.Random(0))
    try:
        return await c.complete(ep, REQ)
    finally:
        if own:
            await c.aclose()


def with_server(handler: ConnHandler, fn, clock=None, wrap=None):
    async def main():
        async with trio.open_nursery() as n:
            port = await serve(n, handler, wrap)
            try:
                return await fn(port)
            finally:
                n.cancel_scope.cancel()

    return trio.run(main, clock=clock) if clock is not None else trio.run(main)


# ---- framing ---------------------------------------------------------------------------------------


def test_chunked_and_compressed_bodies_are_decoded() -> None:  # contract M1 (any server's framing)
    gz = gzip.compress(OK_BYTES)
    deflated = zlib.compress(OK_BYTES)
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = raw_deflate.compress(OK_BYTES) + raw_deflate.flush()

    def chunked(data: bytes, size: int = 7) -> bytes:
        parts = [data[i : i + size] for i in range(0, len(data), size)]
        out = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts)
        return out + b"0\r\nX-Trailer: t\r\n\r\n"

    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(OK_BYTES),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n" + chunked(gz, 5),
        reply(deflated, headers=("Content-Encoding: deflate",)),
        reply(raw, headers=("Content-Encoding: deflate",)),
        b"HTTP/1.1 100 Continue\r\n\r\n" + reply(OK_BYTES),
    ]
    seen: list[bytes] = []

    async def handler(stream, n):
        buf = bytearray()
        while answers:
            req = await read_request(stream, buf)
            if req is None:
                return
            seen.append(req[0])
            await stream.send_all(answers.pop(0))

    async def fn(port):
        async with ModelClient(retry=FAST) as c:
            return [(await call(endpoint(port), c))[0].content for _ in range(5)]

    assert with_server(handler, fn) == ["ok"] * 5
    assert b"accept-encoding: gzip, deflate" in seen[0].lower()


def test_body_until_close_and_http_1_0() -> None:  # contract M1
    async def handler(stream, n):
        await read_request(stream, bytearray())
        await stream.send_all(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK_BYTES)

    async def fn(port):
        async with ModelClient(retry=FAST) as c:
            a = await call(endpoint(port), c)
            b = await call(endpoint(port), c)  # the first connection ended with its body: a new one
            return a[0].content, b[0].content

    assert with_server(handler, fn) == ("ok", "ok")


def test_keep_alive_reuses_one_connection() -> None:  # contract M2 (max_connections, pooling)
    conns: list[int] = []

    async def handler(stream, n):
        conns.append(n)
        buf = bytearray()
        while (req := await read_request(stream, buf)) is not None:
            assert req[0].startswith(b"POST /v1/chat/completions HTTP/1.1")
            await stream.send_all(reply())

    async def fn(port):
        async with ModelClient(retry=FAST) as c:
            for _ in range(5):
                r, ex = await call(endpoint(port), c)
                assert r.content == "ok" and len(ex.attempts) == 1

    with_server(handler, fn)
    assert conns == [1]


def test_idle_connection_closed_by_server_is_replaced_without_a_retry() -> None:  # contract M2
    """The server answers, then closes the idle connection: the next call notices before
    sending and opens a new connection; no attempt fails, nothing is sent twice."""
    requests: list[int] = []

    async def handler(stream, n):
        req = await read_request(stream, bytearray())
        requests.append(n)
        if req is not None:
            await stream.send_all(reply())  # keep-alive promised, then closed anyway

    async def fn(port):
        async with ModelClient(retry=RetryPolicy(base_delay=5)) as c:
            out = []
            for _ in range(3):
                _r, ex = await call(endpoint(port, max_retries=0), c)
                await trio.sleep(0.05)  # the server's close reaches us
                out.append(len(ex.attempts))
            return out

    assert with_server(handler, fn) == [1, 1, 1]
    assert requests == [1, 2, 3]


def test_malformed_answers_are_connection_errors_and_retry() -> None:  # contract M2
    answers = [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n",
        reply(),
    ]

    async def handler(stream, n):
        req = await read_request(stream, bytearray())
        if req is not None:
            await stream.send_all(answers.pop(0))

    async def fn(port):
        return await call(endpoint(port, max_retries=5))

    r, ex = with_server(handler, fn)
    assert r.content == "ok" and [a.status for a in ex.attempts] == [None] * 5 + [200], ex.attempts
    assert all("failed" in (a.error or "") for a in ex.attempts[:5]), ex.attempts


def test_max_connections_bounds_open_connections() -> None:  # contract M2
    open_now = [0]
    peak = [0]

    async def handler(stream, n):
        open_now[0] += 1
        peak[0] = max(peak[0], open_now[0])
        try:
            buf = bytearray()
            while await read_request(stream, buf) is not None:
                await trio.sleep(0.02)
                await stream.send_all(reply())
        finally:
            open_now[0] -= 1

    async def fn(port):
        ep = endpoint(port, max_connections=3)
        async with ModelClient(retry=FAST) as c, trio.open_nursery() as n:
            for _ in range(12):
                n.start_soon(call, ep, c)

    with_server(handler, fn)
    assert peak[0] == 3


def test_failed_connects_free_their_connection_slot() -> None:  # contract M2
    """Refused connections retried through a one-connection pool: each failed attempt gives
    its slot back (a leaked slot would stall the next attempt until the total deadline)."""

    async def main():
        async with trio.open_nursery() as n:
            port = await serve(n, lambda stream, k: stream.aclose())
            n.cancel_scope.cancel()
        t0 = trio.current_time()
        ep = endpoint(port, max_connections=1, max_retries=4, total_timeout=20)
        async with ModelClient(retry=FAST) as c:
            with pytest.raises(ModelCallError) as info:
                await call(ep, c)
            with pytest.raises(ModelCallError):
                await call(ep, c)
        return info.value, trio.current_time() - t0

    err, elapsed = trio.run(main)
    assert err.kind == "connection" and err.attempts == 5 and elapsed < 10


# ---- timeouts (virtual time) --------------------------------------------------------------------------


def test_read_timeout_under_mock_clock() -> None:  # contract M3
    async def handler(stream, n):
        await read_request(stream, bytearray())
        await trio.sleep_forever()

    async def fn(port):
        t0 = trio.current_time()
        with pytest.raises(ModelCallError) as info:
            await call(endpoint(port, read_timeout=300, max_retries=0))
        return info.value, trio.current_time() - t0

    err, elapsed = with_server(handler, fn, clock=trio.testing.MockClock(autojump_threshold=0.01))
    assert err.kind == "timeout" and "sent nothing for 300 s" in err.message
    assert elapsed == pytest.approx(300, abs=1)


def test_connect_timeout_is_a_connection_error(monkeypatch: pytest.MonkeyPatch) -> None:  # contract M2, M3
    async def never(*a, **k):
        await trio.sleep_forever()

    monkeypatch.setattr(trio, "open_tcp_stream", never)

    async def main():
        with pytest.raises(ModelCallError) as info:
            await call(endpoint(9, connect_timeout=7, max_retries=1))
        return info.value, trio.current_time()

    err, now = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert err.kind == "connection" and "within 7 s" in err.message and err.attempts == 2
    assert now == pytest.approx(14, abs=0.1)


# ---- refusals --------------------------------------------------------------------------------------


def test_base_url_with_credentials_is_refused_and_never_shown() -> None:  # contract M4 (the key stays with acx)
    ep = Endpoint(base_url="http://user:pw-secret-1@127.0.0.1:9/v1", model="m", api_key="sk-x")
    with pytest.raises(ModelCallError) as info:
        trio.run(call, ep)
    assert info.value.kind == "refused" and "pw-secret-1" not in str(info.value)
    assert "model.api_key" in info.value.message


def test_base_url_with_credentials_is_a_located_plan_error() -> None:  # contract M4 (the key stays with acx)
    """A ``${VAR}`` resolved at run time is checked before the run starts (``acx compile``
    refuses a literal one: tests/cli/test_saved_plan_secrets.py)."""
    import msgspec

    from acx import ir
    from acx.models import roles_for

    req = ir.RunRequest(
        model=msgspec.convert({"id": "m", "base_url": "${MODEL_URL}"}, ir.ModelSpec),
        benchmark=ir.BenchmarkSpec(id="b"),
        harness=ir.HarnessSpec(id="h"),
        environment=msgspec.convert({"id": "docker"}, ir.EnvironmentSpec),
    )
    with pytest.raises(AcxPlanError) as info:
        roles_for(req, {"MODEL_URL": "https://u:pw-secret-2@api.example.com/v1"})
    assert info.value.path == "model.base_url" and "pw-secret-2" not in str(info.value)
    assert "api_key" in str(info.value.help)


def test_header_with_line_break_is_refused() -> None:  # contract M4 (the key stays with acx)
    ep = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-x\r\nX-Evil: 1")
    with pytest.raises(ModelCallError) as info:
        trio.run(call, ep)
    assert info.value.kind == "refused" and "X-Evil" not in str(info.value)


# ---- proxies ---------------------------------------------------------------------------------------


async def proxy_server(nursery: trio.Nursery, log: list[bytes]) -> int:
    """A loopback http proxy: absolute-form requests are forwarded, CONNECT is tunnelled."""

    async def handler(client, n):
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            data = await client.receive_some(65536)
            if not data:
                return
            buf += data
        line = bytes(buf[: buf.index(b"\r\n")])
        log.append(bytes(buf[: buf.index(b"\r\n\r\n")]))
        method, target, _ = line.split(b" ")
        if method == b"CONNECT":
            host, port = target.rsplit(b":", 1)
            upstream = await trio.open_tcp_stream(host.decode(), int(port))
            await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            del buf[: buf.index(b"\r\n\r\n") + 4]
        else:
            url = target.decode()
            hostport = url.split("/")[2]
            host, port = hostport.rsplit(":", 1)
            upstream = await trio.open_tcp_stream(host, int(port))
        # Pump bytes both ways until either side closes.
        if method != b"CONNECT":
            await upstream.send_all(bytes(buf))

        async def pump(a, b):
            try:
                while data := await a.receive_some(65536):
                    await b.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery2.cancel_scope.cancel()

        async with trio.open_nursery() as nursery2:
            nursery2.start_soon(pump, client, upstream)
            nursery2.start_soon(pump, upstream, client)
        await upstream.aclose()

    return await serve(nursery, handler)


def test_http_proxy_absolute_form_and_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:  # contract M2
    log: list[bytes] = []

    async def origin(stream, n):
        buf = bytearray()
        while await read_request(stream, buf) is not None:
            await stream.send_all(reply())

    async def main():
        async with trio.open_nursery() as n:
            port = await serve(n, origin)
            pport = await proxy_server(n, log)
            monkeypatch.setenv("HTTP_PROXY", f"http://puser:ppass@127.0.0.1:{pport}")
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            r1 = await call(endpoint(port))
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            r2 = await call(endpoint(port))
            n.cancel_scope.cancel()
            return r1, r2

    r1, r2 = trio.run(main)
    assert r1[0].content == r2[0].content == "ok"
    assert len(log) == 1  # the second call bypassed the proxy (NO_PROXY)
    assert log[0].startswith(b"POST http://127.0.0.1:")
    assert b"Proxy-Authorization: Basic cHVzZXI6cHBhc3M=" in log[0]


@pytest.mark.parametrize("proxy", ["socks5://127.0.0.1:1080", "https://127.0.0.1:3128"])
def test_unsupported_proxy_is_refused_clearly(monkeypatch: pytest.MonkeyPatch, proxy: str) -> None:  # M2
    monkeypatch.setenv("HTTPS_PROXY", proxy.replace("127.0.0.1", "u:proxy-pw@127.0.0.1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(ModelCallError) as info:
        trio.run(call, endpoint(443, scheme="https", host="api.example.com"))
    assert info.value.kind == "refused" and "HTTPS_PROXY" in info.value.message
    assert "NO_PROXY=api.example.com" in info.value.message and "proxy-pw" not in info.value.message
    assert info.value.attempts == 1


# ---- TLS -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a server certificate for 127.0.0.1 / localhost, made with the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed for the TLS tests (Debian package openssl)")
    d = tmp_path_factory.mktemp("pki")

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
         "-days", "2", "-subj", "/CN=acx test CA")  # fmt: skip
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost")
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return d


def tls_server_context(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki / "srv.pem", pki / "srv.key")
    return ctx


def test_tls_with_ca_from_ssl_cert_file_and_keep_alive(pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # M2
    monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.pem"))
    conns: list[int] = []

    async def handler(stream, n):
        conns.append(n)
        buf = bytearray()
        while await read_request(stream, buf) is not None:
            await stream.send_all(reply())

    async def fn(port):
        async with ModelClient(retry=FAST) as c:
            a = await call(endpoint(port, scheme="https", host="localhost"), c)
            b = await call(endpoint(port, scheme="https", host="localhost"), c)
            return a[0].content, b[0].content

    assert with_server(handler, fn, wrap=tls_server_context(pki)) == ("ok", "ok")
    assert conns == [1]


def test_tls_verification_failures(pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # contract M2
    async def handler(stream, n):
        buf = bytearray()
        while await read_request(stream, buf) is not None:
            await stream.send_all(reply())

    async def fn(port):
        errors = []
        # An unknown CA (the system store does not hold the test CA) ...
        monkeypatch.setenv("SSL_CERT_FILE", str(Path(ssl.get_default_verify_paths().openssl_cafile)))
        with pytest.raises(ModelCallError) as info:
            await call(endpoint(port, scheme="https", host="localhost", max_retries=0))
        errors.append(info.value)
        # ... and a known CA but a name the certificate does not hold.
        monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.pem"))
        with pytest.raises(ModelCallError) as info:
            await call(endpoint(port, scheme="https", host="127.0.0.2", max_retries=0))
        errors.append(info.value)
        return errors

    errors = with_server(handler, fn, wrap=tls_server_context(pki))
    assert all(e.kind == "connection" for e in errors)
    assert "certificate verification failed" in errors[0].message
    assert "certificate verification failed" in errors[1].message or "could not connect" in errors[1].message


def test_tls_through_a_connect_tunnel(pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # contract M2
    log: list[bytes] = []

    async def origin(stream, n):
        buf = bytearray()
        while await read_request(stream, buf) is not None:
            await stream.send_all(reply())

    async def main():
        async with trio.open_nursery() as n:
            port = await serve(n, origin, tls_server_context(pki))
            pport = await proxy_server(n, log)
            monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.pem"))
            monkeypatch.setenv("https_proxy", f"127.0.0.1:{pport}")
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            r = await call(endpoint(port, scheme="https", host="localhost"))
            n.cancel_scope.cancel()
            return r

    r, _ = trio.run(main)
    assert r.content == "ok" and log[0].startswith(b"CONNECT localhost:")


# ---- hostile servers ---------------------------------------------------------------------------------

_answer = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"
    + b"%x\r\n%s\r\n0\r\n\r\n" % (len(gzip.compress(OK_BYTES)), gzip.compress(OK_BYTES))
)


def _mutated(edits: list[tuple[int, int]]) -> bytes:
    b = bytearray(_answer)
    for pos, byte in edits:
        b[pos % len(b)] = byte
    return bytes(b)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=3000),
        st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=5).map(_mutated),
        st.builds(lambda n, tail: _answer[:n] + tail, st.integers(0, len(_answer)), st.binary(max_size=100)),
    )
)
@example(_answer)
@example(b"HTTP/1.1 200 OK\r\nContent-Length: \xb900\r\n\r\n")  # "¹00" (latin-1): isdigit() yet not int()
@example(b"HTTP/1.1 2\xb20 OK\r\nContent-Length: 0\r\n\r\n")
def test_any_server_answer_is_a_response_or_a_transport_error(data: bytes) -> None:  # contract M2
    """Whatever a server sends, the client reads a response or raises its transport error (a
    ``connection`` failure for the retry layer) — never another exception, never a hang."""
    from acx.models._client import _Body, _Conn, _read_head, _TransportError

    async def main():
        client, server = trio.testing.memory_stream_pair()
        await server.send_all(data)
        await server.send_stream.aclose()
        conn = _Conn(client, -1)
        try:
            status, headers = await _read_head(conn, 5)
            body = await _Body(conn, status, headers, "POST", 5).read_all()
        except _TransportError:
            return None
        return status, body

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    if data == _answer:
        assert out == (200, OK_BYTES)
