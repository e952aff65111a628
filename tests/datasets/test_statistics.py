"""Statistics: standard errors and 95 % intervals checked by hand, pass@k, reducers (issue 15 §3).

The fixed result set: four tasks, two attempts each, scalar scores
  t1 [0.2, 0.4]  t2 [0.5, 0.7]  t3 [0.9, 0.9]  t4 [0.1, 0.3]
Task means .3 .6 .9 .2 → mean .5; deviations -.2 .1 .4 -.3 → Σd² = .30; s² = .30/3 = .1;
SE = sqrt(.1/4) = 0.1581139; t(0.975, 3) = 3.182446; half width = 0.5031895.
Clustered (CR1) by hand: cluster sums of deviations -.4 .2 .8 -.6 → Σ = 1.2; × 4/3 = 1.6;
sqrt = 1.2649111; / N=8 = 0.1581139 — the same number (equal cluster sizes).
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acx.interpreter._metrics import TaskOutcome, build_report, render_summary
from acx.ir import MetricContract, MetricSpec, RunResult
from acx.stats import clustered_stderr, estimate, pass_at_k, reduce_attempts, stratified_estimate, t_critical_975

FIXED = {"t1": [0.2, 0.4], "t2": [0.5, 0.7], "t3": [0.9, 0.9], "t4": [0.1, 0.3]}
HAND_SE = 0.15811388300841897
HAND_HALF = 3.182446305 * HAND_SE


def _outcomes(
    values: dict[str, list[float]], metric: str = "score", cats: dict[str, str] | None = None
) -> list[TaskOutcome]:
    return [
        TaskOutcome(
            tid,
            (cats or {}).get(tid, "all"),
            [RunResult(task_id=tid, attempt=i + 1, metrics={metric: v}) for i, v in enumerate(vs)],
            "normal",
        )
        for tid, vs in values.items()
    ]


def test_standard_error_and_interval_match_the_hand_computation() -> None:
    report = build_report(_outcomes(FIXED), MetricContract.scalar(), k=2, strategy="avg")
    head = report.headline()
    assert head is not None and head.estimate is not None
    assert head.value == pytest.approx(0.5)
    assert head.estimate.stderr == pytest.approx(HAND_SE, abs=1e-9)
    assert head.estimate.ci_low == pytest.approx(0.5 - HAND_HALF, abs=1e-6)
    assert head.estimate.ci_high == pytest.approx(0.5 + HAND_HALF, abs=1e-6)
    row = json.loads(json.dumps(report.to_json()))["series"][0]
    assert row["stderr"] == pytest.approx(HAND_SE) and row["n"] == 4
    assert row["ci95"] == pytest.approx([0.5 - HAND_HALF, 0.5 + HAND_HALF], abs=1e-6)


def test_clustered_stderr_by_hand() -> None:
    assert clustered_stderr(list(FIXED.values())) == pytest.approx(1.2649110640673518 / 8)
    assert clustered_stderr(list(FIXED.values())) == pytest.approx(HAND_SE)
    assert clustered_stderr([[1.0, 0.0]]) is None


def test_binary_interval_is_clipped_to_rates() -> None:
    outcomes = _outcomes({"a": [1.0], "b": [1.0], "c": [0.0]}, metric="correct")
    outcomes = [
        TaskOutcome(
            o.task_id,
            o.category,
            [RunResult(task_id=o.task_id, metrics={"correct": bool(o.attempts[0].metrics["correct"])})],
            "normal",
        )
        for o in outcomes
    ]
    head = build_report(outcomes, MetricContract.binary(), k=1, strategy="avg").headline()
    assert head is not None and head.estimate is not None
    # s² = 1/3, SE = sqrt(1/9) = 1/3, t(2) = 4.302653 → [2/3 - 1.434, 2/3 + 1.434] clipped to [0, 1]
    assert head.estimate.stderr == pytest.approx(1 / 3)
    assert (head.estimate.ci_low, head.estimate.ci_high) == (0.0, 1.0)


def test_one_task_has_no_standard_error() -> None:
    est = estimate([0.7])
    assert est.mean == 0.7 and est.stderr is None and est.ci_low is None
    assert estimate([]).mean is None


def test_category_mean_uses_the_stratified_error() -> None:
    # Categories x: [.3, .6] (mean .45, s² .045, se² .0225); y: [.9, .2] (mean .55, s² .245, se² .1225)
    # value = (.45 + .55)/2 = .5; SE = sqrt(.0225 + .1225) / 2
    cats = {"t1": "x", "t2": "x", "t3": "y", "t4": "y"}
    head = build_report(
        _outcomes(FIXED, cats=cats), MetricContract.scalar(), k=2, strategy="avg", aggregation="category_mean"
    ).headline()
    assert head is not None and head.estimate is not None
    assert head.value == pytest.approx(0.5)
    assert head.estimate.stderr == pytest.approx(math.sqrt(0.0225 + 0.1225) / 2)
    assert stratified_estimate([[1.0], [0.0, 1.0]]).stderr is None


def test_t_quantiles() -> None:
    assert t_critical_975(1) == pytest.approx(12.7062, abs=1e-4)
    assert t_critical_975(30) == pytest.approx(2.0423, abs=1e-4)
    assert t_critical_975(31) == pytest.approx(2.0395, abs=1e-4)
    assert t_critical_975(120) == pytest.approx(1.9799, abs=1e-4)
    assert t_critical_975(10**6) == pytest.approx(1.95997, abs=1e-4)


def test_pass_at_k_by_hand_and_edge_cases() -> None:
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 4, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_share_of_k_subsets_with_a_success(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute)


@pytest.mark.parametrize(
    ("values", "reducer", "expected"),
    [
        ([1, 0, 1], "median", 1),
        ([0.2, 0.4, 0.9, 0.1], "median", 0.3),
        ([0, 1], "mode", 0),
        ([1, 1, 0], "mode", 1),
        ([0.2, 0.9], "max", 0.9),
        ([1, 1, 0], "at_least_2", 1),
        ([1, 0, 0], "at_least_2", 0),
        ([1, 0, 0, 0], "pass_at_2", 0.5),
        ([1], "pass_at_2", None),
        ([0, 0], "pass", 0),
        ([0.5, 1.0], "mean", 0.75),
    ],
)
def test_reducers(values: list[float], reducer: str, expected: float | None) -> None:
    got = reduce_attempts([float(v) for v in values], reducer)
    assert got == (None if expected is None else pytest.approx(expected))


def test_declared_reducers_become_series_and_summary_shows_errors() -> None:
    contract = MetricContract(
        metrics={
            "correct": MetricSpec(
                kind="binary_success",
                reducers=["avg", "pass", "pass_at_2", "at_least_2", "median"],
                primary=True,
                role="success",
            )
        }
    )
    outcomes = [
        TaskOutcome(
            t, "all", [RunResult(task_id=t, attempt=i + 1, metrics={"correct": v}) for i, v in enumerate(vs)], "normal"
        )
        for t, vs in {"a": [True, False, False, False], "b": [True, True, False, False], "c": [False] * 4}.items()
    ]
    report = build_report(outcomes, contract, k=4, strategy="avg")
    values = {s.series_id: s.value for s in report.series}
    # pass@2 per task: a 1-C(3,2)/C(4,2)=.5, b 1-C(2,2)/C(4,2)=5/6, c 0 → mean 4/9
    assert values["correct.pass_at_2@4"] == pytest.approx((0.5 + 5 / 6) / 3)
    assert values["correct.at_least_2@4"] == pytest.approx(1 / 3)
    assert values["correct.median@4"] == pytest.approx(1 / 6)
    text = render_summary(report, {"run_id": "r"})
    assert "| metric | value | ± SE | 95% CI |" in text
    assert "correct.pass_at_2@4" in text


@given(
    st.integers(2, 12).flatmap(
        lambda g: st.integers(1, 5).flatmap(
            lambda m: st.lists(
                st.lists(st.floats(0, 1, allow_nan=False), min_size=m, max_size=m), min_size=g, max_size=g
            )
        )
    )
)
def test_se_over_task_means_is_the_clustered_se_for_equal_attempt_counts(clusters: list[list[float]]) -> None:
    means = [sum(c) / len(c) for c in clusters]
    est = estimate(means)
    cr1 = clustered_stderr(clusters)
    assert est.stderr is not None and cr1 is not None
    assert est.stderr == pytest.approx(cr1, abs=1e-9)


# ---- the interval stays within the metric's range (issue 24 item 14) --------------------------

#: Ten tasks, eight scored 1 and two 0: mean 0.8, SE 0.1333, t(0.975, 9)·SE = 0.3016 — the
#: unclipped interval is [0.4984, 1.1016], past the top of a 0–1 score.
EIGHT_OF_TEN = {f"t{i}": [1.0 if i < 8 else 0.0] for i in range(10)}


def test_a_zero_one_score_interval_never_passes_one_in_metrics_and_summary() -> None:  # contract S1
    # Harbor's score is the verifier's 0–1 reward (a scalar metric, not a success rate).
    from acx.components.benchmarks.harbor import HarborBenchmark

    report = build_report(_outcomes(EIGHT_OF_TEN), HarborBenchmark.metric_contract, k=1, strategy="avg")
    head = report.headline()
    assert head is not None and head.estimate is not None and head.kind == "scalar"
    assert head.estimate.ci_low == pytest.approx(0.8 - 2.262157163 * math.sqrt(0.16 / 9), abs=1e-6)
    assert head.estimate.ci_high == 1.0
    row = json.loads(json.dumps(report.to_json()))["series"][0]
    assert row["ci95"][1] == 1.0 and row["range"] == [0.0, 1.0]
    summary = render_summary(report, {"run_id": "r"})
    assert "[0.4984, 1]" in summary or "[0.4984, 1.0000]" in summary, summary
    assert "1.1016" not in summary


def test_declared_scorer_ranges_reach_the_contract() -> None:  # contract S1
    from acx.components.scorers import build_scorers, metric_contract_for

    contract = metric_contract_for(build_scorers(["f1", "exact"]))
    assert contract.metrics["score"].bounds() == (0.0, 1.0)
    assert contract.metrics["exact"].bounds() == (0.0, 1.0)
    report = build_report(_outcomes(EIGHT_OF_TEN), contract, k=1, strategy="avg")
    assert report.headline().estimate.ci_high == 1.0  # type: ignore[union-attr]


def test_a_metric_without_a_range_is_not_clipped() -> None:  # contract S1
    # A scalar with no declared range (tokens, seconds…): clipping to the values' own range would
    # give a narrower interval than the data supports.
    report = build_report(_outcomes(FIXED), MetricContract.scalar(), k=2, strategy="avg")
    assert report.headline().estimate.ci_low == pytest.approx(0.5 - HAND_HALF, abs=1e-6)  # type: ignore[union-attr]
    assert report.to_json()["series"][0]["range"] is None


def test_a_value_outside_the_declared_range_widens_it() -> None:  # contract S1
    # Harbor verifiers may write a -1 reward: the range then reaches down to it, never past the data.
    values = {"a": [-1.0], "b": [1.0], "c": [1.0]}
    from acx.components.benchmarks.harbor import HarborBenchmark

    report = build_report(_outcomes(values), HarborBenchmark.metric_contract, k=1, strategy="avg")
    est = report.headline().estimate  # type: ignore[union-attr]
    assert est is not None and est.ci_low == -1.0 and est.ci_high == 1.0


@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=40),
    st.sampled_from(["micro_weighted", "category_mean"]),
)
def test_interval_of_a_bounded_score_stays_in_its_range(values: list[float], aggregation: str) -> None:
    # contract S1: whatever the scores, the interval lies in [0, 1] and contains the mean.
    cats = {f"t{i}": f"c{i % 2}" for i in range(len(values))}
    outcomes = _outcomes({f"t{i}": [v] for i, v in enumerate(values)}, cats=cats)
    contract = MetricContract.scalar(score_range=(0.0, 1.0))
    report = build_report(outcomes, contract, k=1, strategy="avg", aggregation=aggregation)
    est = report.headline().estimate  # type: ignore[union-attr]
    assert est is not None and est.mean is not None
    if est.ci_low is not None:
        assert 0.0 <= est.ci_low <= est.mean + 1e-12 and est.mean - 1e-12 <= est.ci_high <= 1.0
