"""The results store: ``<results_dir>/[<run_name>/]<namespace>/<run_id>/``.

Layout (reference §4)::

    run_info.json  metrics.json  summary.md  progress.jsonl  progress.json  run.log
    journal.jsonl              append-only, fsynced: state changes before their side effects
    .acx/invocation.json       how to recompile this run (resume), no secrets
    .env-resources/<session>.json   live sandboxes (deleted after a successful close)
    details/running/<task-dir>/     unfinished tasks: attempt-N/result.json as attempts finish
    details/{normal,error,fatal}/<task-dir>/task.json + attempt-N/result.json

Every file is written atomically (temp + fsync + rename); a task moves from ``running`` to its
final state directory with one ``rename``. What is on disk is the truth on resume: an attempt is
done iff its ``result.json`` exists; a task is done iff it sits in a final state directory.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec

from acx.errors import AcxResultsError
from acx.interpreter._fs import GroupCommit, atomic_write_json, safe_name, task_dir_name

__all__ = ["FINAL_STATES", "RUN_INFO_SCHEMA", "RunStore", "find_reuse_source"]

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
        self.details = run_dir / "details"
        self.journal_path = run_dir / "journal.jsonl"
        self.resources = run_dir / ".env-resources"
        self.commit = GroupCommit(run_dir)
        self._journal: IO[bytes] | None = None
        self._journal_lock = threading.Lock()  # lines stay whole if a caller writes from a thread
        #: False: the group commit's syncfs runs inline (tests on trio's MockClock).
        self.io_threads = True

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
        base = Path(results_dir)
        if run_name:
            base = base / Path(*[safe_name(p) for p in run_name.split("/") if p])
        base = base / safe_name(namespace)
        base.mkdir(parents=True, exist_ok=True)
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
            return cls._init(target, target.name)
        stamp = time.time()
        for i in range(600):
            rid = time.strftime("%Y%m%d_%H%M%S", time.localtime(stamp + i))
            target = base / rid
            try:
                target.mkdir()
            except FileExistsError:
                continue
            return cls._init(target, rid)
        raise AcxResultsError(
            f"could not reserve a run directory under {base}", code="E0602", help="pass an explicit --run-id"
        )

    @classmethod
    def _init(cls, run_dir: Path, run_id: str) -> RunStore:
        store = cls(run_dir, run_id=run_id)
        for sub in ("running", *FINAL_STATES):
            (store.details / sub).mkdir(parents=True, exist_ok=True)
        store.resources.mkdir(exist_ok=True)
        (run_dir / ".acx").mkdir(exist_ok=True)
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
        info = read_json(info_path)
        if info.get("schema_version") != RUN_INFO_SCHEMA:
            raise AcxResultsError(
                f"{info_path} has schema {info.get('schema_version')!r}, expected {RUN_INFO_SCHEMA!r}",
                code="E0604",
                help="runs written by another tool or version cannot be resumed; rerun the evaluation",
            )
        return cls._init(path, str(info.get("run_id") or path.name))

    # ---- journal -----------------------------------------------------------------------------
    def journal(self, kind: str, *, fsync: bool = True, **fields: Any) -> None:
        """Append one record; written through at once (survives a SIGKILL), fsynced unless batched."""
        line = _JOURNAL_ENCODER.encode({"t": _now(), "kind": kind, **fields}) + b"\n"
        with self._journal_lock:
            if self._journal is None or self._journal.closed:
                self._journal = self.journal_path.open("ab")
            self._journal.write(line)
            self._journal.flush()
            if fsync:
                os.fsync(self._journal.fileno())

    def close(self) -> None:
        self.commit.flush_unlinks()
        with self._journal_lock:
            if self._journal is not None:
                self._journal.close()
                self._journal = None

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a small store write (``fsync=False``) inline on the trio thread.

        A file write is a few syscalls; a worker-thread hop costs more than that (measured: GIL
        hand-offs on a busy machine), so writes stay here and only the shared ``syncfs`` of a
        group commit runs in a thread.
        """
        import trio

        await trio.lowlevel.checkpoint()
        return fn(*args, fsync=False, **kwargs)

    async def durably(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Write inline without a per-file fsync, then wait for the shared group commit (one syncfs)."""
        import trio

        # No scheduling point before the write: the group commit below yields anyway.
        await trio.lowlevel.checkpoint_if_cancelled()
        out = fn(*args, fsync=False, **kwargs)
        self.commit.threads = self.io_threads
        await self.commit.sync()
        return out

    def read_journal(self) -> list[dict[str, Any]]:
        if not self.journal_path.exists():
            return []
        out = []
        for line in self.journal_path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line after SIGKILL
        return out

    # ---- files -------------------------------------------------------------------------------
    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_json(self.run_dir / name, obj)

    def read_run_info(self) -> dict[str, Any]:
        path = self.run_dir / "run_info.json"
        return read_json(path) if path.exists() else {}

    def running_dir(self, task_id: str) -> Path:
        return self.details / "running" / task_dir_name(task_id)

    def attempt_dir(self, task_id: str, attempt: int) -> Path:
        return self.running_dir(task_id) / f"attempt-{attempt}"

    def write_attempt(self, task_id: str, attempt: int, result: dict[str, Any], *, fsync: bool = True) -> Path:
        path = self.attempt_dir(task_id, attempt) / "result.json"
        atomic_write_json(path, {"schema_version": RESULT_SCHEMA, **result}, fsync=fsync)
        self.journal("attempt_finished", fsync=False, task_id=task_id, attempt=attempt, status=result.get("status"))
        return path

    def completed_attempts(self, task_id: str) -> dict[int, dict[str, Any]]:
        """Attempts of an unfinished task whose result.json exists (resume: never redone)."""
        out: dict[int, dict[str, Any]] = {}
        root = self.running_dir(task_id)
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

    def start_attempt(self, task_id: str, attempt: int, *, fsync: bool = True) -> None:
        """Create the attempt directory (archiving an interrupted attempt's leftovers), journal it."""
        d = self.attempt_dir(task_id, attempt)
        if attempt == 1:
            try:
                os.mkdir(d.parent)  # a fresh task: running/<task dir>
            except FileExistsError:
                pass
        try:
            os.mkdir(d)
        except FileNotFoundError:  # a later attempt of a task whose directory was not made yet
            os.makedirs(d, exist_ok=True)
        except FileExistsError:
            self.archive_partial_attempt(task_id, attempt)  # resume, or the same attempt again
        self.journal("attempt_started", fsync=fsync, task_id=task_id, attempt=attempt)

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
        src = self.running_dir(task_id)
        atomic_write_json(src / "task.json", {"schema_version": TASK_SCHEMA, **task_json}, fsync=fsync)
        dest = self.details / state / src.name
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(src, dest)  # the rename is the commit; the journal line is informational
        self.journal("task_finished", fsync=False, task_id=task_id, state=state)
        return dest

    def finished_tasks(self) -> dict[str, tuple[str, Path]]:
        """task_id → (state, dir) of every task in a final state directory."""
        out: dict[str, tuple[str, Path]] = {}
        for state in FINAL_STATES:
            root = self.details / state
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

    # ---- environment resources -----------------------------------------------------------------
    def record_session(self, session_id: str, payload: dict[str, Any], *, fsync: bool = True) -> None:
        atomic_write_json(
            self.resources / f"{safe_name(session_id)}.json",
            {
                "schema_version": "acx.environment_resource.v1",
                "id": session_id,
                "updated_at": _now(),
                **payload,
            },
            fsync=fsync,
        )

    def drop_session_later(self, session_id: str) -> None:
        """Delete a released session's record with the next group commit (or at the end).

        A crash in between leaves a record of a session that is already gone; resuming releases it
        again, which is a no-op.
        """
        self.commit.unlinks.append(self.resources / f"{safe_name(session_id)}.json")

    def drop_session(self, session_id: str, *, fsync: bool = False) -> None:
        """Delete a session's record now (``fsync`` is accepted for :meth:`write`; unused)."""
        try:
            (self.resources / f"{safe_name(session_id)}.json").unlink()
        except FileNotFoundError:
            pass

    def live_session_records(self) -> list[dict[str, Any]]:
        if not self.resources.is_dir():
            return []
        return [read_json(p) for p in sorted(self.resources.glob("*.json"))]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


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
        except json.JSONDecodeError:
            continue
        key = (started, info.stat().st_mtime, d)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None
