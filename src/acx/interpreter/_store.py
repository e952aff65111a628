"""The results store: ``<results_dir>/[<run_name>/]<namespace>/<run_id>/``.

Layout (reference §4)::

    run_info.json  metrics.json  summary.md  progress.jsonl  progress.json  run.log
    journal.jsonl              append-only: run, attempt, task and session records
    .acx/invocation.json       how to recompile this run (resume), no secrets
    .env-resources/<session>.json   sandboxes that outlive their attempt (kept, or failed to release)
    details/running/<task-dir>/     unfinished tasks: attempt-N/result.json as attempts finish
    details/{normal,error,fatal}/<task-dir>/task.json + attempt-N/result.json

Every file is written atomically (temp + rename, made durable by a group-committed ``syncfs``); a
task moves from ``running`` to its final state directory with one ``rename``. What is on disk is the
truth on resume: an attempt is done iff its ``result.json`` exists; a task is done iff it sits in a
final state directory.

Journal lines are buffered and written with the next group commit (or within 0.5 s); a
``session_opened`` line is written through before the sandbox opens, so a killed run's sandboxes are
found on resume (opened and neither closed nor kept).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec

from acx.errors import AcxResultsError
from acx.interpreter._fs import (
    PRIVATE,
    GroupCommit,
    QueuedOp,
    ResultsDiskFull,
    atomic_write_bytes,
    atomic_write_json,
    disk_full_error,
    encode_scrubbed_json,
    safe_name,
    task_dir_name,
    write_new_bytes,
)
from acx.secrets import Scrubber

__all__ = ["FINAL_STATES", "RUN_INFO_SCHEMA", "RunStore", "find_reuse_source", "refuse_if_running"]

T = TypeVar("T")

RUN_INFO_SCHEMA = "acx.run_info.v1"
TASK_SCHEMA = "acx.task.v1"
RESULT_SCHEMA = "acx.attempt_result.v1"
FINAL_STATES = ("normal", "error", "fatal")
# msgspec: several times faster than json.dumps for the few journal records per task.
_JOURNAL_ENCODER = msgspec.json.Encoder(enc_hook=str)


_NOW_CACHE: list[Any] = [-1, ""]


def _now() -> str:
    """UTC to the second; formatted once per second (several journal records per task share it)."""
    second = int(time.time())
    if second != _NOW_CACHE[0]:
        _NOW_CACHE[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))]
    return str(_NOW_CACHE[1])


class RunStore:
    def __init__(self, run_dir: Path, *, run_id: str) -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        #: Which run, among those that share a run id (the requests of one orchestration, another
        #: results dir): a hash of the directory. Session ids carry it, so a resume releases only
        #: its own run's sandboxes.
        self.run_key = hashlib.sha256(os.fsencode(os.path.realpath(run_dir))).hexdigest()[:6]
        self.details = run_dir / "details"
        self.journal_path = run_dir / "journal.jsonl"
        self.resources = run_dir / ".env-resources"
        self.commit = GroupCommit(run_dir)
        self._journal: IO[bytes] | None = None
        self._journal_lock = threading.Lock()  # lines stay whole if a caller writes from a thread
        self._journal_buffer: list[bytes] = []
        self._journal_flushed = time.monotonic()
        #: What the journal showed finished when this store first looked (:meth:`journal_adopted`).
        self._finishes: tuple[set[str], set[tuple[str, int]]] | None = None
        # The group commit writes buffered journal lines before its syncfs: one write per round.
        self.commit.before_round = self.flush_journal
        #: False: the group commit's syncfs runs inline (tests on trio's MockClock).
        self.io_threads = True
        #: Opened to continue an interrupted run (attempt directories may hold leftovers).
        self.resumed = False
        self._lock_fd: int | None = None
        #: Shared locks on runs this one reads (the source of ``acx regrade``), held until close.
        self._read_lock_fds: list[int] = []
        #: Sessions this process kept on purpose (keep_environment): left alone at the end of the run.
        self.kept_sessions: set[str] = set()
        #: Every record this store writes passes through it (V1: no secret in any results file).
        self.scrub = Scrubber()
        #: The first "results disk full" seen at any write edge: the run stops (issue 11 item 11).
        self.fault: ResultsDiskFull | None = None
        self._reserve = run_dir / ".acx" / "reserve"
        self.records = _RunRecords(self)

    # ---- creation ----------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        results_dir: str | Path,
        namespace: str,
        *,
        run_name: str | None = None,
        run_id: str | None = None,
    ) -> RunStore:
        if run_id is not None and (safe_name(run_id) != run_id or run_id in (".", "..")):
            # Refused, not silently renamed: the directory must be the id the user asked for.
            raise AcxResultsError(
                f"run id {run_id!r} is not a plain directory name",
                code="E0601",
                path="output.run_id",
                help="use letters, digits and . _ = - only (at most 80 characters), e.g. --run-id baseline-1",
            )
        base = Path(results_dir)
        if run_name:
            base = base / Path(*[safe_name(p) for p in run_name.split("/") if p])
        base = base / safe_name(namespace)
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unwritable(base, exc) from None
        if run_id is not None:
            target = base / safe_name(run_id)
            try:
                target.mkdir()
            except FileExistsError:
                raise AcxResultsError(
                    f"run directory {target} already exists",
                    code="E0601",
                    path="output.run_id",
                    help="choose a different --run-id, resume it with --resume DIR, or use --reuse",
                ) from None
            except OSError as exc:
                raise _unwritable(base, exc) from None
            return cls._init(target, target.name)
        stamp = time.time()
        for i in range(600):
            rid = time.strftime("%Y%m%d_%H%M%S", time.localtime(stamp + i))
            target = base / rid
            try:
                target.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise _unwritable(base, exc) from None
            return cls._init(target, rid)
        raise AcxResultsError(
            f"could not reserve a run directory under {base}", code="E0602", help="pass an explicit --run-id"
        )

    @classmethod
    def create_at(cls, run_dir: str | Path) -> RunStore:
        """A new run directory at exactly ``run_dir`` (``acx regrade -o``); it must not exist."""
        target = Path(run_dir)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.mkdir()
        except FileExistsError:
            raise AcxResultsError(
                f"run directory {target} already exists",
                code="E0601",
                path="-o",
                help="choose a directory that does not exist yet",
            ) from None
        except OSError as exc:
            raise _unwritable(target.parent, exc) from None
        return cls._init(target, safe_name(target.name))

    @classmethod
    def _init(cls, run_dir: Path, run_id: str) -> RunStore:
        store = cls(run_dir, run_id=run_id)
        for d in (*(store.details / sub for sub in ("running", *FINAL_STATES)), store.resources, run_dir / ".acx"):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file in the way, no permission
                raise _unwritable(d, exc) from None
        return store

    @classmethod
    def open_existing(cls, run_dir: str | Path) -> RunStore:
        path = Path(run_dir)
        info_path = path / "run_info.json"
        if not info_path.is_file():
            raise AcxResultsError(
                f"{path} is not an acx run directory (no run_info.json)",
                code="E0603",
                help="pass the directory that contains run_info.json, e.g. results/<request>/<run id>",
            )
        info = read_record(info_path)
        if info.get("schema_version") != RUN_INFO_SCHEMA:
            raise AcxResultsError(
                f"{info_path} has schema {info.get('schema_version')!r}, expected {RUN_INFO_SCHEMA!r}",
                code="E0604",
                help="runs written by another tool or version cannot be resumed; rerun the evaluation",
            )
        store = cls._init(path, str(info.get("run_id") or path.name))
        store.resumed = True
        return store

    # ---- journal -----------------------------------------------------------------------------
    JOURNAL_FLUSH_INTERVAL = 0.5

    def journal(self, kind: str, *, fsync: bool = True, through: bool = False, **fields: Any) -> None:
        """Append one record.

        ``fsync=True`` (rare records: run started/finished): written and fsynced at once.
        ``fsync=False``: buffered, written with the next group commit round, within
        :attr:`JOURNAL_FLUSH_INTERVAL`, or at close — the records a resume depends on are files, not
        these lines. ``through=True``: written at once without fsync, so it survives a SIGKILL that
        follows (a session about to open).
        """
        line = _JOURNAL_ENCODER.encode(self.scrub.tree({"t": _now(), "kind": kind, **fields})) + b"\n"
        with self._journal_lock:
            self._journal_buffer.append(line)
            if fsync or through or time.monotonic() - self._journal_flushed >= self.JOURNAL_FLUSH_INTERVAL:
                try:
                    self._flush_journal_locked(fsync=fsync)
                except OSError as exc:
                    # Kept buffered (written at the end, once the reserve is freed). Only a line that
                    # must be durable before its side effect (a sandbox about to open) stops the caller.
                    self.check_full(exc, self.journal_path, raise_it=through)
                    if disk_full_error(exc) is None:
                        raise

    def flush_journal(self) -> None:
        with self._journal_lock:
            if self._journal_buffer:
                try:
                    self._flush_journal_locked(fsync=False)
                except OSError as exc:
                    self.check_full(exc, self.journal_path, raise_it=False)
                    if disk_full_error(exc) is None:
                        raise

    # ---- a full results disk ------------------------------------------------------------------
    #: Bytes kept aside at the start of a run and freed when the disk fills, so that the run's
    #: final state (run_info.json, the journal's tail) can still be written.
    RESERVE_BYTES = 1 << 20

    def check_full(self, exc: BaseException, path: Path | str, *, raise_it: bool = True) -> None:
        """Note a full results disk behind ``exc`` (the first one wins) and, with ``raise_it``,
        raise :class:`ResultsDiskFull`; any other error is left to the caller."""
        err = disk_full_error(exc)
        if err is None:
            return
        if self.fault is None:
            self.fault = ResultsDiskFull(str(getattr(err, "filename", None) or path), err)
        if raise_it:
            raise self.fault from exc

    def reserve_space(self) -> None:
        """Keep :attr:`RESERVE_BYTES` allocated under ``.acx/`` (E0630 when even that does not fit)."""
        try:
            fd = os.open(self._reserve, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                try:
                    os.posix_fallocate(fd, 0, self.RESERVE_BYTES)
                except OSError as exc:
                    if disk_full_error(exc) is not None:
                        raise
                    os.write(fd, bytes(self.RESERVE_BYTES))  # a filesystem without fallocate
            finally:
                os.close(fd)
        except OSError as exc:
            if disk_full_error(exc) is None:
                raise _unwritable(self.run_dir, exc) from None
            self.release_reserve()
            raise AcxResultsError(
                f"the results disk is full: no room for a run in {self.run_dir} ({exc.strerror})",
                code="E0630",
                path=str(self.run_dir),
                help="free space on that filesystem (or choose another --results-dir), then run again",
            ) from None

    def release_reserve(self) -> None:
        try:
            os.unlink(self._reserve)
        except FileNotFoundError:
            pass

    def _flush_journal_locked(self, *, fsync: bool) -> None:
        if self._journal is None or self._journal.closed:
            # Unbuffered: each flush is exactly one write of whole lines.
            self._journal = self.journal_path.open("ab", buffering=0)
            if self._journal.tell() > 0 and _last_byte(self.journal_path) != b"\n":
                self._journal_buffer.insert(0, b"\n")  # end a line torn by a SIGKILL before appending
        data, self._journal_buffer = b"".join(self._journal_buffer), []
        self._journal_flushed = time.monotonic()
        view = memoryview(data)
        try:
            while view:
                view = view[self._journal.write(view) or 0 :]
        except OSError:
            self._journal_buffer.insert(0, bytes(view))  # what was not written is written later
            raise
        if fsync:
            os.fsync(self._journal.fileno())

    def lock(self) -> None:
        """Hold the run directory until :meth:`close`: a second ``acx run --resume`` of a live run is
        refused (E0617). The kernel drops the lock when this process ends, even by SIGKILL, so an
        interrupted run stays resumable; the descriptor is not inherited by commands."""
        import fcntl

        try:
            fd = os.open(self.run_dir / ".acx" / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _unwritable(self.run_dir, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _live_holder(fd)
            os.close(fd)
            raise AcxResultsError(
                f"run directory {self.run_dir} is in use by another acx process"
                + (f" (pid {holder})" if holder else " (a run of it, or an `acx regrade` reading it)"),
                code="E0617",
                help="wait until that process finishes, or stop it (Ctrl-C), then resume",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
        if self.resumed:
            self._check_writable()
        self.reserve_space()

    def _check_writable(self) -> None:
        """Everything a resumed run writes can be written (E0620 now, not a crash mid-run)."""
        for d in (self.run_dir, self.run_dir / ".acx", *(self.details / s for s in ("running", *FINAL_STATES))):
            probe = d / f".acx-probe-{os.getpid()}"
            try:
                os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                os.unlink(probe)
            except OSError as exc:
                raise _unwritable(d, exc) from None
        for f in (self.journal_path, self.run_dir / "run_info.json", self.run_dir / "progress.jsonl"):
            try:
                if f.exists():
                    os.close(os.open(f, os.O_WRONLY | os.O_APPEND))
            except OSError as exc:
                raise _unwritable(f, exc) from None

    def hold_for_reading(self, source: Path) -> None:
        """``acx regrade``: read ``source`` only while no process runs it, and keep it from being
        resumed until this run closes (a shared hold of the lock :meth:`lock` takes; several
        readers may share it). A run still going is refused with E0617."""
        fd = _read_lock(source)
        if fd is not None:
            self._read_lock_fds.append(fd)

    def locked_by(self) -> int | None:
        """The pid of the live process running this run (it holds :meth:`lock`), else None."""
        import fcntl

        try:
            fd = os.open(self.run_dir / ".acx" / "lock", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            return int(holder) if holder.isdigit() else 0
        finally:
            os.close(fd)  # also drops the shared lock taken when nobody held it
        return None

    def close(self) -> None:
        self.commit.run_queued()
        self.release_reserve()
        with self._journal_lock:
            if self._journal_buffer:
                try:
                    self._flush_journal_locked(fsync=True)
                except OSError as exc:
                    self.check_full(exc, self.journal_path, raise_it=False)
                    if disk_full_error(exc) is None:
                        raise
            if self._journal is not None:
                self._journal.close()
                self._journal = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        while self._read_lock_fds:
            os.close(self._read_lock_fds.pop())

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a small store write (``fsync=False``) inline on the trio thread."""
        import trio

        await trio.lowlevel.checkpoint()
        try:
            return fn(*args, fsync=False, **kwargs)
        except OSError as exc:
            self.check_full(exc, self.run_dir)
            raise

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking file work ``fn(*args)`` in a worker thread (inline when ``io_threads`` is off).

        Inline matters on trio's MockClock: while every task waits on a thread the clock jumps to
        the next timer — a run's deadline — before the thread's result arrives.
        """
        import trio

        if self.io_threads:
            return await trio.to_thread.run_sync(fn, *args)
        await trio.lowlevel.checkpoint()
        return fn(*args)

    def queue(self, fn: Callable[..., Any], *args: Any, requires: tuple[QueuedOp, ...] = ()) -> QueuedOp:
        """Queue a write for the next group-commit round (runs in its worker thread); not awaited."""
        self.commit.threads = self.io_threads
        return self.commit.queue(fn, *args, requires=requires)

    async def durably(self, fn: Callable[..., T], *args: Any, requires: tuple[QueuedOp, ...] = ()) -> T:
        """Queue ``fn(*args)`` and wait for its round: written (after ``requires``) and synced.

        Raises what the write raised — or what a required write raised, in which case ``fn`` did
        not run.
        """
        import trio

        await trio.lowlevel.checkpoint_if_cancelled()
        op = self.queue(fn, *args, requires=requires)
        try:
            await self.commit.sync()
            return op.result()  # type: ignore[no-any-return]
        except OSError as exc:
            self.check_full(exc, self.run_dir)
            raise

    # ---- files -------------------------------------------------------------------------------
    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_bytes(self.run_dir / name, encode_scrubbed_json(obj, self.scrub))

    def write_text(self, name: str, text: str) -> None:
        atomic_write_bytes(self.run_dir / name, self.scrub.text(text).encode("utf-8"))

    def read_run_info(self) -> dict[str, Any]:
        path = self.run_dir / "run_info.json"
        return read_record(path) if path.exists() else {}

    def running_dir(self, task_id: str) -> Path:
        return self.details / "running" / task_dir_name(task_id)

    def attempt_dir(self, task_id: str, attempt: int) -> Path:
        return self.running_dir(task_id) / f"attempt-{attempt}"

    def attempt_dir_str(self, task_id: str, attempt: int) -> str:
        return f"{self._running(task_id)}/attempt-{attempt}"

    def _running(self, task_id: str) -> str:
        # str paths on the per-task path: a pathlib join costs more than the syscall it feeds.
        return f"{self.details}/running/{task_dir_name(task_id)}"

    def write_attempt(self, task_id: str, attempt: int, result: dict[str, Any], *, fsync: bool = False) -> Path:
        """``attempt-N/result.json`` (atomic; the directories are created when missing)."""
        data = encode_scrubbed_json({"schema_version": RESULT_SCHEMA, **result}, self.scrub)
        return self.write_attempt_bytes(task_id, attempt, data)

    def write_attempt_bytes(self, task_id: str, attempt: int, data: bytes) -> Path:
        running = self._running(task_id)
        d = f"{running}/attempt-{attempt}"
        for directory in (running, d):  # two mkdirs; cheaper than an open failing into makedirs
            try:
                os.mkdir(directory)
            except FileExistsError:
                pass
        path = f"{d}/result.json"
        atomic_write_bytes(path, data, fsync=False, mode=PRIVATE)
        self.journal("attempt_finished", fsync=False, task_id=task_id, attempt=attempt)
        return Path(path)

    def queue_attempt(self, task_id: str, attempt: int, result: dict[str, Any]) -> QueuedOp:
        """Encode ``result.json`` here, write it with the next group commit (not awaited).

        An attempt is done iff its result.json exists: a crash before the round reruns the attempt
        on resume, and the task's final rename requires this write (see :meth:`durably`).
        """
        data = encode_scrubbed_json({"schema_version": RESULT_SCHEMA, **result}, self.scrub)
        return self.queue(self.write_attempt_bytes, task_id, attempt, data)

    def start_attempt(self, task_id: str, attempt: int, *, fsync: bool = True, archive: bool = True) -> None:
        """Journal an attempt's start; on a resumed run, archive an interrupted attempt's leftovers.

        Directories are created when something is written into them (a result, artifacts, a
        retry record), so a fresh attempt costs no metadata operation here. The journal line is
        buffered (``fsync`` is accepted for :meth:`write`).
        """
        if self.resumed and archive:  # not an attempt recovered from its own checkpoint (A9)
            self.archive_partial_attempt(task_id, attempt)
        self.journal("attempt_started", fsync=False, task_id=task_id, attempt=attempt)

    def archive_partial_attempt(self, task_id: str, attempt: int) -> None:
        """An interrupted attempt's leftovers move to ``retries/<id>/`` before it reruns (A8)."""
        d = self.attempt_dir(task_id, attempt)
        if not d.is_dir() or (d / "result.json").exists():
            return
        leftovers = [p for p in d.iterdir() if p.name != "retries"]
        if not leftovers:
            return
        dest = d / "retries" / f"interrupted-{uuid.uuid4().hex[:8]}"
        dest.mkdir(parents=True)
        for p in leftovers:
            p.rename(dest / p.name)

    def finalize_task(self, task_id: str, state: str, task_json: dict[str, Any], *, fsync: bool = True) -> Path:
        """Write ``task.json`` into the running directory, then move the directory to ``state``.

        ``task.json`` needs no temp file: nobody reads it before the directory's rename, which is the
        commit (a torn file left in ``running/`` by a crash is rewritten on resume). Durability comes
        from the group commit this runs in (``fsync`` is unused).
        """
        src = self._running(task_id)
        data = encode_scrubbed_json({"schema_version": TASK_SCHEMA, **task_json}, self.scrub)
        try:
            write_new_bytes(f"{src}/task.json", data)
        except FileNotFoundError:  # no attempt wrote anything (all were loaded from elsewhere)
            os.makedirs(src, exist_ok=True)
            write_new_bytes(f"{src}/task.json", data)
        dest = f"{self.details}/{state}/{task_dir_name(task_id)}"
        try:
            os.rename(src, dest)  # the rename is the commit; the journal line is informational
        except OSError:
            if not os.path.isdir(dest):
                raise
            shutil.rmtree(dest)  # the same task finished before (a resumed run's stale copy)
            os.rename(src, dest)
        self.journal("task_finished", fsync=False, task_id=task_id, state=state)
        return Path(dest)

    # ---- environment resources -----------------------------------------------------------------
    def session_opened(self, session_id: str, payload: dict[str, Any], *, through: bool = True) -> None:
        """Journal a session about to open; ``through``: written at once (survives a SIGKILL that
        follows) — not needed when the driver finds its own sandboxes again."""
        self.journal("session_opened", fsync=False, through=through, id=session_id, **payload)

    def session_closed(self, session_id: str, how: str = "released") -> None:
        """Journal a released session (``how``: released, open_failed, kept, reaped)."""
        if how == "kept":
            self.kept_sessions.add(session_id)
        self.journal("session_closed", fsync=False, id=session_id, how=how)

    def record_session(self, session_id: str, payload: dict[str, Any], *, fsync: bool = True) -> None:
        """A sandbox that outlives its attempt (kept, or failed to release): a file in .env-resources/."""
        atomic_write_json(
            self.resources / f"{safe_name(session_id)}.json",
            self.scrub.tree(
                {
                    "schema_version": "acx.environment_resource.v1",
                    "id": session_id,
                    "updated_at": _now(),
                    **payload,
                }
            ),
            fsync=fsync,
        )


