"""Progress events and their sinks: ``progress.jsonl``, ``progress.json``, the console.

One reporter interface (:class:`Reporter`): the interpreter emits :class:`ProgressEvent` s; sinks
are the per-run JSONL log and snapshot (:class:`RunProgress`), an optional SDK callback, and one
console view for the whole orchestration — ``rich`` live view on a TTY, plain lines otherwise,
or nothing (``--progress none``).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import msgspec

from acx.interpreter._fs import atomic_write_json

__all__ = [
    "EVENT_NAMES",
    "ConsoleReporter",
    "ProgressEvent",
    "Reporter",
    "RunProgress",
    "make_console",
]

_ENCODER = msgspec.json.Encoder(enc_hook=str)

EVENT_NAMES = (
    "run_started",
    "tasks_loaded",
    "reuse_loaded",
    "task_started",
    "attempt_started",
    "execution_plan_resolved",
    "phase_changed",
    "attempt_retry",
    "step_started",
    "recovery_refused",
    "attempt_finished",
    "partial_saved",
    "task_finished",
    "summary_started",
    "run_finished",
    "harness_event",
)


class ProgressEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One progress event (reference §2.10); unset fields are omitted from ``progress.jsonl``."""

    run_id: str
    event: str
    timestamp: float
    task_id: str | None = None
    category: str | None = None
    attempt: int | None = None
    phase: str | None = None
    status: str | None = None
    payload: dict[str, Any] = {}
    orchestration_id: str | None = None
    request_key: str | None = None
    request_name: str | None = None
    request_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self, enc_hook=str)
        return out


class Reporter(Protocol):
    def emit(self, event: ProgressEvent) -> None: ...


