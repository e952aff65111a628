"""acx's own HTTP/1.1 server and client are held to h11 — the reference parser behind httpx,
which every SDK uses — on the same bytes (issue 24 item 6; contract M4): a request acx's server
hands to the gateway is the request h11 reads from those bytes (method, target, body), and a
response acx's client reads is the response h11 reads (status, body). acx may refuse more than
h11 (it is stricter on framing); it never reads something h11 does not."""

from __future__ import annotations

import h11
import trio
import trio.testing
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.models.test_http_server import _mutate, _request, encode, recording, run


def _h11_requests(data: bytes) -> list[tuple[str, str, bytes]] | None:
    """The complete requests h11 reads from ``data`` (pipelined), or None if it refuses the first."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    conn.receive_data(b"")  # the client closed its side
    out: list[tuple[str, str, bytes]] = []
    current: list = []
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                if event is h11.PAUSED and conn.our_state is h11.SEND_RESPONSE:
                    conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                    conn.send(h11.EndOfMessage())
                    conn.start_next_cycle()
                    continue
                return out
            if isinstance(event, h11.Request):
                current = [event.method.decode(), event.target.decode("latin-1"), b""]
            elif isinstance(event, h11.Data):
                current[2] += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                out.append((current[0], current[1], current[2]))
                conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                conn.send(h11.EndOfMessage())
                if conn.their_state is h11.DONE and conn.our_state is h11.DONE:
                    conn.start_next_cycle()
    except h11.RemoteProtocolError:
        return out or None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_request, min_size=1, max_size=3))
def test_valid_requests_read_as_h11_reads_them(reqs: list[dict]) -> None:
    data = b"".join(encode(r) for r in reqs)
    seen: list = []
    run([data], recording(seen))
    ours = [(m, t, b) for m, t, _h, b in seen]
    assert ours == _h11_requests(data)


_base = [
    encode({"method": "POST", "path": "/v1/x", "headers": {}, "body": b'{"a": 1}', "chunked": chunked, "chunk": 3})
    for chunked in (False, True)
]


def _cl_space(data: bytes, byte: int) -> tuple[bytes, list[tuple[int, int]]]:
    """The space after ``Content-Length:`` replaced by ``byte``: latin-1's NEL (0x85) and NBSP (0xA0)
    are whitespace to str.strip() but not to HTTP (found by the response property in CI)."""
    return data, [(data.lower().index(b"content-length:") + len(b"content-length:"), byte)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_base),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
@example(*_cl_space(_base[0], 0x85))
@example(*_cl_space(_base[0], 0xA0))
def test_a_mutated_request_is_never_read_differently_from_h11(base: bytes, edits: list[tuple[int, int]]) -> None:
    data = _mutate(base, edits)
    seen: list = []
    run([data], recording(seen))
    ours = [(m, t, b) for m, t, _h, b in seen]
    theirs = _h11_requests(data) or []
    # Every request acx's server read, h11 read the same way (acx may stop earlier: stricter).
    assert ours == theirs[: len(ours)], (data, ours, theirs)


# ---- the client side ---------------------------------------------------------------------------

_status = st.sampled_from([200, 201, 204, 400, 404, 429, 500, 503])


def _response(status: int, body: bytes, chunked: bool, chunk: int) -> bytes:
    head = [f"HTTP/1.1 {status} X", "Content-Type: application/json"]
    if status == 204:
        return ("\r\n".join(head) + "\r\n\r\n").encode()
    if chunked:
        head.append("Transfer-Encoding: chunked")
        payload = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + chunk]), body[i : i + chunk]) for i in range(0, len(body), chunk)
        )
        payload += b"0\r\n\r\n"
    else:
        head.append(f"Content-Length: {len(body)}")
        payload = body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def _h11_response(data: bytes) -> tuple[int, bytes] | None:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/", headers=[("host", "x"), ("content-length", "0")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    conn.receive_data(b"")
    status, body = None, b""
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return (status, body) if status is not None else None
            elif event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return None
    except h11.RemoteProtocolError:
        return None


def _acx_response(data: bytes) -> tuple[int, bytes] | None:
    from acx.models._client import _Body, _Conn, _read_head, _TransportError

    async def main() -> tuple[int, bytes] | None:
        client, server = trio.testing.memory_stream_pair()
        await server.send_all(data)
        await server.send_stream.aclose()
        conn = _Conn(client, -1)
        try:
            status, headers = await _read_head(conn, 5)
            return status, await _Body(conn, status, headers, "POST", 5).read_all()
        except _TransportError:
            return None

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=200, deadline=None)
@given(_status, st.binary(max_size=3000), st.booleans(), st.integers(min_value=1, max_value=700))
def test_responses_read_as_h11_reads_them(status: int, body: bytes, chunked: bool, chunk: int) -> None:
    data = _response(status, body, chunked, chunk)
    assert _acx_response(data) == _h11_response(data)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([_response(200, b'{"ok": true}', c, 4) for c in (False, True)]),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
@example(*_cl_space(_response(200, b'{"ok": true}', False, 4), 0x85))
@example(*_cl_space(_response(200, b'{"ok": true}', False, 4), 0xA0))
def test_a_mutated_response_is_never_read_differently_from_h11(base: bytes, edits: list[tuple[int, int]]) -> None:
    data = _mutate(base, edits)
    ours = _acx_response(data)
    if ours is not None:  # acx may refuse more (stricter); what it reads, h11 reads the same
        assert ours == _h11_response(data), (data, ours)
