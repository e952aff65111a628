"""The content-addressed model-call cache (issue 26): the gateway's store of upstream answers.

The key is the SHA-256 of a canonical form of the request *as it reaches the upstream*: the
protocol and the body the gateway sends (model, messages, tools, sampling parameters, ``stream``),
with sorted keys and compact separators. Headers — the real key, the session token, anything that
varies per attempt — are never part of it, and neither is the endpoint's URL (a run against the
same model behind another address hits the same entries).

The value is the answer's body exactly as the agent got it (already scrubbed of the role's key,
and of every other secret of the run): a JSON body, or a streamed answer's complete event stream,
re-streamed as the same bytes so an SDK client assembles the same message.

The store is a directory shared across runs, one file per entry (``<key[:2]>/<key>.json``):

- **atomic**: an entry is written to a temporary file in its directory, fsynced, then linked to its
  name; ``link`` fails when the name exists, so of two writers of one key the first keeps its
  answer and the second drops its own. A killed writer leaves at most a ``.tmp`` file, which no
  reader takes for an entry and :meth:`CallCache.prune` removes.
- **bounded**: ``max_bytes``; past it the least recently used entries (mtime, touched on every hit
  — atime is off on many mounts) are evicted down to 90 %.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets as _random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

__all__ = [
    "CACHE_MODES",
    "DEFAULT_MAX_BYTES",
    "CacheMode",
    "CacheStats",
    "CachedAnswer",
    "CallCache",
    "cache_key",
    "canonical_request",
]

CacheMode = Literal["off", "read", "write", "read-write", "replay"]
CACHE_MODES: tuple[CacheMode, ...] = ("off", "read", "write", "read-write", "replay")

#: ``model.cache_max_bytes`` when unset: 1 GiB.
DEFAULT_MAX_BYTES = 1 << 30

SCHEMA = "acx.model_cache.v1"

#: A temporary file older than this belongs to a writer that died (prune removes it).
STALE_TMP_SECONDS = 3600.0

#: A hit refreshes its entry's mtime (the LRU clock) when it is older than this.
TOUCH_SECONDS = 60.0

#: Entries a process keeps in memory after reading or writing them (see CallCache.get).
MEMORY_BYTES = 64 << 20


def reads(mode: str) -> bool:
    return mode in ("read", "read-write", "replay")


def writes(mode: str) -> bool:
    return mode in ("write", "read-write")


def canonical_request(protocol: str, body: Any) -> bytes:
    """The request's canonical bytes: protocol and body as JSON with sorted keys, compact, UTF-8
    (msgspec: a tenth of ``json.dumps(sort_keys=True)``'s time, on the path of every call)."""
    return msgspec.json.encode({"protocol": protocol, "body": body}, order="sorted")


def cache_key(protocol: str, body: Any) -> str:
    return hashlib.sha256(canonical_request(protocol, body)).hexdigest()


@dataclass(frozen=True)
class CachedAnswer:
    """One entry: the upstream's answer as the agent got it."""

    key: str
    protocol: str
    model: str
    stream: bool
    status: int
    body: bytes


class CachedResponse:
    """A streamed answer read from the cache, in the shape :func:`acx.models.chunks` reads."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def pieces(self) -> AsyncIterator[bytes]:
        # One piece: the events are the recorded ones; how the upstream cut them into reads
        # is not part of the answer.
        if self._body:
            yield self._body

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    tmp_files: int
    oldest: float | None
    newest: float | None
    by_model: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "bytes": self.bytes,
            "tmp_files": self.tmp_files,
            "oldest_mtime": self.oldest,
            "newest_mtime": self.newest,
            "by_model": dict(sorted(self.by_model.items())),
        }


class CallCache:
    """A cache directory. Methods do blocking file I/O: the gateway calls them in worker threads
    (or inline for small reads)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        scrub: Callable[[str], str] | None = None,
        memory_bytes: int = MEMORY_BYTES,
    ) -> None:
        self.root = Path(root)
        self._root = os.fspath(root)
        #: Entries this process read or wrote, newest last (see :meth:`get`), and their bytes.
        self.memory_bytes = memory_bytes
        self._memory: OrderedDict[str, tuple[CachedAnswer, float]] = OrderedDict()
        self._held_bytes = 0
        # put() runs in worker threads while get() runs on the event loop.
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        #: The run's secret scrubber (every secret the run resolved), applied to each value stored.
        self.scrub = scrub
        #: Bytes this process believes the store holds (scanned at the first write, then counted).
        self._size: int | None = None

    # ---- entries ---------------------------------------------------------------------------------
    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def _name(self, key: str) -> str:
        # Plain strings and os calls: a hit's file work is on the trio thread (see get).
        return f"{self._root}/{key[:2]}/{key}.json"

    def get(self, key: str, *, max_bytes: int | None = None) -> CachedAnswer | int | None:
        """The entry of ``key``, or ``None`` (missing, or unreadable: a damaged entry is a miss and
        is removed, never an answer). With ``max_bytes``, an entry larger than that is not read:
        its size is returned instead (the gateway then reads it in a worker thread).

        Entries this process read or wrote are answered from memory (``memory_bytes`` of them,
        least recently used dropped first): an entry never changes once written, and on a busy
        disk even a cached file's open and read stalled the gateway's event loop for every call."""
        held = self._recall(key)
        if held is not None:
            return held
        name = self._name(key)
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if max_bytes is not None and st.st_size >= max_bytes:
                return st.st_size
            data = _read_all(fd, st.st_size)
        except OSError:
            return None
        finally:
            os.close(fd)
        entry = _decode(key, data)
        if entry is None:
            with contextlib.suppress(OSError):
                os.unlink(name)
            return None
        now = time.time()
        if now - st.st_mtime > TOUCH_SECONDS:
            self._touch(key)
        self._remember(entry, now)
        return entry

    def _touch(self, key: str) -> None:
        # Least recently *used*: a hit makes the entry young again on disk (at most once a minute
        # per entry: the eviction order needs no finer clock, and a hot entry saves the syscall).
        with contextlib.suppress(OSError):
            os.utime(self._name(key))

    def _recall(self, key: str) -> CachedAnswer | None:
        with self._lock:
            held = self._memory.get(key)
            if held is None:
                return None
            self._memory.move_to_end(key)
            entry, touched = held
            now = time.time()
            stale = now - touched > TOUCH_SECONDS
            if stale:
                self._memory[key] = (entry, now)
        if stale:
            self._touch(key)
        return entry

    def _remember(self, entry: CachedAnswer, now: float) -> None:
        size = len(entry.body)
        if size > self.memory_bytes // 8:  # a few big answers would push out every small one
            return
        with self._lock:
            if entry.key in self._memory:
                return
            self._memory[entry.key] = (entry, now)
            self._held_bytes += size
            while self._held_bytes > self.memory_bytes:
                _, (old, _) = self._memory.popitem(last=False)
                self._held_bytes -= len(old.body)

    def put(self, answer: CachedAnswer) -> bool:
        """Stores ``answer`` unless its key is there already (the first writer's answer is kept);
        True when this call wrote it. The value is scrubbed of the run's secrets first."""
        text = answer.body.decode("utf-8", "replace") if self.scrub is not None else None
        body = answer.body
        if text is not None and self.scrub is not None:
            cleaned = self.scrub(text)
            if cleaned != text:
                body = cleaned.encode()
        data = _encode(answer, body)
        path = self.path(answer.key)
        if path.exists():
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{answer.key}.{os.getpid()}.{_random.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)  # the name must never point at a file a crash left empty
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # fails if another writer got there first: its answer stays
            except FileExistsError:
                return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._remember(
            CachedAnswer(answer.key, answer.protocol, answer.model, answer.stream, answer.status, body), time.time()
        )
        self._grew(len(data))
        return True

    def _grew(self, n: int) -> None:
        if self._size is None:
            self._size = self.stats().bytes
        else:
            self._size += n
        if self._size > self.max_bytes:
            self._size = self.evict(int(self.max_bytes * 0.9))

    # ---- maintenance -----------------------------------------------------------------------------
    def _entries(self) -> list[tuple[Path, os.stat_result]]:
        out: list[tuple[Path, os.stat_result]] = []
        if not self.root.is_dir():
            return out
        for sub in self.root.iterdir():
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            for p in sub.iterdir():
                if p.suffix == ".json" and not p.name.startswith("."):
                    with contextlib.suppress(OSError):
                        out.append((p, p.stat()))
        return out

    def _tmp_files(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for sub in self.root.iterdir() if sub.is_dir() for p in sub.glob(".*.tmp")]

    def stats(self) -> CacheStats:
        entries = self._entries()
        by_model: dict[str, int] = {}
        for p, _ in entries:
            model = _model_of(p)
            by_model[model] = by_model.get(model, 0) + 1
        times = [st.st_mtime for _, st in entries]
        return CacheStats(
            entries=len(entries),
            bytes=sum(st.st_size for _, st in entries),
            tmp_files=len(self._tmp_files()),
            oldest=min(times) if times else None,
            newest=max(times) if times else None,
            by_model=by_model,
        )

    def evict(self, target_bytes: int) -> int:
        """Removes the least recently used entries until at most ``target_bytes`` remain; the
        bytes left."""
        entries = sorted(self._entries(), key=lambda e: e[1].st_mtime)
        total = sum(st.st_size for _, st in entries)
        for p, st in entries:
            if total <= target_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
            total -= st.st_size
            self._drop(p.stem)  # evicted here: not answered from memory either
        return total

    def _drop(self, key: str) -> None:
        with self._lock:
            held = self._memory.pop(key, None)
            if held is not None:
                self._held_bytes -= len(held[0].body)

    def prune(self, *, max_bytes: int | None = None, older_than: float | None = None) -> tuple[int, int]:
        """Removes entries unused for ``older_than`` seconds, then the least recently used past
        ``max_bytes`` (default: the store's bound), and dead writers' temporary files.
        Returns (entries removed, bytes left)."""
        now = time.time()
        removed = 0
        for tmp in self._tmp_files():
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                    tmp.unlink()
        if older_than is not None:
            for p, st in self._entries():
                if now - st.st_mtime > older_than:
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()
                        removed += 1
                    self._drop(p.stem)
        before = len(self._entries())
        left = self.evict(self.max_bytes if max_bytes is None else max_bytes)
        removed += before - len(self._entries())
        return removed, left

    def clear(self) -> int:
        """Removes every entry and temporary file; the number of entries removed."""
        removed = 0
        for p, _ in self._entries():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed += 1
        for tmp in self._tmp_files():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._size = 0
        self._forget_all()
        return removed

    def _forget_all(self) -> None:
        with self._lock:
            self._memory.clear()
            self._held_bytes = 0


def _encode(answer: CachedAnswer, body: bytes) -> bytes:
    head = {
        "schema_version": SCHEMA,
        "key": answer.key,
        "protocol": answer.protocol,
        "model": answer.model,
        "stream": answer.stream,
        "status": answer.status,
        "stored_at": time.time(),
    }
    # One JSON header line, then the body's bytes as they were (no re-encoding of the answer).
    return json.dumps(head, separators=(",", ":")).encode() + b"\n" + body


def _read_all(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    while True:
        chunk = os.read(fd, max(size, 65536))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


def _decode(key: str, data: bytes) -> CachedAnswer | None:
    head_line, sep, body = data.partition(b"\n")
    if not sep:
        return None
    try:
        head = msgspec.json.decode(head_line)
    except msgspec.DecodeError:
        return None
    if not isinstance(head, dict) or head.get("schema_version") != SCHEMA or head.get("key") != key:
        return None
    return CachedAnswer(
        key=key,
        protocol=str(head.get("protocol")),
        model=str(head.get("model")),
        stream=bool(head.get("stream")),
        status=int(head.get("status") or 200),
        body=body,
    )


def _model_of(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            head = json.loads(fh.readline())
        return str(head.get("model"))
    except (OSError, ValueError, AttributeError):
        return "?"
