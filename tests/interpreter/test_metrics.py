"""Metric contract validation, strategy reducers, aggregation and summary (S1, S2)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acx.interpreter._metrics import TaskOutcome, build_report, render_summary, validate_observations
from acx.ir import ExecutionIssue, MetricContract, RunResult


def _task(tid: str, values: list[bool | None], cat: str = "all", state: str = "normal") -> TaskOutcome:
    attempts = [
        RunResult(task_id=tid, attempt=i + 1, metrics={} if v is None else {"correct": v}) for i, v in enumerate(values)
    ]
    return TaskOutcome(tid, cat, attempts, state)


def test_validate_observations_types() -> None:
    # contract S1: strict bool for binary metrics, finite numbers for scalar ones.
    c = MetricContract.scalar(binary=("correct",))
    kept, issues = validate_observations(c, {"score": 0.0, "correct": False})
    assert kept == {"score": 0.0, "correct": False} and issues == []  # a valid 0 is not an error (S2)
    kept, issues = validate_observations(c, {"score": True, "correct": 1, "x": 1.0})
    assert kept == {} and sorted(i.code for i in issues) == [
        "metric_invalid",
        "metric_invalid",
        "metric_undeclared",
    ]
    kept, issues = validate_observations(c, {"score": float("nan")})
    assert kept == {} and issues[0].code == "metric_invalid"


def test_avg_and_pass_reducers_and_category_mean() -> None:
    tasks = [_task("a", [True, False], "x"), _task("b", [False, False], "x"), _task("c", [True, True], "y")]
    r = build_report(tasks, MetricContract.binary(), k=2, strategy="avg")
    values = {s.series_id: s.value for s in r.series}
    assert values == {"correct.avg@2": 0.5, "correct.pass@2": 2 / 3}
    assert r.headline() is not None and r.headline().series_id == "correct.avg@2"  # type: ignore[union-attr]
    r2 = build_report(tasks, MetricContract.binary(), k=2, strategy="avg", aggregation="category_mean")
    assert r2.headline().value == (0.25 + 1.0) / 2  # type: ignore[union-attr]
    r3 = build_report(tasks, MetricContract.binary(), k=2, strategy="pass")
    assert [s.series_id for s in r3.series] == ["correct.pass@2"]


def test_unavailable_is_not_zero() -> None:
    # contract S2: an attempt without observations is unavailable, never a 0.
    tasks = [_task("a", [True]), _task("b", [None], state="error")]
    r = build_report(tasks, MetricContract.binary(), k=1, strategy="avg")
    head = r.headline()
    assert head is not None and head.value == 1.0 and head.counts["unavailable"] == 1 and head.counts["error"] == 1


def test_fatal_invalidates_the_official_score() -> None:
    tasks = [_task("a", [True]), _task("b", [False], state="fatal")]
    tasks[1].attempts[0] = RunResult(
        task_id="b", issues=[ExecutionIssue(severity="fatal", phase="run", code="harness_failed")]
    )
    r = build_report(tasks, MetricContract.binary(), k=1, strategy="avg")
    head = r.headline()
    assert r.evaluation_failed and head is not None and head.value is None and head.reference_value == 1.0
    text = render_summary(r, {"run_id": "r", "request": "q", "status": "failed"})
    assert "Evaluation failed" in text and "| harness_failed | 1 |" in text


@given(st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=1, max_size=30))
def test_pass_at_k_bounds_avg(matrix: list[list[bool]]) -> None:
    tasks = [_task(f"t{i}", list(row)) for i, row in enumerate(matrix)]
    r = build_report(tasks, MetricContract.binary(), k=3, strategy="avg")
    v = {s.reducer: s.value for s in r.series}
    assert v["avg"] is not None and v["pass"] is not None
    assert 0.0 <= v["avg"] <= v["pass"] <= 1.0


def test_summary_has_category_table() -> None:
    tasks = [_task("a", [True], "math"), _task("b", [False], "geo")]
    text = render_summary(build_report(tasks, MetricContract.binary(), k=1, strategy="avg"), {"run_id": "r"})
    assert "| math | 1 | 100.0% |" in text and "| geo | 1 | 0.0% |" in text
