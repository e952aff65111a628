"""The run-directory reader behind :mod:`acx.results` (stdlib only: no trio, no interpreter)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from acx.errors import AcxResultsError

__all__ = ["FINAL_STATES", "RUN_INFO_SCHEMA", "AttemptRecord", "PhaseTiming", "RunReader", "TaskRecord", "find_runs"]

RUN_INFO_SCHEMA = "acx.run_info.v1"
#: Task states with their own directory under ``details/`` (``running`` holds unfinished tasks).
FINAL_STATES = ("normal", "error", "fatal")
#: How deep :func:`find_runs` looks under a results root (``<root>/[<run_name>/]<request>/<run id>``).
_MAX_DEPTH = 4


@dataclass(frozen=True)
class AttemptRecord:
    """``attempt-<n>/``: its ``result.json`` (None while the attempt has not finished) and the
    records of its discarded tries (``retries/*.json``, oldest first)."""

    n: int
    path: str
    result: dict[str, Any] | None
    retries: list[dict[str, Any]] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    #: Size of ``result.json`` in bytes (0 when missing): lets readers skip work on small results.
    size: int = 0


@dataclass(frozen=True)
class TaskRecord:
    """One task directory: ``state`` is its ``details/`` sub-directory (``normal``, ``error``,
    ``fatal``, or ``running`` for a task that has not finished)."""

    task_id: str
    state: str
    category: str
    path: str
    task_json: dict[str, Any]
    attempts: list[AttemptRecord]


class PhaseTiming(NamedTuple):
    """A phase of one try of an attempt, from ``phase_changed`` events: ``seconds`` is None for a
    phase still running (or cut off by a kill)."""

    phase: str
    started: float
    seconds: float | None
    try_number: int = 1


_decode = msgspec.json.Decoder().decode


class _Event(msgspec.Struct):
    """The fields of a progress event that timings need (the rest is skipped while decoding)."""

    event: str = ""
    task_id: str | None = None
    attempt: int | None = None
    timestamp: float | None = None
    phase: str | None = None
    category: str | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


def _read_bytes(path: str | Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _load_json(path: str | Path) -> Any:
    """A JSON file, or None when it is missing, unreadable or torn (a reader never fails a page
    because one file of a run is damaged: the page says what is missing instead)."""
    data = _read_bytes(path)
    if data is None:
        return None
    try:
        return _decode(data)
    except (msgspec.DecodeError, ValueError, RecursionError):  # RecursionError: nested past the decoder
        return None


class RunReader:
    """Read one run directory (the one holding ``run_info.json``)."""

    def __init__(self, path: Path, info: dict[str, Any]) -> None:
        self.path = path
        self.info = info

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunReader:
        """Open ``path``; a directory that is not an acx run, or whose ``run_info.json`` is
        damaged or of another schema, is a clear error (E0603, E0618, E0604)."""
        run_dir = Path(path)
        info_path = run_dir / "run_info.json"
        if not info_path.is_file():
            raise AcxResultsError(
                f"{run_dir} is not an acx run directory (no run_info.json)",
                code="E0603",
                path=str(run_dir),
                help="pass the directory that contains run_info.json, e.g. results/<request>/<run id>",
            )
        info = _load_json(info_path)
        if not isinstance(info, dict):
            raise AcxResultsError(
                "run_info.json is damaged: not a JSON object",
                code="E0618",
                path=str(info_path),
                help="restore it from a copy, or rerun the evaluation",
            )
        if info.get("schema_version") != RUN_INFO_SCHEMA:
            raise AcxResultsError(
                f"{info_path} has schema {info.get('schema_version')!r}, expected {RUN_INFO_SCHEMA!r}",
                code="E0604",
                path=str(info_path),
                help="this run was written by another tool or version of acx",
            )
        return cls(run_dir, info)

    # ---- run-level records -------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return str(self.info.get("run_id") or self.path.name)

    @property
    def metrics(self) -> dict[str, Any] | None:
        """``metrics.json`` (None until the run wrote it, or when it is damaged)."""
        data = _load_json(self.path / "metrics.json")
        return data if isinstance(data, dict) else None

    @property
    def progress(self) -> dict[str, Any] | None:
        """The latest ``progress.json`` snapshot."""
        data = _load_json(self.path / "progress.json")
        return data if isinstance(data, dict) else None

    @property
    def provenance(self) -> dict[str, Any] | None:
        """``provenance.json`` (written by ``acx run`` when it compiled the spec), else None."""
        data = _load_json(self.path / "provenance.json")
        return data if isinstance(data, dict) else None

    def locked_by(self) -> int | None:
        """The pid of a live process running this run (it holds ``.acx/lock``), else None.

        Probing takes a shared lock for an instant and drops it; it never blocks."""
        import fcntl

        try:
            fd = os.open(self.path / ".acx" / "lock", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            return int(holder) if holder.isdigit() else 0
        finally:
            os.close(fd)
        return None

    def is_live(self) -> bool:
        """True while a process is writing this run (status ``running`` and the lock is held)."""
        return self.info.get("status") == "running" and self.locked_by() is not None

    # ---- events ------------------------------------------------------------------------------
    def events(self) -> Iterator[dict[str, Any]]:
        """Every event of ``progress.jsonl``; a torn line (a run being written) is skipped."""
        try:
            fh = open(self.path / "progress.jsonl", "rb")  # noqa: SIM115 (closed by the with below)
        except OSError:
            return
        with fh:
            for line in fh:
                try:
                    event = _decode(line)
                except (msgspec.DecodeError, ValueError):
                    continue
                if isinstance(event, dict):
                    yield event

    def phase_timings(self) -> dict[tuple[str, int], list[PhaseTiming]]:
        """Per (task id, attempt): its phases in order with their durations, from
        ``phase_changed`` events; a phase ends when the next starts or the attempt finishes, a
        retry starts a new try."""
        out: dict[tuple[str, int], list[PhaseTiming]] = {}
        open_phase: dict[tuple[str, int], tuple[str, float, int]] = {}
        tries: dict[tuple[str, int], int] = {}

        def close(key: tuple[str, int], at: float) -> None:
            current = open_phase.pop(key, None)
            if current is not None:
                name, start, number = current
                out.setdefault(key, []).append(PhaseTiming(name, start, at - start if at > start else 0.0, number))

        wanted = ("phase_changed", "attempt_finished", "attempt_retry", "attempt_started")
        for ev in self._timing_events():
            kind, task_id, attempt, ts = ev.event, ev.task_id, ev.attempt, ev.timestamp
            if kind not in wanted or task_id is None or attempt is None or ts is None:
                continue
            key = (task_id, attempt)
            close(key, ts)
            if kind == "attempt_retry":
                tries[key] = tries.get(key, 1) + 1
            elif kind == "phase_changed" and ev.phase is not None:
                open_phase[key] = (ev.phase, ts, tries.get(key, 1))
        for key, (name, start, number) in open_phase.items():
            out.setdefault(key, []).append(PhaseTiming(name, start, None, number))
        return out

    def _timing_events(self) -> Iterator[_Event]:
        try:
            fh = open(self.path / "progress.jsonl", "rb")  # noqa: SIM115 (closed by the with below)
        except OSError:
            return
        with fh:
            for line in fh:
                if b'"attempt' not in line and b'"phase_changed"' not in line:
                    continue  # cheap pre-filter: most other events are skipped without decoding
                try:
                    yield _decode_event(line)
                except (msgspec.DecodeError, ValueError):
                    continue

    def started_tasks(self) -> dict[str, str]:
        """task id → category of every task a ``task_started`` event names, in order: with
        :meth:`tasks`, what a run in progress (or killed) is working on before any file of the
        task exists."""
        out: dict[str, str] = {}
        try:
            fh = open(self.path / "progress.jsonl", "rb")  # noqa: SIM115 (closed by the with below)
        except OSError:
            return out
        with fh:
            for line in fh:
                if b'"task_started"' not in line:
                    continue
                try:
                    ev = _decode_event(line)
                except (msgspec.DecodeError, ValueError):
                    continue
                if ev.event == "task_started" and ev.task_id is not None:
                    out.setdefault(ev.task_id, ev.category or "all")
        return out

    # ---- tasks -------------------------------------------------------------------------------
    def task_dirs(self) -> Iterator[tuple[str, str]]:
        """(state, directory) of every task directory: final states, then ``running``."""
        details = os.path.join(self.path, "details")
        for state in (*FINAL_STATES, "running"):
            try:
                entries = sorted(os.scandir(os.path.join(details, state)), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir():
                    yield state, entry.path

    def tasks(self) -> list[TaskRecord]:
        """Every task of the run. A task that sits in a final state directory and (stale copy of a
        resumed run) also under ``running/`` is listed once, in its final state."""
        seen: set[str] = set()
        out: list[TaskRecord] = []
        for state, d in self.task_dirs():
            record = self.read_task(d, state)
            if record is None or record.task_id in seen:
                continue
            seen.add(record.task_id)
            out.append(record)
        return out

    def read_task(self, d: str, state: str) -> TaskRecord | None:
        """One task directory (``d``) in ``state``; None when nothing in it names its task yet."""
        task_json = _load_json(os.path.join(d, "task.json"))
        if not isinstance(task_json, dict):
            task_json = {}
        attempts = _read_attempts(d, task_json)
        task_id = task_json.get("task_id")
        if not isinstance(task_id, str):
            task_id = next((a.result.get("task_id") for a in attempts if a.result), None)
        if not isinstance(task_id, str):
            return None  # an empty running/ directory: nothing to show yet
        category = task_json.get("category")
        if not isinstance(category, str):
            category = next((str(a.result.get("category")) for a in attempts if a.result), "all")
        return TaskRecord(task_id, state, category, d, task_json, attempts)


def _read_attempts(task_dir: str, task_json: dict[str, Any]) -> list[AttemptRecord]:
    """The attempts of a task directory. A finished task's ``task.json`` names its attempts and
    retry counts, so only the files that exist are opened (no directory listing: this is the hot
    path of a 10,000-task report); an unfinished one is listed."""
    listed = task_json.get("attempts")
    retry_counts = task_json.get("retry_counts")
    found: list[tuple[int, str]] = []
    if isinstance(listed, dict) and listed and all(str(k).isdigit() for k in listed):
        found = [(int(k), os.path.join(task_dir, f"attempt-{k}")) for k in listed]
    else:
        retry_counts = None
        try:
            entries = list(os.scandir(task_dir))
        except OSError:
            return []
        for entry in entries:
            name = entry.name
            if name.startswith("attempt-") and name[8:].isdigit() and entry.is_dir():
                found.append((int(name[8:]), entry.path))
    out = []
    for n, path in sorted(found):
        raw = _read_bytes(os.path.join(path, "result.json"))
        try:
            result = _decode(raw) if raw is not None else None
        except (msgspec.DecodeError, ValueError):
            result = None
        if not isinstance(result, dict):
            result = None
        retried = not isinstance(retry_counts, dict) or bool(retry_counts.get(str(n)))
        has_artifacts = result is None or bool(result.get("artifacts"))
        out.append(
            AttemptRecord(
                n,
                path,
                result,
                _json_files(os.path.join(path, "retries")) if retried else [],
                _json_files(path, prefix="submission-") if has_artifacts else [],
                len(raw) if raw is not None else 0,
            )
        )
    return out


def _json_files(d: str, prefix: str = "") -> list[dict[str, Any]]:
    try:
        names = sorted(e.name for e in os.scandir(d) if e.name.endswith(".json") and e.name.startswith(prefix))
    except OSError:
        return []
    out = []
    for name in names:
        data = _load_json(os.path.join(d, name))
        if isinstance(data, dict):
            out.append({"file": name, **data})
    return out


def find_runs(root: str | os.PathLike[str]) -> list[Path]:
    """Every run directory (holding ``run_info.json``) under ``root`` (itself included), newest
    run id last within a request; nothing is followed below a run directory."""
    base = Path(root)
    found: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        if (d / "run_info.json").is_file():
            found.append(d)
            return
        if depth >= _MAX_DEPTH:
            return
        try:
            subdirs = sorted(e.path for e in os.scandir(d) if e.is_dir() and not e.name.startswith("."))
        except OSError:
            return
        for sub in subdirs:
            walk(Path(sub), depth + 1)

    walk(base, 0)
    return found
