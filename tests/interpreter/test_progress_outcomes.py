"""The live progress display tells passed / failed / error apart, as the report classifies tasks
(state error/fatal, else the primary metric's mean over attempts: 1 pass, 0 fail, between
partial, none unscored). ✓ used to mean only "no error": a task that ran and scored 0 showed ✓."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from interp_helpers import FakeBench, PyHarness, program, run, run_dir, tasks

from acx.interpreter._events import ConsoleReporter, ProgressEvent, make_console
from acx.interpreter._metrics import task_outcome
from acx.ir import ExecutionIssue, RunResult
from acx.report._build import _score_class


async def _answers(prepared: Any, session: Any, plan: Any) -> RunResult:
    """t0 right, t1 wrong, t2 an error issue, t3 crashes (fatal), t4… wrong."""
    if prepared.task_id == "t3":
        raise RuntimeError("agent crashed")
    if prepared.task_id == "t2":
        issue = ExecutionIssue(severity="error", phase="run", code="run_timeout", message="slow")
        return RunResult(task_id=prepared.task_id, issues=[issue])
    answer = "Q0" if prepared.task_id == "t0" else "wrong"
    return RunResult(task_id=prepared.task_id, final_answer=answer)


class _Sink(list):  # type: ignore[type-arg]
    def __init__(self, reporter: ConsoleReporter) -> None:
        super().__init__()
        self.reporter = reporter

    def append(self, e: Any) -> None:
        super().append(e)
        self.reporter.emit(e)


def _lines(text: str, task: str) -> str:
    return next(line for line in text.splitlines() if f" {task} " in line)


def test_plain_progress_distinguishes_pass_fail_error(tmp_path: Path) -> None:  # contract R13 (progress)
    out = io.StringIO()
    reporter = make_console("plain", stream=out)
    with reporter:
        result = run([program(FakeBench(), PyHarness(_answers), tasks(4))], tmp_path, events=_Sink(reporter))
    text = out.getvalue()
    assert _lines(text, "t0").startswith("[req] ✓ t0 pass correct=True")
    assert _lines(text, "t1").startswith("[req] ✗ t1 fail correct=False")  # ran fine, scored 0: not ✓
    assert _lines(text, "t2").startswith("[req] ⚠ t2 error run_timeout")
    assert _lines(text, "t3").startswith("[req] ‼ t3 fatal harness_failed")
    assert "(4/4 tasks: 1 passed, 1 failed, 2 with errors)" in text
    # The report classifies the same tasks the same way.
    from acx.report import load_run

    rows = {r[0]: r for r in load_run(str(run_dir(result))).rows}
    assert _score_class(rows["t0"][4]) == "pass" and _score_class(rows["t1"][4]) == "fail"
    assert rows["t2"][1] == "error" and rows["t3"][1] == "fatal"
    snap = json.loads((run_dir(result) / "progress.json").read_text())
    assert snap["outcomes"] == {"pass": 1, "fail": 1, "partial": 0, "unscored": 0, "error": 1, "fatal": 1}


def test_rich_table_counts_passed_and_failed(tmp_path: Path) -> None:
    from rich.console import Console

    live = ConsoleReporter("none")
    run([program(FakeBench(), PyHarness(_answers), tasks(4))], tmp_path, events=_Sink(live))
    console = Console(file=io.StringIO(), width=120)
    console.print(live._render())
    text = console.file.getvalue()  # type: ignore[attr-defined]
    header = next(line for line in text.splitlines() if "request" in line)
    row = next(line for line in text.splitlines() if "│ req" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    names = [c.strip() for c in header.strip("┃ ").split("┃")]
    values = dict(zip(names, cells, strict=True))
    assert (values["done"], values["passed"], values["failed"], values["errors"]) == ("4", "1", "1", "2")


def test_reused_and_resumed_tasks_count_by_outcome(tmp_path: Path) -> None:
    first = run([program(FakeBench(), PyHarness(_answers), tasks(4))], tmp_path)
    events: list[Any] = []
    run(
        [program(FakeBench(), PyHarness(_answers), tasks(5))],
        tmp_path,
        events=events,
        reuse={"req": run_dir(first).name},
    )
    (loaded,) = [e for e in events if e.event == "reuse_loaded"]
    # Errors are not retry-eligible without max_retries: copied with the others.
    assert loaded.payload["outcomes"] == {"pass": 1, "fail": 1, "error": 1, "fatal": 1}
    out = io.StringIO()
    reporter = ConsoleReporter("plain", stream=out)
    for e in events:
        reporter.emit(e)
    assert "(5/5 tasks: 1 passed, 2 failed, 2 with errors)" in out.getvalue()  # t4 answers wrong


def test_an_event_without_outcome_falls_back_to_its_state() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter("plain", stream=out)
    reporter.emit(ProgressEvent(run_id="r", event="tasks_loaded", timestamp=0, payload={"tasks": 1}))
    reporter.emit(ProgressEvent(run_id="r", event="task_finished", timestamp=0, task_id="t", status="fatal"))
    assert "‼ t fatal (1/1)" in out.getvalue()


_VALUES = st.one_of(st.booleans(), st.integers(-2, 3), st.floats(-1, 2, allow_nan=False))


@given(st.lists(st.dictionaries(st.sampled_from(["correct", "other"]), _VALUES), max_size=5))
def test_outcome_is_the_report_score_class(attempts: list[dict[str, Any]]) -> None:  # property
    # The report: mean of the primary over attempts that observed it → pass/fail/partial/none.
    seen = [float(a["correct"]) for a in attempts if "correct" in a]
    expected = _score_class(sum(seen) / len(seen) if seen else None)
    assert task_outcome("normal", attempts, "correct") == {"none": "unscored"}.get(expected, expected)
    assert task_outcome("error", attempts, "correct") == "error"
    assert task_outcome("fatal", attempts, "correct") == "fatal"


def test_outcome_reads_result_json_metrics() -> None:
    r = msgspec.json.decode(msgspec.json.encode(RunResult(task_id="t", metrics={"correct": False})))
    assert task_outcome("normal", [r["metrics"]], "correct") == "fail"
    assert task_outcome("normal", [{}], "correct") == "unscored"
    assert task_outcome("normal", [{"correct": 0.5}], None) == "unscored"
