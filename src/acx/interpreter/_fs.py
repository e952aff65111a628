"""Atomic file writes (temp file + fsync + rename) and small path helpers for the results store."""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "GroupCommit",
    "append_line",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "encode_json",
    "task_dir_name",
]


_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_tmp_counter = itertools.count()


def atomic_write_bytes(path: Path | str, data: bytes, *, fsync: bool = True) -> None:
    """Readers see the old file or the new one, never a torn write (temp file + rename).

    The temp name is pid + counter, created with ``O_EXCL``: cheaper than ``mkstemp``'s random
    names; a leftover of a killed process with a recycled pid is skipped, never overwritten.
    """
    path = os.fspath(path)
    parent, name = os.path.split(path)
    fd, tmp = _open_temp(parent, name)
    try:
        try:
            os.fchmod(fd, 0o644)  # whatever the umask: results are shareable files
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


def _open_temp(parent: str, name: str) -> tuple[int, str]:
    for _ in range(100):
        tmp = os.path.join(parent, f".{name}.{os.getpid()}.{next(_tmp_counter)}.tmp")
        try:
            return os.open(tmp, _TMP_FLAGS, 0o644), tmp
        except FileNotFoundError:  # create parents only when missing (saves a syscall per write)
            os.makedirs(parent, exist_ok=True)
            return os.open(tmp, _TMP_FLAGS, 0o644), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {os.path.join(parent, name)}")


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


@functools.lru_cache(maxsize=8192)  # asked for several times per task (running, attempt, final dirs)
def task_dir_name(task_id: str) -> str:
    """``<readable id ≤ 80 chars>--<sha256(task_id)[:16]>``: unique, path-safe, stable."""
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:16]
    return f"{safe_name(task_id)}--{digest}"


class GroupCommit:
    """Makes recent writes durable with one ``syncfs`` per round, shared by every waiter.

    A per-file ``fsync`` costs a journal commit each (≈1 ms even in parallel); the interpreter
    writes several small files per task, so durability is batched: writers rename their temp
    files into place (atomic), then ``await commit.sync()``. The first waiter runs a round
    (``syncfs`` on the results filesystem in a worker thread, shielded from cancellation) and
    wakes every waiter of the round; writes that arrive meanwhile go into the next round. A
    caller proceeds to its side effect (opening a sandbox, reporting a task) only after its
    round completed, so the journal-before-side-effect rule holds.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._pending: list[Any] = []
        self._busy = False
        self.rounds = 0
        self.threads = True
        #: Files to delete with the next round (deleting is as slow as writing on a busy disk).
        self.unlinks: list[Path] = []

    def flush_unlinks(self) -> None:
        todo, self.unlinks = self.unlinks, []
        _unlink_all(todo)

    def _round(self, unlinks: list[Path]) -> None:
        _unlink_all(unlinks)
        self._syncfs()

    def _syncfs(self) -> None:
        fd = os.open(self.root, os.O_RDONLY)
        try:
            if _SYNCFS is not None and _SYNCFS(fd) == 0:
                return
            os.sync()
        finally:
            os.close(fd)

    async def sync(self) -> None:
        import trio

        done = trio.Event()
        self._pending.append(done)
        if self._busy:
            await done.wait()
            return
        self._busy = True
        try:
            with trio.CancelScope(shield=True):
                while self._pending:
                    batch, self._pending = self._pending, []
                    unlinks, self.unlinks = self.unlinks, []
                    if self.threads:
                        await trio.to_thread.run_sync(self._round, unlinks)
                    else:
                        self._round(unlinks)
                        await trio.lowlevel.checkpoint()
                    self.rounds += 1
                    for event in batch:
                        event.set()
        finally:
            self._busy = False


def _unlink_all(paths: list[Path]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


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
