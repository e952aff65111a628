"""Atomic file writes (temp file + fsync + rename) and small path helpers for the results store."""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import itertools
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "GroupCommit",
    "QueuedOp",
    "ResultsDiskFull",
    "append_line",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "disk_full_error",
    "encode_json",
    "encode_scrubbed_json",
    "task_dir_name",
    "write_new_bytes",
]


#: errno values that mean "the results filesystem has no room" (space or quota).
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_full_error(exc: BaseException | None) -> OSError | None:
    """The ENOSPC/EDQUOT ``OSError`` behind ``exc`` (itself, a cause or context, a group member)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL:
            return e
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo += [e.__cause__, e.__context__]
    return None


class ResultsDiskFull(BaseException):
    """The results filesystem is full: the run stops cleanly (issue 11 item 11).

    A ``BaseException`` on purpose, like trio's ``Cancelled``: the ``except Exception`` handlers
    that turn a component's failure into a task issue let it through, so a full disk never becomes
    a recorded task result (FATAL, or an artifact error) that a resume would keep. Cleanup in
    ``finally`` blocks and shielded scopes still runs: sandboxes are released.
    """

    def __init__(self, path: str, error: OSError | None = None) -> None:
        self.path = os.path.abspath(path)
        self.strerror = (error.strerror if error is not None else None) or "No space left on device"
        super().__init__(f"the results disk is full: cannot write {self.path}: {self.strerror}")


_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_tmp_counter = itertools.count()


#: Files that hold what an agent or a verifier produced (it may quote a secret the scrubber could
#: not know, e.g. one shorter than its minimum): owner-only, like a saved plan (V1).
PRIVATE = 0o600


def atomic_write_bytes(path: Path | str, data: bytes, *, fsync: bool = True, mode: int = 0o644) -> None:
    """Readers see the old file or the new one, never a torn write (temp file + rename).

    The temp name is pid + counter, created with ``O_EXCL``: cheaper than ``mkstemp``'s random
    names; a leftover of a killed process with a recycled pid is skipped, never overwritten.
    ``mode``: the file's permissions whatever the umask (0o644: results are shareable files;
    :data:`PRIVATE` for attempt results).
    """
    path = os.fspath(path)
    parent, name = os.path.split(path)
    fd, tmp = _open_temp(parent, name, mode)
    try:
        try:
            if _UMASK & mode:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    """The process umask (files created with bits it hides are fchmodded on each write)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o777


_UMASK = _umask()


def write_new_bytes(path: str, data: bytes) -> None:
    """Create or truncate ``path`` and write ``data`` — for files inside a directory that is itself
    renamed into place afterwards (the directory rename is the atomic step)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        if _UMASK & 0o644:
            os.fchmod(fd, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _open_temp(parent: str, name: str, mode: int = 0o644) -> tuple[int, str]:
    for _ in range(100):
        tmp = os.path.join(parent, f".{name}.{os.getpid()}.{next(_tmp_counter)}.tmp")
        try:
            return os.open(tmp, _TMP_FLAGS, mode), tmp
        except FileNotFoundError:  # create parents only when missing (saves a syscall per write)
            os.makedirs(parent, exist_ok=True)
            return os.open(tmp, _TMP_FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {os.path.join(parent, name)}")


def atomic_write_text(path: Path, text: str, *, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def atomic_write_json(path: Path, obj: Any, *, fsync: bool = True, mode: int = 0o644) -> None:
    atomic_write_bytes(path, encode_json(obj), fsync=fsync, mode=mode)


def encode_json(obj: Any) -> bytes:
    """Indented JSON (msgspec: an order of magnitude faster than ``json.dumps(indent=...)``)."""
    import msgspec

    return msgspec.json.format(msgspec.json.encode(obj, enc_hook=str), indent=2) + b"\n"


def encode_scrubbed_json(obj: Any, scrub: Any) -> bytes:
    """``encode_json(scrub.tree(obj))`` (``scrub``: an ``acx.secrets.Scrubber``), byte for byte,
    with ``obj`` encoded once when it holds no secret — the common case: the encoding is searched
    for the secrets and formatted as it is, instead of encoded to search, then again to write (an
    attempt's transcript and trajectory are the largest files a run writes)."""
    import msgspec

    try:
        raw = msgspec.json.encode(obj, enc_hook=str)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return encode_json(scrub.tree(obj))  # raises as encode_json would
    if scrub.in_json(raw):
        return encode_json(scrub.tree(obj))
    return msgspec.json.format(raw, indent=2) + b"\n"


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


@functools.lru_cache(maxsize=8192)  # asked for several times per task (running, attempt, final dirs)
def task_dir_name(task_id: str) -> str:
    """``<readable id ≤ 80 chars>--<sha256(task_id)[:16]>``: unique, path-safe, stable."""
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:16]
    return f"{safe_name(task_id)}--{digest}"


