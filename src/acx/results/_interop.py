"""Shared pieces of the exports to and imports from other tools' formats (docs/results.md,
"Other tools"): the view of a run the exporters read, the manifest of what a format cannot hold,
atomic file writes and time stamps.

Everything here reads and writes files only; the mappings themselves live in ``_inspect`` and
``_harbor`` and are pure functions of the records read here.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from acx.errors import AcxResultsError
from acx.results._reader import AttemptRecord, PhaseTiming, RunReader, TaskRecord

__all__ = [
    "MANIFEST_SCHEMA",
    "AttemptView",
    "Manifest",
    "RunView",
    "atomic_write",
    "dumps",
    "iso",
    "load_view",
    "parse_iso",
    "prepare_out_dir",
    "short_id",
    "sync_all",
]

MANIFEST_SCHEMA = "acx.export_manifest.v1"


def dumps(obj: Any) -> bytes:
    """Indented UTF-8 JSON (msgspec's C encoder: the stdlib's indenting encoder is pure Python and
    took most of a 10,000-task export)."""
    return msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n"


def short_id(*parts: object, length: int = 22) -> str:
    """A stable id from ``parts`` (an export of the same run names its objects alike every time)."""
    return hashlib.sha256("\0".join(str(p) for p in parts).encode("utf-8")).hexdigest()[:length]


def iso(ts: float | None) -> str | None:
    """A Unix time as ISO 8601 UTC with the offset (``2026-01-02T03:04:05.678000+00:00``)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat()


def parse_iso(text: Any) -> float | None:
    """An ISO 8601 time (``Z`` or an offset; a naive one is UTC) as a Unix time; None if not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, fsync: bool = True) -> None:
    """Readers see no file or the whole file (temp file in the same directory, rename). With
    ``fsync=False`` the caller makes a batch durable at once (:func:`sync_all`): one fsync per
    file made a 50,000-file Harbor export take minutes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def sync_all() -> None:
    """Make every file written so far durable (one ``sync`` for a batch of unsynced writes)."""
    os.sync()


@dataclass
class Manifest:
    """What an export could not carry into its format, item by item (never dropped silently)."""

    fmt: str
    source: dict[str, Any]
    files: list[str] = field(default_factory=list)
    omitted: list[dict[str, Any]] = field(default_factory=list)

    def lose(self, what: str, why: str, *, task_id: str | None = None, attempt: int | None = None) -> None:
        item: dict[str, Any] = {"what": what, "why": why}
        if task_id is not None:
            item["task_id"] = task_id
        if attempt is not None:
            item["attempt"] = attempt
        if item not in self.omitted:
            self.omitted.append(item)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": MANIFEST_SCHEMA,
            "format": self.fmt,
            "source": self.source,
            "files": self.files,
            "not_represented": self.omitted,
        }


@dataclass(frozen=True)
class AttemptView:
    """One finished attempt with what every export needs next to its ``result.json``."""

    task: TaskRecord
    record: AttemptRecord
    result: dict[str, Any]
    phases: list[PhaseTiming]
    started: float | None
    finished: float | None

    @property
    def n(self) -> int:
        return self.record.n

    @property
    def task_id(self) -> str:
        return self.task.task_id


@dataclass(frozen=True)
class RunView:
    reader: RunReader
    info: dict[str, Any]
    metrics: dict[str, Any] | None
    tasks: list[TaskRecord]
    attempts: list[AttemptView]
    #: Attempts without a result.json (unfinished): an export names them in its manifest.
    unfinished: list[tuple[str, int]]

    @property
    def run_id(self) -> str:
        return self.reader.run_id

    def request(self, part: str) -> dict[str, Any]:
        value = (self.info.get("request") or {}).get(part)
        return value if isinstance(value, dict) else {}

    @property
    def k(self) -> int:
        attempts = self.request("execution").get("attempts")
        k = attempts.get("k") if isinstance(attempts, dict) else None
        return k if isinstance(k, int) and k > 0 else max((a.n for a in self.attempts), default=1)

    @property
    def strategy(self) -> str:
        attempts = self.request("execution").get("attempts")
        value = attempts.get("strategy") if isinstance(attempts, dict) else None
        return value if isinstance(value, str) else "avg"


def _attempt_times(
    phases: list[PhaseTiming], finished_events: dict[tuple[str, int], float], key: tuple[str, int]
) -> tuple[float | None, float | None]:
    started = phases[0].started if phases else None
    finished = finished_events.get(key)
    if finished is None and phases:
        last = phases[-1]
        finished = last.started + last.seconds if last.seconds is not None else None
    return started, finished


def load_view(run_dir: str | os.PathLike[str]) -> RunView:
    """Read a run directory for an export (the reader's E0603/E0604/E0618 for a bad one); a run
    still being written is refused (E0650): its files change under the export."""
    reader = RunReader.open(run_dir)
    if reader.is_live():
        raise AcxResultsError(
            f"{reader.path} is being written by a running acx process (pid {reader.locked_by()})",
            code="E0650",
            path=str(reader.path),
            help="export it when the run has finished",
        )
    timings = reader.phase_timings()
    finished_events: dict[tuple[str, int], float] = {}
    for ev in reader.events():
        if ev.get("event") == "attempt_finished" and isinstance(ev.get("timestamp"), (int, float)):
            task_id, n = ev.get("task_id"), ev.get("attempt")
            if isinstance(task_id, str) and isinstance(n, int):
                finished_events[(task_id, n)] = float(ev["timestamp"])
    tasks = reader.tasks()
    attempts: list[AttemptView] = []
    unfinished: list[tuple[str, int]] = []
    for task in tasks:
        for a in task.attempts:
            if a.result is None:
                unfinished.append((task.task_id, a.n))
                continue
            phases = timings.get((task.task_id, a.n), [])
            started, finished = _attempt_times(phases, finished_events, (task.task_id, a.n))
            attempts.append(AttemptView(task, a, a.result, phases, started, finished))
    return RunView(reader, reader.info, reader.metrics, tasks, attempts, unfinished)


def prepare_out_dir(out: Path, names: list[str]) -> None:
    """``-o DIR`` for an export: created when missing; a file of this export already there is
    refused (E0651) rather than overwritten, so two exports never mix."""
    if out.exists() and not out.is_dir():
        raise AcxResultsError(
            f"{out} exists and is not a directory",
            code="E0651",
            path=str(out),
            help="pass a directory (it is created when missing)",
        )
    clashes = [n for n in names if (out / n).exists()]
    if clashes:
        raise AcxResultsError(
            f"{out} already holds {', '.join(clashes)} from an earlier export of this run",
            code="E0651",
            path=str(out / clashes[0]),
            help="remove it, or export into another directory",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AcxResultsError(
            f"cannot create {out}: {exc.strerror}", code="E0651", path=str(out), help="choose a writable directory"
        ) from None
