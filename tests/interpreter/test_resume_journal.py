"""Resume journals the results it takes over (contract R13): a SIGKILL right after a result's write
loses the buffered journal lines of that finish while the file (the truth on resume) stays, so
`--resume` adopts the result and writes its `attempt_finished`/`task_finished` lines with
`adopted: true` — once: a second resume adds nothing.

The kill is simulated by leaving the disk as it leaves it: the run's files as written, the journal
cut just before the lost lines, with a torn last line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks

from acx.interpreter._fs import task_dir_name
from acx.ir import PreparedTask, RunResult


def _agent(log: Path) -> PyHarness:
    async def execute(prepared: PreparedTask, session: Any, plan: Any) -> RunResult:
        with log.open("a") as fh:
            fh.write(f"{prepared.task_id}\n")
        return RunResult(task_id=prepared.task_id, final_answer=prepared.input.prompt.upper())

    return PyHarness(execute)


def _journal(d: Path) -> list[dict[str, Any]]:
    out = []
    for line in (d / "journal.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            assert line.startswith('{"t": "2026-01-01'), line  # only the torn line this test wrote
    return out


def _finishes(d: Path, task_id: str) -> list[tuple[str, bool]]:
    return [
        (r["kind"], bool(r.get("adopted")))
        for r in _journal(d)
        if r.get("task_id") == task_id and r["kind"] in ("attempt_finished", "task_finished")
    ]


def _lose_finish_lines(d: Path, task_id: str) -> None:
    """The journal as a SIGKILL leaves it when ``task_id``'s finish lines were still buffered: cut
    before the first of them (a later line may have reached the disk torn)."""
    path = d / "journal.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    cut = next(
        i
        for i, line in enumerate(lines)
        if json.loads(line).get("task_id") == task_id and json.loads(line)["kind"] == "attempt_finished"
    )
    kept = [line for line in lines[:cut]]
    path.write_text("".join(kept) + '{"t": "2026-01-01T00:00:00Z", "kind": "task_fin')


def _resume(log: Path, tmp: Path, d: Path, n: int) -> None:
    resumed = run([program(FakeBench(), _agent(log), tasks(n))], tmp, resume_dirs={"req": str(d)})
    assert resumed.status == "completed"


def test_resume_journals_a_finished_task_whose_lines_a_kill_lost(tmp_path: Path) -> None:  # contract R13
    log = tmp_path / "agent.log"
    d = run_dir(run([program(FakeBench(), _agent(log), tasks(2))], tmp_path, task_concurrency=1))
    assert _finishes(d, "t1") == [("attempt_finished", False), ("task_finished", False)]
    _lose_finish_lines(d, "t1")
    assert _finishes(d, "t1") == []
    _resume(log, tmp_path, d, 2)
    assert log.read_text().splitlines().count("t1") == 1  # taken over, not rerun
    assert _finishes(d, "t1") == [("attempt_finished", True), ("task_finished", True)]
    assert [r["task_id"] for r in _journal(d) if r["kind"] == "task_finished"].count("t0") == 1
    _resume(log, tmp_path, d, 2)  # idempotent: nothing journaled twice
    assert _finishes(d, "t1") == [("attempt_finished", True), ("task_finished", True)]
    assert [r["task_id"] for r in _journal(d) if r["kind"] == "task_finished"].count("t0") == 1


def test_resume_journals_a_saved_attempt_of_an_unfinished_task(tmp_path: Path) -> None:  # contract R13
    # killed between the attempt's result.json and the task's commit (the rename out of running/)
    log = tmp_path / "agent.log"
    d = run_dir(run([program(FakeBench(), _agent(log), tasks(1))], tmp_path))
    done = d / "details" / "normal" / task_dir_name("t0")
    running = d / "details" / "running" / task_dir_name("t0")
    done.rename(running)
    (running / "task.json").unlink()
    _lose_finish_lines(d, "t0")
    _resume(log, tmp_path, d, 1)
    assert log.read_text().splitlines() == ["t0"]  # the saved attempt is taken over
    assert _finishes(d, "t0") == [("attempt_finished", True), ("task_finished", False)]
    assert read_results(d)["t0"][0]["status"] == "completed"
    _resume(log, tmp_path, d, 1)
    assert _finishes(d, "t0") == [("attempt_finished", True), ("task_finished", False)]


def test_adopted_lines_compare_task_ids_as_journaled(tmp_path: Path) -> None:  # contract R13, V1
    # journal lines are scrubbed: a task id holding a secret is journaled masked, and a resume must
    # still see its finish there (comparing the raw id would add a line on every resume)
    from acx.interpreter._store import RunStore

    task_id = "task-sk-secret-9911"
    for _ in range(3):  # the run, then two resumes
        store = RunStore(tmp_path, run_id="r")
        store.scrub.add_secret(["sk-secret-9911"])
        store.records.journal_adopted(task_id, [1], "normal")
        store.close()
    text = (tmp_path / "journal.jsonl").read_text()
    assert "sk-secret-9911" not in text
    assert [r["kind"] for r in _journal(tmp_path)] == ["attempt_finished", "task_finished"]


def test_resume_takes_a_result_file_that_is_not_an_object_as_damaged(tmp_path: Path) -> None:  # contract R13
    # a result.json holding a JSON list (not an object) is damaged like undecodable JSON: resume skips
    # it the same way instead of stopping with an internal error (AttributeError on .items())
    log = tmp_path / "agent.log"
    d = run_dir(run([program(FakeBench(), _agent(log), tasks(2))], tmp_path, task_concurrency=1))
    damaged = sorted(d.glob("details/*/*/attempt-1/result.json"))
    assert len(damaged) == 2
    damaged[0].write_text("[1, 2]")
    _resume(log, tmp_path, d, 2)
