"""The worker side: one :class:`WorkerCore` per node, running a trio loop that holds that node's
drivers and sessions and answers protocol calls (no Ray here; :mod:`acx.cluster._ray` hosts it in
an actor)."""

from __future__ import annotations

import io
import logging
import os
import tarfile
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from acx.cluster import _protocol as P
from acx.drivers import Driver, Session, create_driver
from acx.errors import AcxUserError, CapabilityError, DriverError

__all__ = ["WorkerCore", "error_info", "pack_dir", "unpack_dir"]

log = logging.getLogger("acx.cluster")

#: How many recent replies a worker keeps for calls sent again (bounded memory).
REMEMBERED_REPLIES = 256


def pack_dir(path: str) -> bytes:
    """A directory's contents as an uncompressed tar (symlinks kept as links)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir(path)):
            tar.add(os.path.join(path, name), arcname=name)
    return buf.getvalue()


def unpack_dir(data: bytes, dest: str) -> None:
    """Extract a tar made by :func:`pack_dir`; members that would escape ``dest`` (absolute paths,
    ``..``, links out) are refused by tarfile's ``data`` filter."""
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="data")


def error_info(exc: BaseException) -> P.ErrorInfo:
    """An exception as it travels back (its kind decides what the driver side raises)."""
    if isinstance(exc, FileNotFoundError):
        return P.ErrorInfo(kind="file_not_found", message=str(exc.filename or exc))
    if isinstance(exc, CapabilityError):
        return P.ErrorInfo(kind="capability", message=exc.diagnostics[0].message, code=exc.code, help=exc.help)
    if isinstance(exc, AcxUserError):
        return P.ErrorInfo(kind="user", message=exc.diagnostics[0].message, code=exc.code, help=exc.help)
    if isinstance(exc, DriverError):
        return P.ErrorInfo(kind="driver", message=str(exc), code=exc.code, help=exc.fields.get("help"))
    if isinstance(exc, (ValueError, TypeError)):
        return P.ErrorInfo(kind="value", message=f"{type(exc).__name__}: {exc}")
    return P.ErrorInfo(kind="other", message=f"{type(exc).__name__}: {exc}")