class GroupCommit:
    """Runs queued store writes and makes them durable with one ``syncfs`` per round.

    A per-file ``fsync`` costs a journal commit each (≈1 ms even in parallel); the interpreter
    writes several small files per task, so durability is batched, and so is the writing: callers
    :meth:`queue` file operations (a result file, a task directory's final rename), then
    ``await commit.sync()``. The first waiter runs a round — in a worker thread, shielded from
    cancellation: every queued operation in order, then ``syncfs`` on the results filesystem — and
    wakes every waiter of the round; operations and waiters that arrive meanwhile go into the next
    round. A caller proceeds to its side effect (reporting a task done) only after its round
    completed, so the write-before-side-effect rule holds, and the trio thread spends its time on
    tasks, not on filesystem metadata.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._pending: list[Any] = []
        self._ops: list[QueuedOp] = []
        self._busy = False
        self.rounds = 0
        self.threads = True
        #: Seconds between the starts of two rounds. A round's syncfs stalls every metadata operation
        #: on the filesystem (session directories included) while it commits, so rounds are spaced;
        #: waiting for a round holds no concurrency slot, so the wait costs latency, not throughput.
        self.min_interval = 0.05
        self._last_round = -math.inf
        #: Called on the trio thread before each round (the store writes its buffered journal).
        self.before_round: Callable[[], None] | None = None

    def queue(self, fn: Callable[..., Any], *args: Any, requires: tuple[QueuedOp, ...] = ()) -> QueuedOp:
        """Run ``fn(*args)`` in the next round (skipped, with their error, if a ``requires`` op failed)."""
        op = QueuedOp(fn, args, requires)
        self._ops.append(op)
        return op

    def run_queued(self) -> None:
        """Run what is queued now, on this thread (the end of a run: no waiter is left to tell, so
        a failure is logged)."""
        ops, self._ops = self._ops, []
        _run_ops(ops)
        for op in ops:
            if op.error is not None:
                logging.getLogger("acx.interpreter").error(
                    "a results write failed at the end of the run: %s: %s", type(op.error).__name__, op.error
                )

    def _round(self, ops: list[QueuedOp]) -> None:
        _run_ops(ops)
        self._syncfs()

    def _syncfs(self) -> None:
        fd = os.open(self.root, os.O_RDONLY)
        try:
            if _SYNCFS is None:
                os.sync()
            elif _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                if err != errno.ENOSYS:
                    # EIO and friends: written data may be lost. os.sync() would report success.
                    raise OSError(err, f"syncfs on {self.root}: {os.strerror(err)}")
                os.sync()
        finally:
            os.close(fd)

    async def sync(self) -> None:
        """Wait until everything queued before this call is written and synced.

        Raises the error of a round that failed as a whole (the journal flush or the ``syncfs``):
        every waiter of that round gets it, none is left waiting.
        """
        import trio

        waiter = _Waiter()
        self._pending.append(waiter)
        if self._busy:
            await waiter.event.wait()
            waiter.check()
            return
        self._busy = True
        try:
            with trio.CancelScope(shield=True):
                while self._pending:
                    if self.threads:
                        await trio.sleep_until(self._last_round + self.min_interval)
                    self._last_round = trio.current_time()
                    batch, self._pending = self._pending, []
                    ops, self._ops = self._ops, []
                    error: Exception | None = None
                    try:
                        if self.before_round is not None:
                            self.before_round()
                        if self.threads:
                            await trio.to_thread.run_sync(self._round, ops)
                        else:
                            self._round(ops)
                            await trio.lowlevel.checkpoint()
                    except Exception as exc:
                        error = exc
                    self.rounds += 1
                    for each in batch:
                        each.error = error
                        each.event.set()
        finally:
            self._busy = False
        waiter.check()


class _Waiter:
    __slots__ = ("error", "event")

    def __init__(self) -> None:
        import trio

        self.event = trio.Event()
        self.error: Exception | None = None

    def check(self) -> None:
        if self.error is not None:
            raise self.error


class QueuedOp:
    """A file operation waiting for a group-commit round; ``error`` is set if it failed."""

    __slots__ = ("args", "error", "fn", "requires", "value")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], requires: tuple[QueuedOp, ...]) -> None:
        self.fn = fn
        self.args = args
        self.requires = requires
        self.error: BaseException | None = None
        self.value: Any = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _run_ops(ops: list[QueuedOp]) -> None:
    for op in ops:
        failed = next((r.error for r in op.requires if r.error is not None), None)
        if failed is not None:
            op.error = failed
            continue
        try:
            op.value = op.fn(*op.args)
        except Exception as exc:  # reported to the op's waiter, never lost in the worker thread
            op.error = exc


def _load_syncfs() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
        fn.argtypes = [ctypes.c_int]
        return fn
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs()
