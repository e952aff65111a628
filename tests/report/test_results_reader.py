"""The public read API of run directories (acx.results) and `acx results tasks`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acx.cli import main
from acx.errors import AcxResultsError
from acx.report import load_run
from acx.results import RunReader, find_runs
from acx.testing.results import synthetic_tasks, write_run


def test_reader_lists_tasks_attempts_retries_and_running(tmp_path: Path) -> None:
    tasks = synthetic_tasks(30, seed=3)
    tasks[0]["attempts"][0]["retries"] = [{"reason": "overloaded"}]
    tasks[1]["state"] = "running"  # attempt 1 finished, attempt 2 not yet
    tasks[1]["attempts"] = [tasks[1]["attempts"][0], dict(tasks[1]["attempts"][0])]
    tasks[2]["state"] = "running"  # nothing finished: no file says which task the directory is
    tasks[2]["attempts"] = tasks[2]["attempts"][:1]
    run = RunReader.open(write_run(tmp_path / "r", tasks, status="running"))
    records = {t.task_id: t for t in run.tasks()}
    assert len(records) == 29 and "task-00002" not in records
    running = records["task-00001"]
    assert running.state == "running" and running.attempts[0].result is not None
    assert len(running.attempts) == 1 and running.task_json == {}  # attempt 2 wrote nothing yet
    assert records["task-00000"].attempts[0].retries[0]["reason"] == "overloaded"
    # The report also lists the started task no file names yet, with its phases from the events.
    run_data = load_run(str(run.path))
    rows = {r[0]: r for r in run_data.rows}
    assert len(rows) == 30 and rows["task-00002"][1:4] == ["running", "cat-2", "running"]
    detail = next(d for d in run_data.details if d["task_id"] == "task-00002")
    assert [p[0] for p in detail["attempts"][0]["phases"]][:2] == ["open_environment", "prepare_task"]
    assert "task-00002" not in run_data.values  # nothing to compare yet
    assert records["task-00003"].attempts[0].result["task_id"] == "task-00003"
    assert run.is_live() is False  # status running, but no process holds the lock


def test_phase_timings_and_torn_progress_line(tmp_path: Path) -> None:
    tasks = synthetic_tasks(2, seed=1, error_rate=0.0)
    tasks[0]["attempts"][0]["duration"] = 7.0
    d = write_run(tmp_path / "r", tasks)
    with open(d / "progress.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"event": "phase_changed", "task_id": "task-0')  # a writer killed mid-line
    timings = RunReader.open(d).phase_timings()
    phases = timings[("task-00000", 1)]
    assert [p.phase for p in phases][:2] == ["open_environment", "prepare_task"]
    assert sum(p.seconds or 0 for p in phases) == pytest.approx(7.0)


def test_live_when_lock_is_held(tmp_path: Path) -> None:
    import fcntl
    import os

    d = write_run(tmp_path / "r", synthetic_tasks(1), status="running")
    fd = os.open(d / ".acx" / "lock", os.O_RDWR)
    try:
        os.write(fd, str(os.getpid()).encode())
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert RunReader.open(d).locked_by() == os.getpid()
        assert RunReader.open(d).is_live()
    finally:
        os.close(fd)
    assert not RunReader.open(d).is_live()


def test_bad_run_directories_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(AcxResultsError) as e:
        RunReader.open(tmp_path)
    assert e.value.code == "E0603"
    (tmp_path / "run_info.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(AcxResultsError) as e:
        RunReader.open(tmp_path)
    assert e.value.code == "E0618"
    (tmp_path / "run_info.json").write_text(json.dumps({"schema_version": "other"}), encoding="utf-8")
    with pytest.raises(AcxResultsError) as e:
        RunReader.open(tmp_path)
    assert e.value.code == "E0604"


def test_find_runs(tmp_path: Path) -> None:
    write_run(tmp_path / "qa" / "20260101_000000", synthetic_tasks(1))
    write_run(tmp_path / "batch" / "tb" / "20260102_000000", synthetic_tasks(1))
    (tmp_path / "empty").mkdir()
    assert [p.relative_to(tmp_path).as_posix() for p in find_runs(tmp_path)] == [
        "batch/tb/20260102_000000",
        "qa/20260101_000000",
    ]


def test_results_tasks_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write_run(tmp_path / "r", synthetic_tasks(200, seed=5))
    assert main(["results", "tasks", str(d), "--format", "json"]) == 0
    every = json.loads(capsys.readouterr().out)["tasks"]
    assert len(every) == 200
    errors = [t for t in every if t["state"] == "error"]
    assert errors, "the synthetic set has run errors"
    code = errors[0]["codes"][0]
    assert main(["results", "tasks", str(d), "--format", "json", "--code", code]) == 0
    picked = json.loads(capsys.readouterr().out)["tasks"]
    assert picked and all(code in t["codes"] for t in picked)
    assert len(picked) == sum(code in t["codes"] for t in every)
    assert main(["results", "tasks", str(d), "--format", "json", "--score", "fail", "--category", "cat-3"]) == 0
    fails = json.loads(capsys.readouterr().out)["tasks"]
    assert fails and all(t["score"] == 0.0 and t["category"] == "cat-3" for t in fails)
    assert main(["results", "tasks", str(d), "--search", "TASK-0001"]) == 0
    text = capsys.readouterr().out
    assert "task-00010" in text and "task-00020" not in text and text.rstrip().endswith("of 200 task(s)")


def test_results_tasks_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["results", "tasks", str(tmp_path / "nope")]) == 2
    assert "E0603" in capsys.readouterr().err
