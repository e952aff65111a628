"""The gateway's HTTP/1.1 server (acx.models._http_server) on in-memory streams: valid requests in
any framing and any split are read exactly; hostile or broken input gets a 4xx and a closed
connection — never a crash, a hang or unbounded memory (hypothesis fuzzing). Contract M4
(the gateway's endpoint: bad input gets a clear error, bounded in time and memory)."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acx.models import _http_server as srv
from acx.models._http_server import Reply, serve_connection

Seen = list[tuple[str, str, dict[str, str], bytes]]


def recording(seen: Seen, reply: Reply | None = None):
    async def handler(method: str, target: str, headers: dict[str, str], body: bytes) -> Reply:
        seen.append((method, target, headers, body))
        return reply or (200, json.dumps({"n": len(seen)}).encode(), [])

    return handler


async def exchange(data: list[bytes], handler, *, close: bool = True) -> bytes:
    """Send ``data`` (in these pieces) to a served connection; all the server wrote back."""
    client, server = trio.testing.memory_stream_pair()
    out = bytearray()
    async with trio.open_nursery() as n:
        n.start_soon(serve_connection, handler, server)
        for piece in data:
            await client.send_all(piece)
        if close:
            await client.send_stream.aclose()
        while chunk := await client.receive_some(65536):
            out += chunk
    return bytes(out)


def run(data: list[bytes], handler, **kw) -> bytes:
    return trio.run(lambda: exchange(data, handler, **kw), clock=trio.testing.MockClock(autojump_threshold=0))


def statuses(out: bytes) -> list[int]:
    """The statuses of the responses in ``out`` (framed by Content-Length; 1xx have no body)."""
    codes = []
    while out:
        head, sep, out = out.partition(b"\r\n\r\n")
        assert sep and head.startswith(b"HTTP/1.1 "), head[:100]
        codes.append(int(head.split(b" ")[1]))
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                out = out[int(value) :]
    return [c for c in codes if c >= 200]


# ---- valid requests, any framing, any split ------------------------------------------------------

_token = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).filter(
    lambda s: s not in ("host", "content-length", "transfer-encoding", "connection", "expect")
)
_value = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)
_request = st.fixed_dictionaries(
    {
        "method": st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
        "path": st.text("abc/_-.~%0123456789?=&", max_size=30).map(lambda p: "/" + p),
        "headers": st.dictionaries(_token, _value, max_size=6),
        "body": st.binary(max_size=3000),
        "chunked": st.booleans(),
        "chunk": st.integers(min_value=1, max_value=700),
    }
)


def encode(r: dict) -> bytes:
    lines = [f"{r['method']} {r['path']} HTTP/1.1", "Host: gw"]
    lines += [f"{k}: {v}" for k, v in r["headers"].items()]
    body: bytes = r["body"]
    if r["chunked"]:
        lines.append("Transfer-Encoding: chunked")
        n = r["chunk"]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + n]), body[i : i + n]) for i in range(0, len(body), n))
        payload += b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_request, min_size=1, max_size=3), st.lists(st.integers(min_value=1, max_value=400), max_size=8))
def test_valid_requests_are_read_exactly_in_any_split(reqs: list[dict], cuts: list[int]) -> None:  # M4
    data = b"".join(encode(r) for r in reqs)  # pipelined on one keep-alive connection
    pieces, at = [], 0
    for c in cuts:
        pieces.append(data[at : at + c])
        at += c
    pieces.append(data[at:])
    seen: Seen = []
    out = run([p for p in pieces if p], recording(seen))
    assert statuses(out) == [200] * len(reqs)
    for r, (method, target, headers, body) in zip(reqs, seen, strict=True):
        assert (method, target, body) == (r["method"], r["path"], r["body"])
        for k, v in r["headers"].items():
            assert headers[k] == v.strip()


# ---- hostile input ----------------------------------------------------------------------------------

_valid = encode({"method": "POST", "path": "/v1/x", "headers": {}, "body": b'{"a": 1}', "chunked": True, "chunk": 3})


def _mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    b = bytearray(data)
    for pos, byte in edits:
        if b:
            b[pos % len(b)] = byte
    return bytes(b)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=2000),
        st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6).map(
            lambda e: _mutate(_valid, e)
        ),
        st.builds(lambda a, b: _valid[:a] + b, st.integers(0, len(_valid)), st.binary(max_size=200)),
    )
)
def test_any_input_gets_answers_or_silence_never_a_crash(data: bytes) -> None:  # contract M4
    seen: Seen = []
    out = run([data], recording(seen))
    codes = statuses(out)
    assert all(c in (200, 400, 413, 431, 501, 505) for c in codes), out[:300]
    assert len(seen) == codes.count(200)
    if out:
        assert out.startswith(b"HTTP/1.1 ")


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999\r\n\r\n", 413),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400),
        (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\n" + b"X-A: b\r\n" * 200 + b"\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 70_000, 431),  # never ends: refused, not buffered
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nshort", 400),  # ends early
    ],
)
def test_bad_requests_get_a_4xx_and_the_connection_closes(raw: bytes, status: int) -> None:  # contract M4
    seen: Seen = []
    out = run([raw, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"], recording(seen))
    assert statuses(out) == [status] and seen == []  # nothing after the bad request is read
    assert b"connection: close" in out.lower() and b'"message": "acx gateway: ' in out


def test_chunked_body_over_the_limit_is_413(monkeypatch: pytest.MonkeyPatch) -> None:  # contract M4
    monkeypatch.setattr(srv, "MAX_BODY", 10)
    raw = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n"
    assert statuses(run([raw], recording([]))) == [413]


def test_silent_client_is_dropped_after_the_idle_timeout() -> None:  # contract M4 (bounded time)
    async def main():
        client, server = trio.testing.memory_stream_pair()
        t0 = trio.current_time()
        async with trio.open_nursery() as n:
            n.start_soon(serve_connection, recording([]), server)
            await client.send_all(b"POST / HTTP/1.1\r\nHost: a\r\n")  # half a head, then nothing
            out = b""
            while chunk := await client.receive_some(65536):
                out += chunk
        return out, trio.current_time() - t0

    out, elapsed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert statuses(out) == [400] and elapsed == pytest.approx(srv.IDLE_TIMEOUT)


# ---- features ---------------------------------------------------------------------------------------


def test_keep_alive_100_continue_http10_and_head() -> None:  # M4
    seen: Seen = []
    out = run(
        [
            b"\r\nPOST /a HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
            b"GET /b HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /c HTTP/1.0\r\n\r\n",
            b"GET /never HTTP/1.1\r\nHost: a\r\n\r\n",
        ],
        recording(seen),
    )
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert [s[1] for s in seen] == ["/a", "/b", "/c"] and seen[0][3] == b"hi"
    assert out.count(b"connection: close") == 1  # the HTTP/1.0 request ends the connection


def test_streamed_reply_is_chunked_and_closes_its_producer() -> None:  # M4
    closed = []

    async def events():
        try:
            yield b"data: 1\n\n"
            yield b""
            yield b"data: 2\n\n"
        finally:
            closed.append(True)

    async def handler(method, target, headers, body):
        return 200, events(), [("x-extra", "1")]

    out = run([b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"], handler)
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head and b"content-type: text/event-stream" in head
    assert b"x-extra: 1" in head
    assert body == b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n" and closed == [True]


def test_a_failing_handler_answers_500_and_the_server_lives() -> None:  # contract M4
    async def handler(method, target, headers, body):
        raise KeyError("boom")

    out = run([b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"], handler)
    assert statuses(out) == [500] and b"KeyError" in out and b"boom" not in out


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_fast_json_decoding_reads_what_the_stdlib_reads(value) -> None:  # M4 (the gateway forwards it)
    from acx.models._protocols import loads

    text = json.dumps(value).encode()  # NaN, Infinity and huge integers included
    assert json.dumps(loads(text)) == json.dumps(json.loads(text))
    with pytest.raises(ValueError):
        loads(b"{not json")
