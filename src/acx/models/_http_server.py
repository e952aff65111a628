"""A small HTTP/1.1 server on trio sockets (h11 lives only here): keep-alive, bounded bodies,
idle timeouts. It serves the gateway; each request is handed to an async handler."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import h11
import trio

__all__ = ["Handler", "Reply", "serve_http"]

#: (status, body, extra headers); a body that is an async iterator of bytes is streamed (chunked,
#: ``text/event-stream``) as it is produced.
Reply = tuple[int, Any, list[tuple[str, str]]]
#: handler(method, target, headers (lower-case names), body) -> Reply
Handler = Callable[[str, str, dict[str, str], bytes], Awaitable[Reply]]

MAX_BODY = 64 * 1024 * 1024
IDLE_TIMEOUT = 600.0


async def serve_http(
    handler: Handler, host: str, port: int = 0, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Listen on ``host:port`` (0 = a free port) and serve until cancelled; reports the port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    task_status.started(bound)
    await trio.serve_listeners(partial(_connection, handler), listeners)


async def _receive(stream: trio.SocketStream, conn: h11.Connection) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        with trio.move_on_after(IDLE_TIMEOUT) as scope:
            data = await stream.receive_some(65536)
        if scope.cancelled_caught:
            return h11.ConnectionClosed()
        conn.receive_data(data)


async def _send(stream: trio.SocketStream, conn: h11.Connection, reply: Reply) -> None:
    status, body, headers = reply
    if not isinstance(body, bytes):
        await _send_stream(stream, conn, status, body, headers)
        return
    all_headers = [("content-type", "application/json"), ("content-length", str(len(body))), *headers]
    out = conn.send(h11.Response(status_code=status, headers=all_headers))
    out += conn.send(h11.Data(data=body)) or b""
    out += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(out)


async def _send_stream(
    stream: trio.SocketStream, conn: h11.Connection, status: int, body: AsyncIterator[bytes], headers: list[Any]
) -> None:
    head = [("content-type", "text/event-stream"), ("cache-control", "no-cache"), *headers]
    await stream.send_all(conn.send(h11.Response(status_code=status, headers=head)) or b"")
    try:
        async for chunk in body:
            if chunk:
                await stream.send_all(conn.send(h11.Data(data=chunk)) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
    finally:
        closer = getattr(body, "aclose", None)
        if closer is not None:  # a client that hung up: the producer's clean-up runs now
            with trio.CancelScope(shield=True):
                await closer()


async def _connection(handler: Handler, stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=1024 * 1024)
    try:
        while True:
            event = await _receive(stream, conn)
            if not isinstance(event, h11.Request):
                return
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
            body = bytearray()
            too_big = False
            while True:
                part = await _receive(stream, conn)
                if isinstance(part, h11.Data):
                    if len(body) + len(part.data) > MAX_BODY:
                        too_big = True
                    else:
                        body += part.data
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            if too_big:
                reply: Reply = (413, b'{"error":{"message":"request body too large"}}', [])
            else:
                reply = await handler(event.method.decode(), event.target.decode("latin-1"), headers, bytes(body))
            await _send(stream, conn, reply)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            try:
                await _send(stream, conn, (400, b'{"error":{"message":"malformed HTTP request"}}', []))
            except (trio.BrokenResourceError, h11.LocalProtocolError):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()
