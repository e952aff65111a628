"""Evaluation checkpoints and evaluation-only recovery (contract A9, with S1/S2, A6–A8).

The agent of these tests appends one line to a side-effect log each time it runs: a recovery
that "does not run the agent" is proved by that log, not by acx's own bookkeeping.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest
from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks

from acx.interpreter import _checkpoint
from acx.interpreter._fs import task_dir_name
from acx.ir import EnvironmentSpec, ExecutionPlan, PreparedTask, RunResult, TaskSpec


def _agent(log: Path) -> PyHarness:
    async def execute(prepared: PreparedTask, session: Any, plan: Any) -> RunResult:
        with log.open("a") as fh:
            fh.write(f"{prepared.task_id}\n")
        return RunResult(task_id=prepared.task_id, final_answer=prepared.input.prompt.upper())

    return PyHarness(execute)


def _agent_runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


class _FlakyVerifier(FakeBench):
    """Evaluation that fails while ``broken`` exists, and fingerprints ``tests`` (Harbor-like)."""

    def __init__(self, tests: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.tests = tests

    def recovery_inputs(self, task: TaskSpec) -> dict[str, str]:
        return {"tests": str(self.tests)}

    async def evaluate(self, task: TaskSpec, prepared: PreparedTask, result: RunResult, *a: Any, **k: Any) -> RunResult:
        self.calls.append(("evaluate", task.task_id))
        if (self.tests / "broken").exists():
            raise RuntimeError("verifier crashed")
        ok = result.final_answer == task.ground_truth
        bonus = (self.tests / "test.sh").read_text().strip() == "strict"
        return msgspec.structs.replace(result, metrics={"correct": ok and not bonus})


def _tests_dir(tmp: Path, *, broken: bool) -> Path:
    d = tmp / "tests"
    d.mkdir(exist_ok=True)
    (d / "test.sh").write_text("lenient\n")
    if broken:
        (d / "broken").write_text("x")
    return d


def _checkpoint_of(d: Path, state: str, task_id: str = "t0", n: int = 1) -> Path:
    return d / "details" / state / task_dir_name(task_id) / f"attempt-{n}" / "checkpoint.json"


def test_checkpoint_written_before_evaluation_private_and_unpolluted(tmp_path: Path) -> None:
    # contract A9, S2: a failed scoring leaves the checkpoint as written before evaluation
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=True)
    result = run([program(_FlakyVerifier(tests_dir), _agent(log), tasks(1))], tmp_path)
    d = run_dir(result)
    (attempt,) = read_results(d)["t0"]
    assert attempt["status"] == "eval_error"
    path = _checkpoint_of(d, "error")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["schema_version"] == _checkpoint.CHECKPOINT_SCHEMA and data["run_completed"] is True
    run_result = data["inference"]["run_result"]
    assert run_result["final_answer"] == "Q0" and run_result["metrics"] == {}
    assert not any(i["phase"] == "evaluate" for i in run_result["issues"] + data["run_issues"])
    assert data["preparation"]["prepared_task"]["input"]["prompt"] == "q0"
    assert set(data["network_policies"]) == {"run", "evaluation"}
    assert data["inputs"]["tests"] == {
        "broken": hashlib.sha256(b"x").hexdigest(),
        "test.sh": hashlib.sha256(b"lenient\n").hexdigest(),
    }


def _fsyncs_of_a_run(tmp: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> int:
    calls = [0]
    real = os.fsync

    def counting(fd: int) -> None:
        calls[0] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    result = run([program(FakeBench(), _agent(tmp / "agent.log"), tasks(n))], tmp)
    monkeypatch.setattr(os, "fsync", real)
    assert all(_checkpoint_of(run_dir(result), "normal", f"t{i}").is_file() for i in range(n))
    return calls[0]


def test_a_checkpoint_costs_no_fsync_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # contract A9, R13: every attempt writes its checkpoint, and it is made durable by the result's
    # group commit (syncfs), not by an fsync per attempt (≈1.4 ms of the trio thread each;
    # bench/run_overhead.py): a run of 6 tasks fsyncs as often as a run of 1.
    assert _fsyncs_of_a_run(tmp_path / "one", 1, monkeypatch) == _fsyncs_of_a_run(tmp_path / "six", 6, monkeypatch)


def test_resume_with_changed_tests_refuses_and_reruns(tmp_path: Path) -> None:
    # contract A9, A8: a test file changed since the checkpoint: recovery is refused with a message
    # naming it, and the attempt runs again (its earlier files kept under retries/)
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=True)
    d = run_dir(run([program(_FlakyVerifier(tests_dir), _agent(log), tasks(2))], tmp_path))
    assert _agent_runs(log) == 2
    (tests_dir / "broken").unlink()
    resumed = run([program(_FlakyVerifier(tests_dir), _agent(log), tasks(2))], tmp_path, resume_dirs={"req": str(d)})
    assert resumed.status == "completed"
    assert _agent_runs(log) == 4
    (res,) = read_results(d)["t0"]
    assert res["status"] == "completed"
    refused = [i for i in res["issues"] if i["code"] == "checkpoint_refused"]
    assert refused and "tests changed: broken" in refused[0]["message"]
    attempt = d / "details" / "normal" / task_dir_name("t0") / "attempt-1"
    assert list(attempt.glob("retries/*/checkpoint.json"))  # the refused checkpoint is kept (A8)


def test_resume_recovers_when_inputs_are_unchanged(tmp_path: Path) -> None:
    # contract A9: the verifier failed for a reason outside its inputs (a crash); resume evaluates
    # again from the checkpoint and the agent's side-effect log shows no second run
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=False)
    crashed = {"n": 0}

    async def crash_once(task: TaskSpec, result: RunResult, session: Any) -> RunResult:
        crashed["n"] += 1
        raise RuntimeError("grader unreachable")

    first = run([program(_FakeFixed(tests_dir, crash_once), _agent(log), tasks(2))], tmp_path)
    d = run_dir(first)
    assert _agent_runs(log) == 2 and crashed["n"] == 2
    assert {r[0]["status"] for r in read_results(d).values()} == {"eval_error"}
    before = _checkpoint_of(d, "error").read_bytes()
    events: list[Any] = []
    bench = _FakeFixed(tests_dir, None)
    resumed = run([program(bench, _agent(log), tasks(2))], tmp_path, resume_dirs={"req": str(d)}, events=events)
    assert resumed.status == "completed" and resumed.exit_code == 0
    assert _agent_runs(log) == 2  # not one agent command more
    results = read_results(d)
    assert {r[0]["status"] for r in results.values()} == {"completed"}
    assert results["t0"][0]["metrics"] == {"correct": True}
    assert results["t0"][0]["telemetry"]["recovered_from"]["kind"] == "resume"
    assert _checkpoint_of(d, "normal").read_bytes() == before  # never rewritten
    td = d / "details" / "normal" / task_dir_name("t0") / "attempt-1"
    assert list(td.glob("retries/evaluation-*/result.json"))  # the failed evaluation is kept (A8)
    phases = [e.phase for e in events if e.event == "phase_changed" and e.task_id == "t0"]
    assert phases == ["recover_evaluation", "evaluate"]


class _FakeFixed(_FlakyVerifier):
    def __init__(self, tests: Path, evaluate: Any) -> None:
        super().__init__(tests)
        self._override = evaluate

    async def evaluate(self, task: TaskSpec, prepared: PreparedTask, result: RunResult, *a: Any, **k: Any) -> RunResult:
        if self._override is not None:
            return await self._override(task, result, None)
        return await super().evaluate(task, prepared, result, *a, **k)


def _crash(task: TaskSpec, result: RunResult, session: Any) -> Any:
    async def go() -> RunResult:
        raise RuntimeError("grader unreachable")

    return go()


def test_no_checkpoint_resume_keeps_the_finished_task(tmp_path: Path) -> None:
    # contract A9: --no-checkpoint-resume (checkpoint_resume=False) disables recovery
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=False)
    d = run_dir(run([program(_FakeFixed(tests_dir, _crash), _agent(log), tasks(1))], tmp_path))
    again = run(
        [program(_FakeFixed(tests_dir, None), _agent(log), tasks(1))],
        tmp_path,
        resume_dirs={"req": str(d)},
        checkpoint_resume=False,
    )
    assert again.status == "completed"
    assert read_results(d)["t0"][0]["status"] == "eval_error" and _agent_runs(log) == 1


def test_reuse_recovers_into_a_new_run_and_changed_tests_refuse(tmp_path: Path) -> None:
    # contract A9, A6: --reuse evaluates from the source's checkpoints (copies, no agent); a changed
    # test file refuses recovery, names the file, and the attempt reruns
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=False)
    src = run_dir(run([program(_FakeFixed(tests_dir, _crash), _agent(log), tasks(1))], tmp_path))
    second = run([program(_FakeFixed(tests_dir, None), _agent(log), tasks(1))], tmp_path, reuse={"req": src.name})
    d2 = run_dir(second)
    assert _agent_runs(log) == 1
    (res,) = read_results(d2)["t0"]
    assert res["status"] == "completed" and res["telemetry"]["recovered_from"]["kind"] == "reuse"
    assert _checkpoint_of(d2, "normal").is_file() and _checkpoint_of(src, "error").is_file()
    assert _checkpoint_of(d2, "normal").stat().st_ino != _checkpoint_of(src, "error").stat().st_ino
    (tests_dir / "test.sh").write_text("strict\n")
    third = run([program(_FakeFixed(tests_dir, None), _agent(log), tasks(1))], tmp_path, reuse={"req": src.name})
    (res3,) = read_results(run_dir(third))["t0"]
    assert _agent_runs(log) == 2  # refused: the attempt ran again
    refused = [i for i in res3["issues"] if i["code"] == "checkpoint_refused"]
    assert refused and "tests changed: test.sh" in refused[0]["message"]


def test_reuse_mode_reruns_the_attempt_and_says_so(tmp_path: Path) -> None:
    # contract A9: evaluation mode reuse keeps no checkpoint; a failed evaluation reruns the attempt
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=False)
    reuse_mode = {"evaluation_environment_mode": "reuse"}
    d = run_dir(
        run(
            [program(_FakeFixed(tests_dir, _crash), _agent(log), tasks(1), plan_overrides=reuse_mode)],
            tmp_path,
        )
    )
    assert not list(d.glob("details/*/*/attempt-1/checkpoint.json"))
    run(
        [program(_FakeFixed(tests_dir, None), _agent(log), tasks(1), plan_overrides=reuse_mode)],
        tmp_path,
        resume_dirs={"req": str(d)},
    )
    assert _agent_runs(log) == 2
    (res,) = read_results(d)["t0"]
    assert res["status"] == "completed"
    (issue,) = [i for i in res["issues"] if i["code"] == "checkpoint_refused"]
    assert "evaluation mode 'reuse'" in issue["message"] and "reruns" in issue["message"]


def test_regrade_evaluates_every_recoverable_attempt_and_lists_the_rest(tmp_path: Path) -> None:
    # contract A9, S1: a regrade runs no agent; an attempt without a checkpoint is listed, not run
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=False)

    async def execute(prepared: PreparedTask, session: Any, plan: Any) -> RunResult:
        with log.open("a") as fh:
            fh.write(f"{prepared.task_id}\n")
        if prepared.task_id == "t1":
            raise RuntimeError("agent crashed")
        return RunResult(task_id=prepared.task_id, final_answer=prepared.input.prompt.upper())

    src = run_dir(run([program(_FakeFixed(tests_dir, None), PyHarness(execute), tasks(2))], tmp_path))
    assert read_results(src)["t0"][0]["metrics"] == {"correct": True}
    (tests_dir / "test.sh").write_text("strict\n")  # a new verifier version
    regraded = run(
        [program(_FakeFixed(tests_dir, None), PyHarness(execute), tasks(2))], tmp_path, regrade={"req": str(src)}
    )
    d = run_dir(regraded)
    assert _agent_runs(log) == 2  # the source run's two agent runs, nothing since
    results = read_results(d)
    assert results["t0"][0]["metrics"] == {"correct": False}  # the new verifier's verdict
    assert results["t0"][0]["telemetry"]["recovered_from"]["changed_evaluation_inputs"] == ["tests changed: test.sh"]
    (bad,) = results["t1"][0]["issues"]
    assert bad["code"] == "not_recoverable" and "no evaluation checkpoint" in bad["message"]
    info = json.loads((d / "run_info.json").read_text())
    assert info["regraded_from"]["path"] == str(src)


def test_corrupted_artifact_refuses_recovery(tmp_path: Path) -> None:
    # contract A9, A6, A7: an artifact whose checksum differs from the manifest refuses recovery
    attempt_dir = tmp_path / "attempt-1"
    (attempt_dir / "artifacts" / "app").mkdir(parents=True)
    art = attempt_dir / "artifacts" / "app" / "out.py"
    art.write_text("print(1)\n")
    entry = {
        "source": "/app/out.py",
        "destination": "app/out.py",
        "kind": "file",
        "status": "collected",
        "files": [{"path": "", "type": "file", "size": 9, "sha256": hashlib.sha256(b"print(1)\n").hexdigest()}],
    }
    manifest = {"directory": "artifacts", "complete": True, "entries": [entry]}
    (attempt_dir / "submission-1.manifest.json").write_text(json.dumps(manifest))
    task = TaskSpec(task_id="t0", question="q0")
    plan = ExecutionPlan(task_id="t0", attempt=1, environment=EnvironmentSpec(id="fake"), collect_artifacts=True)
    data = _checkpoint.build(
        run_id="r",
        task=task,
        attempt=1,
        plan=plan,
        result=RunResult(task_id="t0", final_answer="x"),
        prepared=PreparedTask(task_id="t0"),
        artifacts={"manifest": "submission-1.manifest.json"},
        attempt_dir=attempt_dir,
        inputs={"task": "h"},
    )
    path = attempt_dir / "checkpoint.json"
    path.write_text(json.dumps(data))
    ok = _checkpoint.check(path, task=task, attempt=1, plan=plan, inputs={"task": "h"})
    assert isinstance(ok, _checkpoint.Recovery)
    art.write_text("print(2)\n")
    refused = _checkpoint.check(path, task=task, attempt=1, plan=plan, inputs={"task": "h"})
    assert refused == "artifact /app/out.py: app/out.py does not match its checksum"
    art.unlink()
    assert "is missing" in str(_checkpoint.check(path, task=task, attempt=1, plan=plan, inputs={"task": "h"}))
    assert _checkpoint.check(path, task=task, attempt=1, plan=plan, inputs={"task": "other"}) == "task content changed"


def test_resume_evaluates_an_attempt_killed_between_checkpoint_and_result(tmp_path: Path) -> None:
    # contract A9, R13: the disk state a kill during evaluation leaves (checkpoint, no result.json,
    # task in running/) is evaluated on resume without running the agent
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=False)
    d = run_dir(run([program(_FakeFixed(tests_dir, None), _agent(log), tasks(1))], tmp_path))
    done = d / "details" / "normal" / task_dir_name("t0")
    running = d / "details" / "running" / task_dir_name("t0")
    done.rename(running)
    (running / "task.json").unlink()
    (running / "attempt-1" / "result.json").unlink()
    run([program(_FakeFixed(tests_dir, None), _agent(log), tasks(1))], tmp_path, resume_dirs={"req": str(d)})
    assert _agent_runs(log) == 1
    (res,) = read_results(d)["t0"]
    assert res["status"] == "completed" and res["telemetry"]["recovered_from"]["kind"] == "resume"


def test_a_checkpoint_that_cannot_be_written_is_a_warning(tmp_path: Path, monkeypatch: Any) -> None:
    # contract A9: failing to save the checkpoint costs only the recovery; the attempt is evaluated
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device (simulated)")

    monkeypatch.setattr(_checkpoint, "write", refuse)
    log = tmp_path / "agent.log"
    d = run_dir(run([program(FakeBench(), _agent(log), tasks(1))], tmp_path))
    (res,) = read_results(d)["t0"]
    assert res["status"] == "completed" and res["metrics"] == {"correct": True}
    (issue,) = res["issues"]
    assert issue["code"] == "checkpoint_failed" and issue["severity"] == "warning"
    assert not list(d.glob("details/*/*/attempt-1/checkpoint.json"))


def test_changed_benchmark_params_refuse_recovery_on_reuse(tmp_path: Path) -> None:
    # contract A9, B2: the benchmark params are an evaluation input; reuse with other params reruns
    from acx.ir import BenchmarkSpec

    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=False)
    src = run_dir(run([program(_FakeFixed(tests_dir, _crash), _agent(log), tasks(1))], tmp_path))
    again = program(_FakeFixed(tests_dir, None), _agent(log), tasks(1))
    again.request = msgspec.structs.replace(again.request, benchmark=BenchmarkSpec(id="fakebench", params={"x": 1}))
    (res,) = read_results(run_dir(run([again], tmp_path, reuse={"req": src.name})))["t0"]
    assert _agent_runs(log) == 2
    (issue,) = [i for i in res["issues"] if i["code"] == "checkpoint_refused"]
    assert issue["message"] == "evaluation-only recovery refused: benchmark params changed"


def test_a_scrubbed_checkpoint_is_compared_as_written(tmp_path: Path) -> None:
    # contract A9, V1: the checkpoint is written scrubbed; a secret that happens to sit in a field
    # the check compares (here the task id and an input) must not make it look changed on resume
    from acx.secrets import Scrubber

    scrub = Scrubber()
    scrub.add_secret(["sk-abcdef123"])
    attempt_dir = tmp_path / "attempt-1"
    attempt_dir.mkdir()
    task = TaskSpec(task_id="job-sk-abcdef123", question="q0")
    plan = ExecutionPlan(task_id=task.task_id, attempt=1, environment=EnvironmentSpec(id="fake"))
    inputs = {"task": "h-sk-abcdef123"}
    data = _checkpoint.build(
        run_id="r",
        task=task,
        attempt=1,
        plan=plan,
        result=RunResult(task_id=task.task_id, final_answer="x"),
        prepared=PreparedTask(task_id=task.task_id),
        artifacts={},
        attempt_dir=attempt_dir,
        inputs=inputs,
    )
    path = _checkpoint.write(attempt_dir, data, scrub)
    assert "sk-abcdef123" not in path.read_text()
    assert isinstance(
        _checkpoint.check(path, task=task, attempt=1, plan=plan, inputs=inputs, scrub=scrub), _checkpoint.Recovery
    )
    changed = _checkpoint.check(path, task=task, attempt=1, plan=plan, inputs={"task": "other"}, scrub=scrub)
    assert changed == "task content changed"


def test_strict_recovery_refuses_and_marks_instead_of_rerunning_the_agent(tmp_path: Path) -> None:
    # contract A9 (issue 24 item 15): under --recovery strict a refused checkpoint (tests changed)
    # costs no agent run: the attempt is eval_error with the reason, the terminal says so, and a
    # later resume with the old tests back recovers it from the checkpoint still there.
    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=True)
    d = run_dir(run([program(_FlakyVerifier(tests_dir), _agent(log), tasks(2))], tmp_path))
    assert _agent_runs(log) == 2
    (tests_dir / "broken").unlink()
    events: list[Any] = []
    strict = run(
        [program(_FlakyVerifier(tests_dir), _agent(log), tasks(2))],
        tmp_path,
        resume_dirs={"req": str(d)},
        recovery="strict",
        events=events,
    )
    assert _agent_runs(log) == 2  # not one agent command more
    (res,) = read_results(d)["t0"]
    assert res["status"] == "eval_error"
    (issue,) = [i for i in res["issues"] if i["code"] == "recovery_refused"]
    assert issue["severity"] == "error" and "tests changed: broken" in issue["message"]
    assert "--recovery rerun" in issue["message"]
    said = [e for e in events if e.event == "recovery_refused" and e.task_id == "t0"]
    assert said and said[0].payload["strict"] is True and "tests changed" in said[0].payload["reason"]
    assert strict.status == "completed"
    # The checkpoint is kept: a resume (default policy) after restoring the input evaluates from it.
    (tests_dir / "broken").write_text("x")
    run([program(_FlakyVerifier(tests_dir), _agent(log), tasks(2))], tmp_path, resume_dirs={"req": str(d)})
    assert _agent_runs(log) == 2
    assert read_results(d)["t0"][0]["status"] == "eval_error"  # the verifier itself still crashes
    assert read_results(d)["t0"][0]["telemetry"]["recovered_from"]["kind"] == "resume"


def test_default_recovery_says_on_the_terminal_why_an_agent_runs_again(tmp_path: Path) -> None:
    # contract A9 (issue 24 item 15): the default policy reruns the agent, and the console says why
    import io

    from acx.interpreter._events import make_console

    log = tmp_path / "agent.log"
    tests_dir = _tests_dir(tmp_path, broken=True)
    d = run_dir(run([program(_FlakyVerifier(tests_dir), _agent(log), tasks(1))], tmp_path))
    (tests_dir / "broken").unlink()
    stream = io.StringIO()
    console = make_console("plain", stream=stream)
    events: list[Any] = []
    again = [program(_FlakyVerifier(tests_dir), _agent(log), tasks(1))]
    run(again, tmp_path, resume_dirs={"req": str(d)}, events=events)
    for e in events:
        console.emit(e)
    assert _agent_runs(log) == 2
    lines = [ln for ln in stream.getvalue().splitlines() if "recovery refused" in ln]
    assert lines and "t0 attempt 1: its agent runs again" in lines[0] and "tests changed: broken" in lines[0]