class _RunRecords:
    """What a run directory records, read back (``--resume``, ``--reuse``, ``acx results
    show``): the journal, finished tasks and attempts, sandboxes not known to be released; and
    journaling what a resume adopts."""

    def __init__(self, c: RunStore) -> None:
        self.c = c

    def read_journal(self) -> list[dict[str, Any]]:
        if not self.c.journal_path.exists():
            return []
        out = []
        for line in self.c.journal_path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line after SIGKILL
        return out

    def _journaled_finishes(self) -> tuple[set[str], set[tuple[str, int]]]:
        """Tasks and attempts the journal shows finished, as they were written (scrubbed ids).
        Read once per store (a resume adopts many results; the lines it adds are added here)."""
        if self.c._finishes is None:
            tasks: set[str] = set()
            attempts: set[tuple[str, int]] = set()
            for rec in self.read_journal():
                kind, task_id = rec.get("kind"), rec.get("task_id")
                if kind == "task_finished" and isinstance(task_id, str):
                    tasks.add(task_id)
                elif kind == "attempt_finished" and isinstance(task_id, str) and isinstance(rec.get("attempt"), int):
                    attempts.add((task_id, rec["attempt"]))
            self.c._finishes = (tasks, attempts)
        return self.c._finishes

    def journal_adopted(self, task_id: str, attempts: Iterable[int], state: str | None = None) -> None:
        """Resume: journal the finish of each result it takes over that the journal does not show
        (``adopted: true``). A SIGKILL right after a result's write loses its buffered
        ``attempt_finished``/``task_finished`` lines while the file, the truth on resume, stays;
        without this the journal would never show that task finish. Idempotent: a line already
        there (from the run, or an earlier resume) is not written again."""
        tasks, done = self._journaled_finishes()
        shown = self.c.scrub.text(task_id)  # journal lines are scrubbed: compare as written
        for n in sorted(attempts):
            if (shown, n) not in done:
                self.c.journal("attempt_finished", fsync=False, task_id=task_id, attempt=n, adopted=True)
                done.add((shown, n))
        if state is not None and shown not in tasks:
            self.c.journal("task_finished", fsync=False, task_id=task_id, state=state, adopted=True)
            tasks.add(shown)

    def completed_attempts(self, task_id: str) -> dict[int, dict[str, Any]]:
        """Attempts of an unfinished task whose result.json exists (resume: never redone)."""
        out: dict[int, dict[str, Any]] = {}
        root = self.c.running_dir(task_id)
        if not root.is_dir():
            return out
        for d in root.glob("attempt-*"):
            res = d / "result.json"
            if res.is_file():
                try:
                    out[int(d.name.split("-", 1)[1])] = read_json(res)
                except (ValueError, json.JSONDecodeError):
                    continue
        return out

    def finished_tasks(self) -> dict[str, tuple[str, Path]]:
        """task_id → (state, dir) of every task in a final state directory."""
        out: dict[str, tuple[str, Path]] = {}
        for state in FINAL_STATES:
            root = self.c.details / state
            if not root.is_dir():
                continue
            for d in sorted(root.iterdir()):
                tj = d / "task.json"
                if tj.is_file():
                    try:
                        out[str(read_json(tj)["task_id"])] = (state, d)
                    except (KeyError, json.JSONDecodeError):
                        continue
        return out

    def drop_session(self, session_id: str, *, fsync: bool = False) -> None:
        """Delete a session's record file if any (``fsync`` is accepted for :meth:`write`; unused)."""
        try:
            (self.c.resources / f"{safe_name(session_id)}.json").unlink()
        except FileNotFoundError:
            pass

    def live_session_records(self) -> list[dict[str, Any]]:
        """Sandboxes not known to be released: record files (kept, release failed) and sessions the
        journal shows opened and neither closed nor kept (left by an interrupted run)."""
        return [r for r in self.session_records().values() if r.get("state") != "closed"]

    def session_records(self) -> dict[str, dict[str, Any]]:
        """Every session this run journaled or recorded, by id; ``state``: active (opened, never
        closed), closed, kept or release_failed. A record file wins over the journal."""
        out: dict[str, dict[str, Any]] = {}
        for rec in self.read_journal():
            kind = rec.get("kind")
            if kind == "session_opened":
                out[str(rec.get("id"))] = {**rec, "state": "active"}
            elif kind == "session_closed":
                sid = str(rec.get("id"))
                out[sid] = {**out.get(sid, {"id": sid}), "state": "kept" if rec.get("how") == "kept" else "closed"}
        if self.c.resources.is_dir():
            for p in sorted(self.c.resources.glob("*.json")):
                try:
                    rec = read_json(p)
                except (OSError, ValueError):
                    continue
                out[str(rec.get("id"))] = rec
        return out


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _unwritable(where: Path, exc: OSError) -> AcxResultsError:
    return AcxResultsError(
        f"cannot write run results in {where}: {exc.strerror or exc}",
        code="E0620",
        path=str(where),
        help="choose a results directory acx can create and write (--results-dir / runtime.results_dir); "
        "a run directory must be writable to be resumed",
    )


