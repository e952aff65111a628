"""Results store: layout, atomic writes, resume in place, reuse into a new run (reference §4)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks

from acx.drivers.fake import FakeDriver
from acx.errors import AcxResultsError
from acx.interpreter._fs import atomic_write_json, task_dir_name
from acx.interpreter._store import RunStore
from acx.ir import AttemptsSpec, ExecutionSpec, OutputSpec, RunResult


def test_layout(tmp_path: Path) -> None:
    result = run([program(FakeBench(), PyHarness(), tasks(2))], tmp_path)
    d = run_dir(result)
    assert d.parent.name == "req" and d.parent.parent == tmp_path / "results"
    for name in (
        "run_info.json",
        "metrics.json",
        "summary.md",
        "progress.jsonl",
        "progress.json",
        "run.log",
        "journal.jsonl",
    ):
        assert (d / name).is_file(), name
    td = d / "details" / "normal" / task_dir_name("t0")
    task = json.loads((td / "task.json").read_text())
    assert task["schema_version"] == "acx.task.v1" and task["attempts"] == {"1": "attempt-1"}
    assert task["attempt_plan"] == {"k": 1, "strategy": "avg"}
    assert json.loads((td / "attempt-1" / "result.json").read_text())["metrics"] == {"correct": True}
    assert list((d / "details" / "running").iterdir()) == []


def test_task_dir_names_are_safe_and_unique() -> None:
    a, b = task_dir_name("a/b"), task_dir_name("a_b")
    assert "/" not in a and a != b and a.startswith("a_b--")
    assert len(task_dir_name("x" * 500)) <= 80 + 2 + 16


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


def test_explicit_run_id_must_not_exist(tmp_path: Path) -> None:
    RunStore.create(tmp_path, "ns", run_id="r1")
    with pytest.raises(AcxResultsError) as info:
        RunStore.create(tmp_path, "ns", run_id="r1")
    assert "--reuse" in (info.value.help or "")


def _counting(sleep_for: dict[str, float]) -> tuple[PyHarness, list[str]]:
    calls: list[str] = []

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        calls.append(f"{prepared.task_id}#{plan.attempt}")
        await trio.sleep(sleep_for.get(prepared.task_id, 1))
        return RunResult(task_id=prepared.task_id, final_answer=prepared.input.prompt.upper())

    return PyHarness(execute), calls


def test_resume_runs_only_unfinished_attempts(tmp_path: Path) -> None:
    # A run cut short (deadline) then resumed in place: every task exactly once, nothing redone.
    slow = {"t3": 100, "t4": 100}
    harness, _ = _counting(slow)
    ex = ExecutionSpec(attempts=AttemptsSpec(k=2))
    first = run(
        [program(FakeBench(), harness, tasks(5), execution=ex)],
        tmp_path,
        timeout_seconds=10,
        task_concurrency=5,
    )
    assert first.status == "timed_out"
    d = run_dir(first)
    done_first = set(read_results(d))
    assert done_first == {"t0", "t1", "t2"}
    harness2, calls2 = _counting({})
    second = run(
        [program(FakeBench(), harness2, tasks(5), execution=ex)],
        tmp_path,
        resume_dirs={"req": str(d)},
        task_concurrency=5,
    )
    assert second.status == "completed" and run_dir(second) == d
    assert sorted(calls2) == ["t3#1", "t3#2", "t4#1", "t4#2"]
    results = read_results(d)
    assert sorted(results) == [f"t{i}" for i in range(5)] and all(len(v) == 2 for v in results.values())
    assert json.loads((d / "metrics.json").read_text())["counts"]["tasks"] == 5
    kinds = [json.loads(line)["kind"] for line in (d / "journal.jsonl").read_text().splitlines()]
    assert "run_resumed" in kinds


def test_resume_keeps_finished_attempt_of_unfinished_task(tmp_path: Path) -> None:
    # Attempt 1 finished, attempt 2 was interrupted: only attempt 2 runs again.
    calls: list[int] = []

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        calls.append(plan.attempt)
        await trio.sleep(1 if plan.attempt == 1 else 1000)
        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    ex = ExecutionSpec(attempts=AttemptsSpec(k=2))
    first = run([program(FakeBench(), PyHarness(execute), tasks(1), execution=ex)], tmp_path, timeout_seconds=10)
    d = run_dir(first)
    assert (d / "details" / "running" / task_dir_name("t0") / "attempt-1" / "result.json").is_file()
    calls.clear()

    async def quick(prepared: Any, session: Any, plan: Any) -> RunResult:
        calls.append(plan.attempt)
        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    run(
        [program(FakeBench(), PyHarness(quick), tasks(1), execution=ex)],
        tmp_path,
        resume_dirs={"req": str(d)},
    )
    assert calls == [2]
    assert len(read_results(d)["t0"]) == 2


def test_reuse_copies_finished_tasks_into_a_new_run(tmp_path: Path) -> None:
    harness, _ = _counting({})
    first = run([program(FakeBench(), harness, tasks(3))], tmp_path)
    src = run_dir(first)
    harness2, calls2 = _counting({})
    second = run([program(FakeBench(), harness2, tasks(4))], tmp_path, reuse={"req": src.name})
    dst = run_dir(second)
    assert dst != src and calls2 == ["t3#1"]
    results = read_results(dst)
    assert sorted(results) == ["t0", "t1", "t2", "t3"]
    assert results["t0"][0]["artifacts"]["reuse_history"]["source_run"] == src.name
    info = json.loads((dst / "run_info.json").read_text())
    assert info["reused_from"]["run_id"] == src.name and "t0" in info["resolved_execution_plans"]
    assert not os.path.samefile(dst / "details", src / "details")


def test_reuse_refuses_a_different_attempt_plan(tmp_path: Path) -> None:
    first = run([program(FakeBench(), PyHarness(), tasks(1))], tmp_path)
    ex = ExecutionSpec(attempts=AttemptsSpec(k=2))
    with pytest.raises(AcxResultsError) as info:
        run(
            [program(FakeBench(), PyHarness(), tasks(1), execution=ex)],
            tmp_path,
            reuse={"req": run_dir(first).name},
        )
    assert info.value.code == "E0608"


def test_reuse_reruns_retry_eligible_failures(tmp_path: Path) -> None:
    async def boom(prepared: Any, session: Any, plan: Any) -> RunResult:
        raise RuntimeError("flaky")

    first = run([program(FakeBench(), PyHarness(boom), tasks(1))], tmp_path)
    harness, calls = _counting({})
    ex = ExecutionSpec(max_retries=1)
    run([program(FakeBench(), harness, tasks(1), execution=ex)], tmp_path, reuse={"req": None})
    assert calls == ["t0#1"]
    assert run_dir(first).exists()


def test_explicit_output_run_id(tmp_path: Path) -> None:
    p = program(FakeBench(), PyHarness(), tasks(1))
    p.request = p.request.__class__(
        **{
            **{f: getattr(p.request, f) for f in p.request.__struct_fields__},
            "output": OutputSpec(run_id="mine"),
        }
    )
    result = run([p], tmp_path)
    assert run_dir(result).name == "mine"


def _add_artifact(attempt: Path, content: bytes, recorded: bytes) -> None:
    import hashlib

    (attempt / "artifacts" / "out").mkdir(parents=True)
    (attempt / "artifacts" / "out" / "a.txt").write_bytes(content)
    entry = {
        "source": "/app/out",
        "destination": "out",
        "status": "collected",
        "kind": "directory",
        "files": [
            {"path": "", "type": "dir"},
            {"path": "a.txt", "type": "file", "size": len(recorded), "sha256": hashlib.sha256(recorded).hexdigest()},
        ],
    }
    manifest = {"schema_version": 1, "directory": "artifacts", "complete": True, "created_ns": 1, "entries": [entry]}
    (attempt / "submission-x.manifest.json").write_text(json.dumps(manifest))


def test_reuse_verifies_artifact_bytes(tmp_path: Path) -> None:
    # contract A6: reusing a result verifies its artifact bytes; missing or corrupt → rerun.
    first = run([program(FakeBench(), PyHarness(), tasks(2))], tmp_path)
    src = run_dir(first)
    attempts = {p.parent.name.split("--")[0]: p for p in src.glob("details/normal/*/attempt-1")}
    _add_artifact(attempts["t0"], b"good", b"good")
    _add_artifact(attempts["t1"], b"tampered", b"original")
    harness, calls = _counting({})
    second = run([program(FakeBench(), harness, tasks(2))], tmp_path, reuse={"req": src.name})
    assert calls == ["t1#1"]
    dst = run_dir(second)
    copied = next(dst.glob("details/normal/t0--*/attempt-1/artifacts/out/a.txt"))
    assert copied.read_bytes() == b"good"
    assert os.stat(copied).st_ino != os.stat(attempts["t0"] / "artifacts/out/a.txt").st_ino


def test_journal_records_are_json_lines_with_utc_seconds(tmp_path: Path) -> None:  # contract R13
    import re

    store = RunStore.create(tmp_path, "ns", run_id="j")
    store.journal("attempt_started", fsync=False, task_id="tâche/1", attempt=1, where=tmp_path)
    store.journal("attempt_finished", task_id="tâche/1", attempt=1, status="normal")
    store.close()
    records = store.records.read_journal()
    assert [r["kind"] for r in records] == ["attempt_started", "attempt_finished"]
    assert records[0]["task_id"] == "tâche/1" and records[0]["where"] == str(tmp_path)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["t"]) for r in records)


@pytest.mark.parametrize("strategy", ["avg", "pass"])
def test_a_finished_attempt_is_on_disk_before_the_next_one_starts(
    tmp_path: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # contract R13: a killed run never redoes a finished attempt — so its result.json must be durable
    # before the task's next attempt starts, not only with the task's final commit. (A driver that
    # finds its own sandboxes opens one without a durable wait, as host_process does.)
    monkeypatch.setattr(FakeDriver, "sessions_discoverable", True)
    seen: list[tuple[int, list[str]]] = []

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        on_disk = sorted(p.parent.name for p in (tmp_path / "results").rglob("attempt-*/result.json"))
        seen.append((plan.attempt, on_disk))
        return RunResult(task_id=prepared.task_id, final_answer="wrong")

    ex = ExecutionSpec(attempts=AttemptsSpec(k=3, strategy=strategy))  # type: ignore[arg-type]
    result = run([program(FakeBench(), PyHarness(execute), tasks(1), execution=ex)], tmp_path)
    assert result.status == "completed"
    assert seen == [(1, []), (2, ["attempt-1"]), (3, ["attempt-1", "attempt-2"])]


def test_resolved_secrets_are_scrubbed_from_result_files_literals_are_not(tmp_path: Path) -> None:
    # Standards: secrets never reach result files — also when a component copies them into the
    # result (an agent printing its key, a verifier's output tail). A literal value from the spec
    # is no secret: an answer that contains it stays intact.
    from acx.ir import EnvironmentSpec

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        return RunResult(
            task_id=prepared.task_id,
            final_answer="Q0 key=sk-run-secret-1234 mode=plain-mode",
            extra={"tail": ["verifier saw sk-eval-secret-5678"]},
        )

    env = EnvironmentSpec(
        id="fake",
        run_env_variables={"KEY": "${RUN_KEY}", "MODE": "plain-mode"},
        evaluation_env_variables={"GRADER": "${EVAL_KEY}"},
    )
    environ = {"RUN_KEY": "sk-run-secret-1234", "EVAL_KEY": "sk-eval-secret-5678"}
    result = run([program(FakeBench(), PyHarness(execute), tasks(1), environment=env)], tmp_path, environ=environ)
    text = "".join(p.read_text() for p in run_dir(result).rglob("*.json*"))
    assert "sk-run-secret-1234" not in text and "sk-eval-secret-5678" not in text
    assert "key=******** mode=plain-mode" in text and "verifier saw ********" in text


def test_a_task_that_fails_outside_its_attempts_counts_as_fatal(tmp_path: Path) -> None:
    # The score must not be computed over the tasks that happened to survive (contract S2).
    import dataclasses

    ex = ExecutionSpec(attempts=AttemptsSpec(k=2))
    prog = program(FakeBench(), PyHarness(), tasks(3), execution=ex)
    plan_attempt = prog.plan_attempt

    def broken(task: Any, attempt: int) -> Any:
        if task.task_id == "t1" and attempt == 2:
            raise RuntimeError("planner bug")
        return plan_attempt(task, attempt)

    result = run([dataclasses.replace(prog, plan_attempt=broken)], tmp_path)
    assert result.status == "failed"
    d = run_dir(result)
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["counts"]["tasks"] == 3 and metrics["evaluation_failed"] is True
    task_json = json.loads((d / "details" / "fatal" / task_dir_name("t1") / "task.json").read_text())
    assert task_json["state"] == "fatal"
    assert "planner bug" in (result.requests[0].error or "")


def _add_tree_artifact(attempt: Path, *, extra: bool = False, link_target: str = "a.txt") -> None:
    import hashlib

    out = attempt / "artifacts" / "out"
    out.mkdir(parents=True)
    (out / "a.txt").write_bytes(b"A")
    os.chmod(out / "a.txt", 0o644)
    os.symlink(link_target, out / "link")
    os.symlink(".", out / "self")  # harmless as a link; fatal to a copy that follows links
    if extra:
        (out / "injected.txt").write_text("not collected")
    entry = {
        "source": "/app/out",
        "destination": "out",
        "status": "collected",
        "kind": "directory",
        "files": [
            {"path": "a.txt", "type": "file", "mode": 0o644, "size": 1, "sha256": hashlib.sha256(b"A").hexdigest()},
            {"path": "link", "type": "symlink", "target": "a.txt", "size": 0},
            {"path": "self", "type": "symlink", "target": ".", "size": 0},
        ],
    }
    manifest = {"schema_version": 1, "directory": "artifacts", "complete": True, "created_ns": 1, "entries": [entry]}
    (attempt / "submission-x.manifest.json").write_text(json.dumps(manifest))


def test_reuse_copies_symlinks_as_symlinks_and_refuses_tampered_trees(tmp_path: Path) -> None:
    # contract A6: a byte-for-byte copy (a followed `self -> .` link used to recurse until the
    # disk was full); an extra file or a retargeted link is tampering → the task runs again.
    first = run([program(FakeBench(), PyHarness(), tasks(3))], tmp_path)
    src = run_dir(first)
    attempts = {p.parent.name.split("--")[0]: p for p in src.glob("details/normal/*/attempt-1")}
    _add_tree_artifact(attempts["t0"])
    _add_tree_artifact(attempts["t1"], extra=True)
    _add_tree_artifact(attempts["t2"], link_target="/etc/passwd")
    harness, calls = _counting({})
    second = run([program(FakeBench(), harness, tasks(3))], tmp_path, reuse={"req": src.name})
    assert sorted(calls) == ["t1#1", "t2#1"]
    out = next(run_dir(second).glob("details/normal/t0--*/attempt-1/artifacts/out"))
    assert os.readlink(out / "link") == "a.txt" and os.readlink(out / "self") == "."


def test_slow_checkpoint_write_does_not_let_the_mock_clock_reach_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The A9 checkpoint is written off the trio thread only when the store's io_threads is on: on
    # trio's MockClock a worker thread that takes a while (a loaded CI machine) let the clock jump to
    # the run's deadline while every task waited on it, and the run timed out with nothing done.
    import time

    from acx.interpreter import _checkpoint

    real_write = _checkpoint.write

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(_checkpoint, "write", slow_write)
    harness, _ = _counting({"t3": 100})
    result = run([program(FakeBench(), harness, tasks(4))], tmp_path, timeout_seconds=10, task_concurrency=4)
    assert result.status == "timed_out"
    assert set(read_results(run_dir(result))) == {"t0", "t1", "t2"}