class RunProgress:
    """Per-run sinks: appends every event to ``progress.jsonl``, keeps the ``progress.json`` snapshot."""

    SNAPSHOT_INTERVAL = 0.5

    def __init__(
        self,
        run_dir: Path,
        *,
        header: dict[str, Any],
        total: int,
        on_write_error: Callable[[OSError, Path], None] | None = None,
    ) -> None:
        self.run_dir = run_dir
        # Unbuffered: a write the disk refuses keeps its bytes here (:attr:`_unwritten`), whole.
        self._log: IO[bytes] = (run_dir / "progress.jsonl").open("ab", buffering=0)
        self._unwritten = b""
        #: Told about a write that failed (a full results disk stops the run; progress never does).
        self.on_write_error = on_write_error
        self._pending: list[ProgressEvent] = []
        self.header = header
        self.total = total
        self.reused = 0
        self.finished: Counter[str] = Counter()
        #: finished tasks by outcome (pass/fail/partial/unscored/error/fatal), reused ones included
        self.outcomes: Counter[str] = Counter()
        self.running: set[str] = set()
        self.phases: dict[tuple[str, int], str] = {}
        self.attempts_started = 0
        self.attempts_finished = 0
        self.partials_saved = 0
        self.status = "running"
        self.started = time.monotonic()
        self._last_snapshot = 0.0

    def emit(self, event: ProgressEvent) -> None:
        self._pending.append(event)
        self._track(event)
        # Encoded and written in batches with each snapshot (every 0.5 s), not per event: one
        # encoder call and one write per batch, and the log is still live.
        if (
            event.event in ("run_started", "run_finished")
            or time.monotonic() - self._last_snapshot >= self.SNAPSHOT_INTERVAL
        ):
            self.flush()
            self.write_snapshot()

    def tick(self) -> None:
        """Called every :attr:`SNAPSHOT_INTERVAL` while the run is live: events that arrived since
        the last batch are written even when no later event comes to carry them (an agent that
        runs for an hour leaves the log and the snapshot current, not an hour behind)."""
        if self._pending:
            self.flush()
            self.write_snapshot()

    def flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            self._unwritten += _ENCODER.encode_lines(batch)
        view = memoryview(self._unwritten)
        try:
            while view:
                view = view[self._log.write(view) or 0 :]
        except OSError as exc:
            self._failed(exc, self.run_dir / "progress.jsonl")
        finally:
            self._unwritten = bytes(view)

    def _failed(self, exc: OSError, path: Path) -> None:
        if self.on_write_error is None:
            raise exc
        self.on_write_error(exc, path)

    def _track(self, e: ProgressEvent) -> None:
        if e.event == "task_started" and e.task_id:
            self.running.add(e.task_id)
        elif e.event == "task_finished" and e.task_id:
            self.running.discard(e.task_id)
            self.finished[e.status or "completed"] += 1
            self.outcomes[_outcome(e)] += 1
        elif e.event == "reuse_loaded":
            self.reused = int(e.payload.get("tasks", 0))
            self.outcomes.update({str(k): int(n) for k, n in (e.payload.get("outcomes") or {}).items()})
        elif e.event == "attempt_started":
            self.attempts_started += 1
        elif e.event == "attempt_finished" and e.task_id:
            self.attempts_finished += 1
            self.phases.pop((e.task_id, e.attempt or 0), None)
        elif e.event == "phase_changed" and e.task_id and e.phase:
            self.phases[(e.task_id, e.attempt or 0)] = e.phase
        elif e.event == "partial_saved":
            self.partials_saved += 1
        elif e.event == "run_finished":
            self.status = e.status or "completed"

    def snapshot(self) -> dict[str, Any]:
        done = sum(self.finished.values())
        return {
            **self.header,
            "status": self.status,
            "total": self.total,
            "reused": self.reused,
            "pending": max(0, self.total - self.reused - done - len(self.running)),
            "running": len(self.running),
            "finished": done,
            "completed": self.finished.get("normal", 0),
            "error": self.finished.get("error", 0),
            "failed": self.finished.get("fatal", 0),
            "outcomes": {k: self.outcomes[k] for k in _OUTCOME_GLYPHS},
            "attempts_started": self.attempts_started,
            "attempts_finished": self.attempts_finished,
            "partials_saved": self.partials_saved,
            "current_phase_counts": dict(Counter(self.phases.values())),
            "active_tasks": sorted(self.running)[:50],
            "elapsed_seconds": round(time.monotonic() - self.started, 3),
            "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def write_snapshot(self) -> None:
        self._last_snapshot = time.monotonic()
        try:
            atomic_write_json(self.run_dir / "progress.json", self.snapshot(), fsync=False)
        except OSError as exc:
            self._failed(exc, self.run_dir / "progress.json")

    def close(self) -> None:
        try:
            self.flush()
            self.write_snapshot()
        finally:
            self._log.close()


#: A finished task's outcome (``task_finished`` payload ``outcome``, as the report classifies it)
#: → the console's glyph and word. ✓ means passed, not merely "ran without an error".
_OUTCOME_GLYPHS = {
    "pass": "✓",
    "fail": "✗",
    "partial": "◐",
    "unscored": "·",
    "error": "⚠",
    "fatal": "‼",
}


@dataclass
class _RequestView:
    name: str
    total: int = 0
    done: int = 0
    #: finished tasks by outcome (pass, fail, partial, unscored, error, fatal)
    outcomes: Counter[str] = field(default_factory=Counter)
    running: int = 0
    status: str = "pending"
    run_dir: str = ""

    @property
    def errors(self) -> int:
        return self.outcomes["error"] + self.outcomes["fatal"]

    def counts(self) -> str:
        """``2 passed, 1 failed, 1 with errors`` (partial/unscored only when there are some)."""
        o = self.outcomes
        parts = [f"{o['pass']} passed", f"{o['fail']} failed"]
        parts += [f"{o[k]} {k}" for k in ("partial", "unscored") if o[k]]
        parts.append(f"{self.errors} with errors")
        return ", ".join(parts)


class ConsoleReporter:
    """Orchestration-level console view. ``mode``: ``plain`` lines, ``rich`` live view, ``none``."""

    def __init__(self, mode: str, *, stream: IO[str] | None = None) -> None:
        self.mode = mode
        self.stream = stream or sys.stderr
        self.requests: dict[str, _RequestView] = {}
        self.phases: dict[tuple[str, str, int], str] = {}
        self.started = time.monotonic()
        self._live: Any = None
        self.callback: Callable[[ProgressEvent], None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> ConsoleReporter:
        if self.mode == "rich":
            from rich.console import Console
            from rich.live import Live

            # The reporter is the renderable (``__rich__``): Live redraws it 4×/s, not per event.
            self._live = Live(self, console=Console(file=self.stream), refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(*exc)
            self._live = None

    # ---- events ----------------------------------------------------------------------------
    def emit(self, e: ProgressEvent) -> None:
        if self.callback is not None:
            self.callback(e)
        name = e.request_name or "run"
        view = self.requests.setdefault(name, _RequestView(name))
        if e.event == "run_started":
            view.status = "running"
            view.run_dir = str(e.payload.get("run_dir", ""))
        elif e.event == "tasks_loaded":
            view.total = int(e.payload.get("tasks", 0))
        elif e.event == "task_started":
            view.running += 1
        elif e.event == "reuse_loaded":
            view.done += int(e.payload.get("tasks", 0))
            view.outcomes.update({str(k): int(n) for k, n in (e.payload.get("outcomes") or {}).items()})
        elif e.event == "task_finished":
            view.running = max(0, view.running - 1)
            view.done += 1
            view.outcomes[_outcome(e)] += 1
        elif e.event == "phase_changed" and e.task_id and e.phase:
            self.phases[(name, e.task_id, e.attempt or 0)] = e.phase
        elif e.event == "attempt_finished" and e.task_id:
            self.phases.pop((name, e.task_id, e.attempt or 0), None)
        elif e.event == "run_finished":
            view.status = e.status or "completed"
        if self.mode == "plain":
            self._plain(e, view)
        elif self.mode == "rich" and e.event == "recovery_refused" and self._live is not None:
            # Rare and costly (an agent paid for twice, or an attempt left unevaluated): printed
            # above the live table, not folded into its counts.
            self._live.console.print(_refusal_line(name, e), markup=False, highlight=False)

    def _plain(self, e: ProgressEvent, view: _RequestView) -> None:
        line: str | None = None
        if e.event == "run_started":
            line = f"[{view.name}] run {e.run_id} started → {view.run_dir}"

        elif e.event == "tasks_loaded":
            line = f"[{view.name}] {view.total} task(s)"
        elif e.event == "task_finished":
            outcome = _outcome(e)
            # An error names its codes; a scored task its observations (e.g. correct=False).
            codes = ",".join(e.payload.get("codes") or [])
            extra = codes if outcome in ("error", "fatal") and codes else e.payload.get("summary", "")
            glyph = _OUTCOME_GLYPHS.get(outcome, "·")
            line = f"[{view.name}] {glyph} {e.task_id} {outcome} {extra}".rstrip() + f" ({view.done}/{view.total})"
        elif e.event == "attempt_retry":
            p = e.payload
            why = p.get("reason", "")
            line = f"[{view.name}] ↻ {e.task_id} attempt {e.attempt}: retry {p.get('retry')} ({why})"
        elif e.event == "recovery_refused":
            line = _refusal_line(view.name, e)
        elif e.event == "reuse_loaded":
            p = e.payload
            line = f"[{view.name}] ↻ reused {p.get('tasks', 0)} task(s) from {p.get('source_run', '?')}"
            if p.get("resumed"):
                line = f"[{view.name}] ↻ resuming: {p.get('tasks', 0)} task(s) already finished"
        elif e.event == "run_finished":
            line = f"[{view.name}] finished: {e.status} ({view.done}/{view.total} tasks: {view.counts()})"
        if line is not None:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: the display stops, the run does not
                self.mode = "none"

    def __rich__(self) -> Any:
        return self._render()

    def _render(self) -> Any:
        from rich.table import Table

        elapsed = time.monotonic() - self.started
        table = Table(title=f"acx run — {elapsed:,.1f}s", expand=False)
        for col in ("request", "status", "done", "passed", "failed", "errors", "running", "total"):
            table.add_column(col, justify="right" if col not in ("request", "status") else "left")
        # Called from rich's refresh thread: copy (atomic under the GIL) before iterating.
        for v in list(dict(self.requests).values()):
            o = Counter(v.outcomes)
            cells = (v.done, o["pass"], o["fail"], o["error"] + o["fatal"], v.running, v.total)
            table.add_row(v.name, v.status, *map(str, cells))
        counts = Counter(dict(self.phases).values())
        if counts:
            table.caption = "phases: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        return table


def _refusal_line(name: str, e: ProgressEvent) -> str:
    what = "not run again (--recovery strict)" if e.payload.get("strict") else "its agent runs again"
    why = e.payload.get("reason")
    return f"[{name}] ! {e.task_id} attempt {e.attempt}: {what}: evaluation-only recovery refused: {why}"


def _outcome(e: ProgressEvent) -> str:
    """The task's outcome from its ``task_finished`` event (an event without one, e.g. a task
    given up before it ran, by its state)."""
    outcome = e.payload.get("outcome")
    if isinstance(outcome, str) and outcome in _OUTCOME_GLYPHS:
        return outcome
    return e.status if e.status in ("error", "fatal") else "unscored"


def make_console(progress: str, *, stream: IO[str] | None = None) -> ConsoleReporter:
    """``auto`` → rich on a TTY, plain otherwise."""
    out = stream or sys.stderr
    mode = progress
    if progress == "auto":
        mode = "rich" if out.isatty() else "plain"
    return ConsoleReporter(mode, stream=out)
