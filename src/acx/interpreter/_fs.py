"""Atomic file writes (temp file + fsync + rename) and small path helpers for the results store."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import outcome

__all__ = [
    "IOWorker",
    "append_line",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "encode_json",
    "task_dir_name",
]

T = TypeVar("T")


def atomic_write_bytes(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Readers see the old file or the new one, never a torn write."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileNotFoundError:  # create parents only when missing (saves a syscall per write)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)  # mkstemp creates 0600; results are shareable files
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: Path, text: str, *, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def atomic_write_json(path: Path, obj: Any, *, fsync: bool = True) -> None:
    atomic_write_bytes(path, encode_json(obj), fsync=fsync)


def encode_json(obj: Any) -> bytes:
    """Indented JSON (msgspec: an order of magnitude faster than ``json.dumps(indent=...)``)."""
    import msgspec

    return msgspec.json.format(msgspec.json.encode(obj, enc_hook=str), indent=2) + b"\n"


def append_line(path: Path, line: str, *, fsync: bool = True) -> None:
    """Append one line to a journal; fsync so a record survives a SIGKILL that follows."""
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())


_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]")


def safe_name(text: str, limit: int = 80) -> str:
    return _UNSAFE.sub("_", text)[:limit] or "_"


def task_dir_name(task_id: str) -> str:
    """``<readable id ≤ 80 chars>--<sha256(task_id)[:16]>``: unique, path-safe, stable."""
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:16]
    return f"{safe_name(task_id)}--{digest}"


class IOWorker:
    """Runs the results store's blocking file operations in a few background threads, in batches.

    Creating, renaming and deleting files costs 0.1–1 ms each on a busy disk, mostly spent
    waiting; done on the trio thread it stalls every task. Operations are queued and an idle worker
    runs everything queued so far as one batch, in order (a task awaits each of its writes, so its
    own writes land in the order it issued them). Durability is group-committed: if any operation of a batch asked for it, the
    batch ends with one ``syncfs`` of the results filesystem (instead of an ``fsync`` per file),
    and only then are its waiters woken — so a caller proceeds to its side effect (opening a
    sandbox, reporting a task done) only after its writes are durable. Waiters are woken with
    one callback per batch. A waiting task cannot be cancelled out of an operation in flight
    (they are short); the cancellation is delivered right after.

    ``threads=False`` runs operations inline (tests on trio's MockClock, where a real thread
    would let virtual time jump).
    """

    def __init__(self, root: Path, *, threads: bool = True, workers: int = 1) -> None:
        self.root = root
        self.threads = threads
        self.workers = workers
        self.rounds = 0  #: completed group commits (syncfs calls)
        self._queue: list[_Op] = []
        self._cv = threading.Condition()
        self._threads: list[threading.Thread] = []

    # ---- the trio side -------------------------------------------------------------------------
    async def run(self, fn: Callable[..., T], *args: Any, durable: bool = False, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` in the worker; with ``durable``, return after its group commit."""
        import trio

        if not self.threads:
            out = fn(*args, **kwargs)
            if durable:
                self._syncfs()
                self.rounds += 1
            await trio.lowlevel.checkpoint()
            return out
        op = _Op(fn, args, kwargs, durable, trio.lowlevel.current_task(), trio.lowlevel.current_trio_token())
        self._put(op)
        result: T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        return result

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Fire and forget (deleting a released session's record): runs with the next batch."""
        if not self.threads:
            fn(*args)
            return
        self._put(_Op(fn, args, {}, False, None, None))

    def _put(self, op: _Op) -> None:
        with self._cv:
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._loop, name=f"acx-io-{i}", daemon=True) for i in range(self.workers)
                ]
                for thread in self._threads:
                    thread.start()
            self._queue.append(op)
            self._cv.notify()

    def close(self) -> None:
        """Run what is queued, then stop the threads (end of the run)."""
        with self._cv:
            threads, self._threads = self._threads, []
            self._queue.extend(_STOP for _ in threads)
            self._cv.notify_all()
        for thread in threads:
            thread.join()

    # ---- the worker thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                if self._queue[0] is _STOP:  # queued after everything else: the queue is drained
                    self._queue.pop(0)
                    return
                # Everything queued so far is one batch; an idle sibling takes what arrives meanwhile
                # (the operations mostly wait on the disk, so a few threads overlap their waits).
                cut = self._queue.index(_STOP) if _STOP in self._queue else len(self._queue)
                batch, self._queue = self._queue[:cut], self._queue[cut:]
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Op]) -> None:
        durable = False
        for op in batch:
            try:
                op.result = outcome.Value(op.fn(*op.args, **op.kwargs))
            except BaseException as exc:  # handed to the waiting task, which re-raises it
                op.result = outcome.Error(exc)
            durable = durable or (op.durable and isinstance(op.result, outcome.Value))
        if durable:
            try:
                self._syncfs()
                self.rounds += 1
            except OSError as exc:
                for op in batch:
                    if op.durable:
                        op.result = outcome.Error(exc)
        waiting = [op for op in batch if op.task is not None]
        if waiting:
            token = waiting[0].token
            try:
                token.run_sync_soon(_wake, waiting)
            except Exception:  # the trio run is gone (it crashed): nobody waits any more
                pass

    def _syncfs(self) -> None:
        fd = os.open(self.root, os.O_RDONLY)
        try:
            if _SYNCFS is not None and _SYNCFS(fd) == 0:
                return
            os.sync()
        finally:
            os.close(fd)


class _Op:
    __slots__ = ("args", "durable", "fn", "kwargs", "result", "task", "token")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], durable: bool, task: Any, token: Any
    ) -> None:
        self.fn, self.args, self.kwargs, self.durable = fn, args, kwargs, durable
        self.task, self.token = task, token
        self.result: Any = None


_STOP = _Op(lambda: None, (), {}, False, None, None)


def _wake(ops: list[_Op]) -> None:
    import trio

    for op in ops:
        trio.lowlevel.reschedule(op.task, op.result)


def _load_syncfs() -> Any:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
        fn.argtypes = [ctypes.c_int]
        return fn
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs()