class WorkerCore:
    """Drivers and open sessions of one node; :meth:`handle` answers one call (trio)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._drivers: dict[bytes, Driver] = {}
        self._sessions: dict[str, Session] = {}
        #: Notes about the worker itself, given with its provider's at Hello (e.g. its niceness).
        self.notes: list[str] = []
        self._inflight: dict[str, trio.CancelScope] = {}
        self._cancelled: set[str] = set()
        #: key → the reply of a recent call (or an event while it runs): a call sent again
        #: (``resent``: Ray's "temporarily unavailable", it may have run) gets that one reply, never
        #: a second run. Only a resent call looks here (keys restart with a new driver process).
        self._replies: OrderedDict[str, bytes | trio.Event] = OrderedDict()

    def _driver(self, ref: P.DriverRef) -> Driver:
        key = msgspec.json.encode(ref, order="sorted")
        driver = self._drivers.get(key)
        if driver is None:
            driver = self._drivers[key] = create_driver(ref.env_id, dict(ref.params))
        return driver

    def _session(self, call: P.Call) -> Session:
        session = self._sessions.get(call.session_id or "")
        if session is None:
            raise DriverError(f"session {call.session_id} is not open on node {self.node}", code="sandbox_stopped")
        return session

    async def handle(self, data: bytes) -> bytes:
        """One encoded call → one encoded reply (errors travel in the reply, never raised)."""
        try:
            call = P.decode_call(data)
        except P.ProtocolError as exc:
            return P.encode(P.Reply(key="?", node=self.node, error=P.ErrorInfo(kind="protocol", message=str(exc))))
        if isinstance(call.op, P.Cancel):
            scope = self._inflight.get(call.op.target)
            if scope is not None:
                scope.cancel()
            else:
                self._cancelled.add(call.op.target)  # arrived before its call: cancel on arrival
            return P.encode(P.Reply(key=call.key, node=self.node))
        seen = self._replies.get(call.key) if call.resent else None
        if seen is not None:
            if isinstance(seen, trio.Event):
                await seen.wait()
                seen = self._replies.get(call.key)
            if isinstance(seen, bytes):
                return seen
        finished = trio.Event()
        self._replies[call.key] = finished
        try:
            reply = await self._run(call)
        except BaseException:
            self._replies.pop(call.key, None)
            raise
        finally:
            finished.set()
        self._replies[call.key] = reply
        while len(self._replies) > REMEMBERED_REPLIES:
            self._replies.popitem(last=False)
        return reply

    async def _run(self, call: P.Call) -> bytes:
        with trio.CancelScope() as scope:
            self._inflight[call.key] = scope
            if call.key in self._cancelled:
                self._cancelled.discard(call.key)
                scope.cancel()
            try:
                value = await self._dispatch(call)
                return P.encode(P.Reply(key=call.key, node=self.node, value=value))
            except Exception as exc:
                return P.encode(P.Reply(key=call.key, node=self.node, error=error_info(exc)))
            finally:
                self._inflight.pop(call.key, None)
        return P.encode(
            P.Reply(key=call.key, node=self.node, error=P.ErrorInfo(kind="cancelled", message="call cancelled"))
        )

    async def _dispatch(self, call: P.Call) -> Any:
        op = call.op
        handler: Callable[[P.Call, Any], Any] = getattr(self, f"_op_{type(op).__name__}")
        return await handler(call, op)

    # ---- driver operations ---------------------------------------------------------------------
    async def _op_Hello(self, call: P.Call, op: P.Hello) -> list[str]:
        return [*self.notes, *await self._driver(call.driver).prepare()]

    async def _op_MissingImages(self, call: P.Call, op: P.MissingImages) -> list[str]:
        return list(await self._driver(call.driver).missing_images(list(op.images)))

    async def _op_Open(self, call: P.Call, op: P.Open) -> P.OpenInfo:
        session = await self._driver(call.driver).open(op.request)
        self._sessions[session.id] = session
        return P.OpenInfo(
            workdir=session.workdir,
            public_env=dict(session.public_env),
            open_notes=[str(n) for n in session.open_notes],
        )

    async def _op_ListSessions(self, call: P.Call, op: P.ListSessions) -> list[Any]:
        return list(await self._driver(call.driver).list_sessions(op.labels))

    async def _op_CloseSession(self, call: P.Call, op: P.CloseSession) -> None:
        session = self._sessions.pop(op.session_id, None)
        if session is not None:
            with trio.CancelScope(shield=True):
                await session.close()
            return
        await self._driver(call.driver).close_session(op.session_id)

    async def _op_EndRun(self, call: P.Call, op: P.EndRun) -> None:
        await self._driver(call.driver).end_run(op.session_prefix, frozenset(op.keep))

    # ---- session operations --------------------------------------------------------------------
    async def _op_Exec(self, call: P.Call, op: P.Exec) -> Any:
        # The driver side already applied the session's env precedence (V2): the merged env goes
        # straight to the provider's hook, under the user the caller scoped (Session.user_scope).
        session = self._session(call)
        if op.user is not None and not session.supports_exec_user:
            raise DriverError(
                f"session {session.id} cannot run commands as user {op.user!r}", code="exec_user_unsupported"
            )
        with session.user_scope(op.user):
            return await session._exec(
                list(op.argv),
                cwd=op.cwd,
                env=dict(op.env),
                timeout=op.timeout,
                stdin=op.stdin,
                max_output_bytes=op.max_output_bytes,
            )

    async def _op_WriteBytes(self, call: P.Call, op: P.WriteBytes) -> None:
        await self._session(call).write_bytes(op.path, op.data, mode=op.mode)

    async def _op_ReadBytes(self, call: P.Call, op: P.ReadBytes) -> bytes:
        return await self._session(call).read_bytes(op.path, max_bytes=op.max_bytes)

    async def _op_IsFile(self, call: P.Call, op: P.IsFile) -> bool:
        return await self._session(call).is_file(op.path)

    async def _op_IsDir(self, call: P.Call, op: P.IsDir) -> bool:
        return await self._session(call).is_dir(op.path)

    async def _op_UploadDir(self, call: P.Call, op: P.UploadDir) -> None:
        session = self._session(call)
        with tempfile.TemporaryDirectory(prefix="acx-up-") as tmp:
            await trio.to_thread.run_sync(unpack_dir, op.tar, tmp)
            await session.upload_dir(tmp, op.remote_dir)

    async def _op_DownloadDir(self, call: P.Call, op: P.DownloadDir) -> bytes:
        session = self._session(call)
        with tempfile.TemporaryDirectory(prefix="acx-down-") as tmp:
            await session.download_dir(op.remote_dir, tmp)
            return await trio.to_thread.run_sync(pack_dir, tmp)

    async def _op_SetPolicy(self, call: P.Call, op: P.SetPolicy) -> None:
        await self._session(call).set_network_policy(op.policy)

    async def _op_Endpoint(self, call: P.Call, op: P.Endpoint) -> str:
        return await self._session(call).endpoint(op.port)

    async def _op_KillStray(self, call: P.Call, op: P.KillStray) -> None:
        await self._session(call).kill_stray_processes()

    async def _op_Close(self, call: P.Call, op: P.Close) -> None:
        session = self._sessions.pop(call.session_id or "", None)
        if session is not None:
            with trio.CancelScope(shield=True):
                await session.close()


class TrioThread:
    """A trio loop in a daemon thread; :meth:`call` runs a coroutine function in it from any other
    thread (what a threaded Ray actor's methods do)."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        ready = threading.Event()

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            ready.set()
            await trio.sleep_forever()

        threading.Thread(target=trio.run, args=(main,), name="acx-worker-trio", daemon=True).start()
        ready.wait()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self._token)
