"""Attempts (k, avg/pass, parallel only when safe), runtime retries and backoff (P3, S2)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks

from acx.interpreter._attempt import backoff_seconds, retry_reason
from acx.ir import AttemptsSpec, ExecutionIssue, ExecutionSpec, RunResult


def _issue(sev: str, code: str = "x", msg: str = "") -> ExecutionIssue:
    return ExecutionIssue(severity=sev, phase="run", code=code, message=msg)  # type: ignore[arg-type]


def test_retry_reason_rules() -> None:
    # FATAL always retries; ERROR only when a pattern matches message or code; WARNING never.
    assert retry_reason([_issue("fatal")], None) is not None
    assert retry_reason([_issue("error", "model_failed", "HTTP 503")], None) is None
    assert retry_reason([_issue("error", "model_failed", "HTTP 503")], [r"HTTP 5\d\d"]) is not None
    assert retry_reason([_issue("error", "model_failed")], ["^model_"]) is not None
    assert retry_reason([_issue("warning", "model_failed")], [".*"]) is None


@given(st.integers(0, 10), st.floats(0.1, 10), st.floats(10, 100), st.integers(0, 2**32))
def test_backoff_is_bounded_and_jittered(retry: int, lo: float, hi: float, seed: int) -> None:
    # Exponential backoff with jitter: within [base/2, base], base = min(hi, lo·2^retry).
    d = backoff_seconds(retry, lo, hi, random.Random(seed))
    base = min(hi, lo * 2**retry)
    assert base / 2 <= d <= base <= hi


def _flaky(fail_times: int, code_sev: str = "fatal") -> tuple[PyHarness, list[int]]:
    calls = [0]

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        calls[0] += 1
        if calls[0] <= fail_times:
            if code_sev == "fatal":
                raise RuntimeError(f"transient failure {calls[0]}")
            return RunResult(task_id=prepared.task_id, issues=[_issue("error", "model_failed", "HTTP 503")])
        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    return PyHarness(execute), calls


def test_fatal_issue_is_retried_within_budget_and_plan_is_reused(tmp_path: Path) -> None:
    # contract P3: runtime retries reuse the attempt's plan (planned once per semantic attempt).
    harness, calls = _flaky(2)
    plans: list[tuple[str, int]] = []
    ex = ExecutionSpec(max_retries=2, retry_min_delay_seconds=5, retry_max_delay_seconds=60)
    events: list[Any] = []
    result = run([program(FakeBench(), harness, tasks(1), execution=ex, plan_log=plans)], tmp_path, events=events)
    assert calls[0] == 3
    assert plans == [("t0", 1)]
    res = read_results(run_dir(result))["t0"][0]
    assert res["status"] == "completed" and res["retry_count"] == 2 and res["metrics"] == {"correct": True}
    retries = sorted((run_dir(result) / "details" / "normal").glob("*/attempt-1/retries/*.json"))
    assert len(retries) == 2
    record = json.loads(retries[0].read_text())
    assert record["schema_version"] == "acx.retry.v1" and record["issues"][0]["code"] == "harness_failed"
    retry_events = [e for e in events if e.event == "attempt_retry"]
    assert [e.payload["retry"] for e in retry_events] == [1, 2]
    assert 2.5 <= retry_events[0].payload["delay_seconds"] <= 5 and 5 <= retry_events[1].payload["delay_seconds"] <= 10


def test_retry_budget_exhausted_keeps_last_failure(tmp_path: Path) -> None:
    harness, calls = _flaky(10)
    ex = ExecutionSpec(max_retries=1, retry_min_delay_seconds=1, retry_max_delay_seconds=1)
    result = run([program(FakeBench(), harness, tasks(1), execution=ex)], tmp_path)
    assert calls[0] == 2
    res = read_results(run_dir(result))["t0"][0]
    assert res["status"] == "run_error" and res["retry_count"] == 1
    assert result.requests[0].status == "failed"


def test_error_retried_only_with_matching_pattern(tmp_path: Path) -> None:
    harness, calls = _flaky(1, "error")
    ex = ExecutionSpec(max_retries=3, retry_min_delay_seconds=0.1)
    run([program(FakeBench(), harness, tasks(1), execution=ex)], tmp_path / "a")
    assert calls[0] == 1
    harness, calls = _flaky(1, "error")
    ex = ExecutionSpec(max_retries=3, retry_min_delay_seconds=0.1, retry_pattern_list=["HTTP 5"])
    run([program(FakeBench(), harness, tasks(1), execution=ex)], tmp_path / "b")
    assert calls[0] == 2


def _answers(seq: list[str]) -> tuple[PyHarness, list[int]]:
    calls = [0]

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        calls[0] += 1
        return RunResult(task_id=prepared.task_id, final_answer=seq[(plan.attempt - 1) % len(seq)])

    return PyHarness(execute), calls


def test_k_attempts_avg_runs_all_and_plans_each(tmp_path: Path) -> None:
    # contract P3: one plan per semantic attempt.
    harness, calls = _answers(["Q0", "no", "Q0"])
    plans: list[tuple[str, int]] = []
    ex = ExecutionSpec(attempts=AttemptsSpec(k=3, strategy="avg"))
    result = run([program(FakeBench(), harness, tasks(1), execution=ex, plan_log=plans)], tmp_path)
    assert calls[0] == 3 and plans == [("t0", 1), ("t0", 2), ("t0", 3)]
    metrics = json.loads((run_dir(result) / "metrics.json").read_text())
    assert metrics["metrics"]["correct.avg@3"] == pytest.approx(2 / 3)
    assert metrics["metrics"]["correct.pass@3"] == 1.0
    info = json.loads((run_dir(result) / "run_info.json").read_text())
    assert set(info["resolved_execution_plans"]["t0"]["attempts"]) == {"1", "2", "3"}  # contract P9


def test_pass_strategy_stops_at_first_correct(tmp_path: Path) -> None:
    harness, calls = _answers(["no", "Q0", "Q0"])
    ex = ExecutionSpec(attempts=AttemptsSpec(k=3, strategy="pass"))
    result = run([program(FakeBench(), harness, tasks(1), execution=ex)], tmp_path)
    assert calls[0] == 2
    metrics = json.loads((run_dir(result) / "metrics.json").read_text())
    assert list(metrics["metrics"]) == ["correct.pass@3"] and metrics["metrics"]["correct.pass@3"] == 1.0


def _concurrency_probe() -> tuple[PyHarness, dict[str, int]]:
    state = {"now": 0, "max": 0}

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await trio.sleep(1)
        state["now"] -= 1
        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    return PyHarness(execute, parallel=True), state


@pytest.mark.parametrize(
    ("bench_safe", "harness_safe", "expected"), [(True, True, 4), (True, False, 1), (False, True, 1)]
)
def test_attempts_parallel_only_when_both_declare_it_safe(
    tmp_path: Path, bench_safe: bool, harness_safe: bool, expected: int
) -> None:
    harness, state = _concurrency_probe()
    harness.parallel_attempts_safe = harness_safe  # type: ignore[misc]
    ex = ExecutionSpec(attempts=AttemptsSpec(k=4))
    run(
        [program(FakeBench(parallel=bench_safe), harness, tasks(1), execution=ex)],
        tmp_path,
        task_concurrency=8,
    )
    assert state["max"] == expected


def test_undeclared_or_invalid_observations_are_rejected(tmp_path: Path) -> None:
    # contract S1: evaluate writes only declared, well-typed observations.
    async def evaluate(task: Any, result: Any, session: Any) -> Any:
        return msgspec.structs.replace(result, metrics={"correct": 1, "bogus": True})

    result = run([program(FakeBench(evaluate=evaluate), PyHarness(), tasks(1))], tmp_path)
    res = read_results(run_dir(result))["t0"][0]
    assert res["metrics"] == {}
    assert {i["code"] for i in res["issues"]} == {"metric_invalid", "metric_undeclared"}


def test_discarded_try_files_move_to_retries(tmp_path: Path) -> None:
    # contract A8: before the agent reruns, the previous try's files move to retries/<id>/.
    calls = [0]

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        calls[0] += 1
        out = Path(session.request.state_dir) / "artifacts"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"try{calls[0]}.txt").write_text("evidence")
        if calls[0] == 1:
            raise RuntimeError("first try crashes")
        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    ex = ExecutionSpec(max_retries=1, retry_min_delay_seconds=1)
    result = run([program(FakeBench(), PyHarness(execute), tasks(1), execution=ex)], tmp_path)
    attempt = next((run_dir(result) / "details" / "normal").glob("*/attempt-1"))
    assert sorted(p.name for p in (attempt / "artifacts").iterdir()) == ["try2.txt"]
    moved = [p for p in (attempt / "retries").iterdir() if p.is_dir()]
    assert len(moved) == 1 and (moved[0] / "artifacts" / "try1.txt").read_text() == "evidence"
