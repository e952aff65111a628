"""The driver ⇄ worker fast channel: one TCP stream per node (per trio run of the driver) that
carries the protocol's encoded calls and replies, multiplexed by a channel-level request id.

Why not one Ray actor call per operation: on a loaded 2-core machine each actor call costs about
a millisecond of CPU between the driver's core worker, gRPC and the actor's thread pool (three
per attempt: open, exec, close), which made the cluster path ~1.8× the local one. Ray still
places, starts and names the workers, tells the driver where each one's channel listens (and its
secret), and carries cancels; the channel only carries the messages. No Ray and no acx objects
here: bytes in, bytes out (pure trio).

Frames: ``length (4 bytes, big endian) | request id (8 bytes) | payload``; the first frame of a
connection is the worker's secret (32 random bytes, learned through Ray), without which the worker
closes the connection. Keepalive probes make a peer that vanished without closing (a machine
powered off) fail the channel in about 30 s.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import os
import secrets
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = ["Channel", "ChannelClosed", "ChannelServer"]

log = logging.getLogger("acx.cluster")

_HEAD = struct.Struct(">IQ")
#: A frame larger than this is a protocol error (uploads travel as one tar: generous).
MAX_FRAME = 1 << 30
# Before a connection has shown the secret it may send one small frame, within a short time: an
# unauthenticated peer on the node's address must not make the worker buffer a gigabyte or hold a
# task open forever.
AUTH_FRAME_MAX = 8 + 64
AUTH_TIMEOUT_SECONDS = 10.0


class ChannelClosed(Exception):
    """The connection to the worker ended (its process died, or the peer vanished)."""


def _keepalive(stream: trio.SocketStream) -> None:
    sock = stream.socket
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 4)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)


def frame(rid: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload) + 8, rid) + payload


async def send_frame(stream: trio.SocketStream, lock: trio.Lock, data: bytes) -> None:
    """Write ``data`` whole, frames never interleaved. Written at once when the socket takes it
    (no await): ``send_all`` would first yield to every other ready task of the loop, delaying the
    call (or reply) behind their work; what the socket does not take goes through ``send_all``
    under ``lock``. Shielded: a frame half-written by a cancelled caller would corrupt the stream."""
    with trio.CancelScope(shield=True):
        if lock.locked():
            async with lock:
                await stream.send_all(data)
            return
        lock.acquire_nowait()
        try:
            try:
                sent = os.write(stream.socket.fileno(), data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from None
            if sent < len(data):
                await stream.send_all(memoryview(data)[sent:])
        finally:
            lock.release()


class FrameReader:
    """Frames out of a byte stream; :meth:`next` is cancellation-safe (bytes read stay buffered)."""

    def __init__(self, stream: trio.abc.ReceiveStream, max_frame: int = MAX_FRAME) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.max_frame = max_frame

    def _take(self) -> tuple[int, bytes] | None:
        if len(self.buf) < 4:
            return None
        (size,) = struct.unpack_from(">I", self.buf)
        if size < 8 or size > self.max_frame:
            raise ChannelClosed(f"bad frame length {size}")
        if len(self.buf) < 4 + size:
            return None
        (rid,) = struct.unpack_from(">Q", self.buf, 4)
        payload = bytes(self.buf[12 : 4 + size])
        del self.buf[: 4 + size]
        return rid, payload

    async def next(self) -> tuple[int, bytes]:
        while True:
            got = self._take()
            if got is not None:
                return got
            data = await self.stream.receive_some(1 << 16)
            if not data:
                raise ChannelClosed("connection closed by the peer")
            self.buf += data


class ChannelServer:
    """The worker side: listens on the node's address; every call frame is answered by
    ``handle(payload)`` in its own task (calls run concurrently, replies go back as they finish)."""

    def __init__(self, handle: Callable[[bytes], Awaitable[bytes]]) -> None:
        self.handle = handle
        self.secret = secrets.token_bytes(32)
        self.address: tuple[str, int] | None = None

    async def start(self, host: str) -> tuple[str, int, bytes]:
        """Listen (once; later calls return the same address) and serve in a system task."""
        if self.address is None:
            listeners = await trio.open_tcp_listeners(0, host=host)
            sockname = listeners[0].socket.getsockname()
            self.address = (sockname[0], sockname[1])
            trio.lowlevel.spawn_system_task(trio.serve_listeners, self._serve, listeners)
        return (*self.address, self.secret)

    async def _serve(self, stream: trio.SocketStream) -> None:
        # Nothing may escape: an exception here would end the worker's whole trio loop.
        try:
            _keepalive(stream)
            reader = FrameReader(stream, max_frame=AUTH_FRAME_MAX)
            secret = b""
            with trio.move_on_after(AUTH_TIMEOUT_SECONDS):
                _, secret = await reader.next()
            if not hmac.compare_digest(secret, self.secret):
                log.warning("channel: a connection without the worker's secret was closed")
                return
            reader.max_frame = MAX_FRAME
            async with trio.open_nursery() as nursery:
                await self._calls(stream, reader, nursery)
        except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:
            log.exception("channel: connection ended by an error")
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _calls(self, stream: trio.SocketStream, reader: FrameReader, nursery: trio.Nursery) -> None:
        lock = trio.Lock()
        try:
            while True:
                rid, payload = await reader.next()
                nursery.start_soon(self._answer, stream, lock, rid, payload)
        except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the driver went away; calls in flight finish on their own (like Ray's)

    async def _answer(self, stream: trio.SocketStream, lock: trio.Lock, rid: int, payload: bytes) -> None:
        try:
            reply = await self.handle(payload)
            await send_frame(stream, lock, frame(rid, reply))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # nobody to answer any more: the driver's side counts it as lost
        except Exception:
            log.exception("channel: a call ended by an error")


class Channel:
    """The driver side for one node, bound to the trio run that opened it (a reader system task of
    that run routes replies to their callers)."""

    def __init__(self, host: str, port: int, secret: bytes) -> None:
        self.host, self.port, self.secret = host, port, secret
        self.token = trio.lowlevel.current_trio_token()
        self._stream: trio.SocketStream | None = None
        self._connecting = trio.Lock()
        self._sending = trio.Lock()
        self._ids = itertools.count(1)
        #: request id → [event, reply or exception]
        self._waiting: dict[int, list[Any]] = {}
        #: request id → counter of a reply its caller no longer waits for
        self._abandoned: dict[int, Callable[[], None]] = {}
        self.closed: ChannelClosed | None = None

    def usable(self) -> bool:
        return self.closed is None and self.token is trio.lowlevel.current_trio_token()

    async def _connect(self) -> trio.SocketStream:
        async with self._connecting:
            if self._stream is None:
                try:
                    stream = await trio.open_tcp_stream(self.host, self.port)
                except OSError as exc:
                    raise ChannelClosed(f"cannot connect to {self.host}:{self.port}: {exc}") from None
                _keepalive(stream)
                await stream.send_all(frame(0, self.secret))
                self._stream = stream
                trio.lowlevel.spawn_system_task(self._read, stream)
            return self._stream

    async def _read(self, stream: trio.SocketStream) -> None:
        reader = FrameReader(stream)
        try:
            while True:
                rid, payload = await reader.next()
                slot = self._waiting.pop(rid, None)
                if slot is not None:
                    slot[1] = payload
                    slot[0].set()
                elif (late := self._abandoned.pop(rid, None)) is not None:
                    late()
        except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(exc if isinstance(exc, ChannelClosed) else ChannelClosed(str(exc)))
        except Exception as exc:  # never out of a system task (it would end the run)
            log.exception("channel: reader ended by an error")
            self._fail(ChannelClosed(f"{type(exc).__name__}: {exc}"))
        finally:  # also at the end of the run (system tasks are cancelled then)
            self._fail(ChannelClosed("channel closed"))
            with trio.CancelScope(shield=True):
                await stream.aclose()

    def _fail(self, exc: ChannelClosed) -> None:
        if self.closed is None:
            self.closed = exc
        for slot in self._waiting.values():
            slot[1] = exc
            slot[0].set()
        self._waiting.clear()
        self._abandoned.clear()

    async def call(self, payload: bytes, on_late: Callable[[], None]) -> bytes:
        """Send one call and wait for its reply. Raises :class:`ChannelClosed` when the connection
        ends first; a caller cancelled meanwhile hands the reply to ``on_late`` when it comes."""
        if self.closed is not None:
            raise self.closed
        stream = await self._connect()
        rid = next(self._ids)
        slot: list[Any] = [trio.Event(), None]
        self._waiting[rid] = slot
        try:
            await send_frame(stream, self._sending, frame(rid, payload))
            await slot[0].wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._waiting.pop(rid, None)
            self._fail(ChannelClosed(str(exc)))
            raise ChannelClosed(str(exc)) from None
        except BaseException:
            if self._waiting.pop(rid, None) is not None and self.closed is None:
                self._abandoned[rid] = on_late
            raise
        if isinstance(slot[1], ChannelClosed):
            raise slot[1]
        return slot[1]  # type: ignore[no-any-return]