def read_record(path: Path) -> dict[str, Any]:
    """A run's own JSON record (``run_info.json``, ``.acx/invocation.json``): a damaged or unreadable
    one is a clear user-facing error (E0618), not a crash."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        problem = f"is damaged: not valid JSON ({exc})"
    except RecursionError:
        problem = "is damaged: nested too deeply to read"
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror or exc}"
    else:
        if isinstance(data, dict):
            return data
        problem = f"is damaged: a JSON {type(data).__name__}, not an object"
    raise AcxResultsError(
        f"{path.name} {problem}",
        code="E0618",
        path=str(path),
        help="the run cannot be resumed, reused or shown from this file; restore it (or its permissions), "
        "or start a new run",
    )


def refuse_if_running(source: Path) -> None:
    """E0617 when a process runs ``source`` now (checked before a regrade plans anything)."""
    fd = _read_lock(source)
    if fd is not None:
        os.close(fd)


def _read_lock(source: Path) -> int | None:
    """A shared hold of ``source``'s run lock (None: the lock file cannot even be opened, as in a
    read-only results tree, where nothing can run either); E0617 while a process holds it."""
    import fcntl

    path = source / ".acx" / "lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _live_holder(fd)
        os.close(fd)
        raise AcxResultsError(
            f"run {source} is still running (acx process {holder or 'unknown'} holds it): "
            "a run is regraded once it has finished",
            code="E0617",
            path=str(source),
            help=f"wait until it finishes (`acx results show {source}` shows its state), "
            "or stop it (Ctrl-C) and regrade what it finished",
        ) from None
    return fd


def _live_holder(fd: int) -> int | None:
    """The pid written in a held lock file when that process is alive (the file keeps the last
    exclusive holder's pid; a shared holder, such as a regrade, writes none)."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    if not text.isdigit() or int(text) <= 0:
        return None
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return int(text)


def find_reuse_source(namespace_dir: Path, run_id: str | None, *, exclude: Path) -> Path | None:
    """The run to reuse: ``run_id`` (must exist) or the newest run in the namespace."""
    if run_id:
        cand = namespace_dir / run_id
        if not (cand / "run_info.json").is_file():
            raise AcxResultsError(
                f"--reuse {run_id}: no run {cand} with a run_info.json",
                code="E0605",
                help=f"list runs with `ls {namespace_dir}`; omit the id to reuse the newest run",
            )
        return cand
    best: tuple[str, float, Path] | None = None
    if not namespace_dir.is_dir():
        return None
    for d in namespace_dir.iterdir():
        info = d / "run_info.json"
        if d == exclude or not info.is_file():
            continue
        try:
            started = str(read_json(info).get("started_at") or "")
        except (ValueError, UnicodeDecodeError, AttributeError):  # damaged: not a candidate
            continue
        key = (started, info.stat().st_mtime, d)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None
