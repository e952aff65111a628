"""QA regressions in the Harbor run-time half, on the fake driver.

* Before the verifier runs, every process the agent left in the sandbox is stopped (the session's
  ``kill_stray_processes``), before ``/logs/verifier`` is wiped; a failure to stop them is an
  evaluation error, never a score.
* ``verifier_output_tail`` has the ``${VAR}``-resolved ``verifier.env`` values masked.
* summary.md's per-category column is labelled with the headline series it shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from acx.components._configs import HarborConfig
from acx.components.benchmarks._harbor_runtime import scrub_values
from acx.components.benchmarks.harbor import HarborBenchmark
from acx.drivers._base import OpenRequest
from acx.drivers.fake import FakeDriver, FakeProcess
from acx.errors import DriverError
from acx.interpreter._metrics import TaskOutcome, build_report, render_summary
from acx.ir import (
    BenchmarkSpec,
    EnvironmentSpec,
    ExecutionPlan,
    HarnessSpec,
    MetricContract,
    ModelSpec,
    RunRequest,
    RunResult,
    TaskSpec,
)

REQ = RunRequest(
    model=ModelSpec(id="m"),
    benchmark=BenchmarkSpec(id="harbor"),
    harness=HarnessSpec(id="command"),
    environment=EnvironmentSpec(id="fake"),
)
SECRET = "grader-s3cr3t-value"


def _plan(**env: Any) -> ExecutionPlan:
    return ExecutionPlan(
        task_id="h", attempt=1, environment=EnvironmentSpec(id="fake", **env), evaluation_timeout_seconds=60
    )


def _task(tmp_path: Path) -> TaskSpec:
    tests = tmp_path / "task" / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text("#!/bin/bash\n")
    return TaskSpec(task_id="h", question="q", metadata={"tests_dir": str(tests), "task_dir": str(tmp_path / "task")})


def _evaluate(
    tmp_path: Path,
    verifier: Any,
    *,
    kill: Any = None,
    scope: dict[str, str] | None = None,
    plan: ExecutionPlan | None = None,
) -> tuple[RunResult, list[str]]:
    order: list[str] = []

    async def bash(proc: FakeProcess, args: list[str]) -> int:
        if args[:1] == ["-c"] and "/tests/test.sh" in args[1]:
            order.append("verifier")
            return int(await verifier(proc))
        from acx.drivers.fake import _run_script

        return int(await _run_script(proc, args[1] if args[:1] == ["-c"] else "true"))

    async def sh(proc: FakeProcess, args: list[str]) -> int:
        if args[:1] == ["-c"] and "rm -rf /logs/verifier" in args[1]:
            order.append("wipe")
        from acx.drivers.fake import _run_script

        return int(await _run_script(proc, args[1] if args[:1] == ["-c"] else "true"))

    driver = FakeDriver(programs={"bash": bash, "sh": sh})
    bench = HarborBenchmark(HarborConfig(path="."))
    task = _task(tmp_path)
    plan = plan or _plan()

    async def go() -> RunResult:
        s = await driver.open(OpenRequest(session_id="s"))
        if kill is not None:

            async def kill_stray_processes() -> None:
                order.append("kill")
                await kill()

            s.kill_stray_processes = kill_stray_processes
        prepared = await bench.prepare_task(task, s, REQ, plan)
        with s.env_scope(scope or {}):
            return await bench.evaluate(task, prepared, RunResult(task_id="h"), REQ, plan, s)

    return trio.run(go), order


async def _reward_one(proc: FakeProcess) -> int:
    await proc.session.write_text("/logs/verifier/reward.txt", "1\n")
    return 0


def test_agent_processes_are_stopped_before_the_wipe_and_the_verifier(tmp_path: Path) -> None:
    # contract B1
    async def ok() -> None:
        return None

    res, order = _evaluate(tmp_path, _reward_one, kill=ok)
    assert order == ["kill", "wipe", "verifier"], order
    assert res.metrics == {"score": 1.0, "correct": True}


def test_processes_that_cannot_be_stopped_are_an_evaluation_error(tmp_path: Path) -> None:
    # contract B1
    async def fails() -> None:
        raise DriverError("2 process(es) still running", code="process_cleanup_failed")

    res, order = _evaluate(tmp_path, _reward_one, kill=fails)
    assert order == ["kill"], order  # the verifier never ran
    assert res.metrics == {}
    assert [(i.severity, i.phase, i.code) for i in res.issues] == [("error", "evaluate", "verifier_setup_failed")]
    assert "still running" in res.issues[0].message


def test_verifier_output_tail_masks_resolved_verifier_env(tmp_path: Path) -> None:
    # contract B1
    async def prints_secret(proc: FakeProcess) -> int:
        out = f"+ echo 'using key {SECRET}'\nusing key {SECRET}\nmode literal-mode\n"
        await proc.session.write_text("/logs/verifier/test-stdout.txt", out)
        return await _reward_one(proc)

    plan = _plan(evaluation_env_variables={"GRADER_KEY": "${QA_KEY}", "MODE": "literal-mode"})
    res, _ = _evaluate(tmp_path, prints_secret, scope={"GRADER_KEY": SECRET, "MODE": "literal-mode"}, plan=plan)
    tail = res.extra["verifier_output_tail"]
    assert SECRET not in tail and "using key ********" in tail, tail
    assert "mode literal-mode" in tail  # a literal value in task.toml is not a secret


def test_scrub_before_cut_leaves_no_fragment() -> None:
    # contract B1
    text = "x" * 10 + SECRET + "y" * 1990
    tail = scrub_values(text, [SECRET])[-2000:]
    assert SECRET[-6:] not in tail


def test_summary_category_column_is_labelled_with_the_headline_series() -> None:
    # contract B1
    # Two scored tasks (1.0 and 0.25) and one without a score: the column is the headline
    # series' category value (62.5%), so it must not claim to be a pass rate (1 of 3 passed).
    def outcome(tid: str, score: float | None) -> TaskOutcome:
        metrics = {} if score is None else {"score": score, "correct": score >= 1}
        return TaskOutcome(
            task_id=tid, category="all", attempts=[RunResult(task_id=tid, metrics=metrics)], state="normal"
        )

    tasks = [outcome("a", 1.0), outcome("b", 0.25), outcome("c", None)]
    report = build_report(tasks, MetricContract.scalar(binary=("correct",)), k=1, strategy="avg")
    text = render_summary(report, {"run_id": "r"})
    assert "pass rate" not in text
    assert "| category | tasks | score.avg@1 | clean | errors | fatal |" in text
    assert "| all | 3 | 62.5% |" in text
