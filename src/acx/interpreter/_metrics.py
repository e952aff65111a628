"""Metrics (S1): validate observations against the contract, reduce attempts, aggregate, report.

Flow: each attempt's ``RunResult.metrics`` is checked against the benchmark's
:class:`~acx.ir.MetricContract` (:func:`validate_observations`); the strategy's reducers turn a
task's attempts into per-task values (``avg``: mean of every metric + ``pass`` for binary ones;
``pass``: the binary primary's ``pass`` only); the aggregation (``micro_weighted`` or
``category_mean``) combines tasks into a :class:`MetricSeries` per ``"<metric>.<reducer>@<k>"``.
An attempt without valid observations is *unavailable*, never a 0 (S2). A final FATAL issue in
any task invalidates the official score: ``value`` is null and ``reference_value`` keeps the score
over valid tasks.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acx.ir import ExecutionIssue, MetricContract, RunResult
from acx.stats import UNIT, Bounds, Estimate, estimate, reduce_attempts, stratified_estimate, value_bounds

__all__ = [
    "MetricReport",
    "TaskOutcome",
    "build_report",
    "render_summary",
    "task_outcome",
    "validate_observations",
]


def validate_observations(
    contract: MetricContract, metrics: dict[str, Any]
) -> tuple[dict[str, bool | int | float], list[ExecutionIssue]]:
    """Keep declared, well-typed observations; every other one becomes an ERROR issue."""
    kept: dict[str, bool | int | float] = {}
    issues: list[ExecutionIssue] = []
    for name, value in metrics.items():
        spec = contract.metrics.get(name)
        if spec is None:
            issues.append(
                ExecutionIssue(
                    severity="error",
                    phase="evaluate",
                    code="metric_undeclared",
                    message=f"observation {name!r} is not declared in the benchmark's metric contract",
                )
            )
            continue
        if spec.kind == "binary_success":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok:
            issues.append(
                ExecutionIssue(
                    severity="error",
                    phase="evaluate",
                    code="metric_invalid",
                    message=f"observation {name!r} has an invalid value for a {spec.kind} metric",
                )
            )
            continue
        kept[name] = value
    return kept, issues


@dataclass
class TaskOutcome:
    """A finished task: its final attempts (retries already resolved) and detail state."""

    task_id: str
    category: str
    attempts: list[RunResult]
    state: str  # normal | error | fatal


def task_outcome(state: str, metrics: Iterable[Mapping[str, Any]], primary: str | None) -> str:
    """A finished task's outcome as the report shows it: ``fatal``/``error`` by its state, else by
    the primary metric's mean over the attempts that observed it (``metrics``: each attempt's
    observations) — ``pass`` (1), ``fail`` (0), ``partial`` (between) or ``unscored``."""
    if state in ("fatal", "error"):
        return state
    seen = [
        _num(v)
        for m in metrics
        if primary is not None
        and isinstance(v := m.get(primary), bool | int | float)
        and not (isinstance(v, float) and math.isnan(v))
    ]
    if not seen:
        return "unscored"
    mean = sum(seen) / len(seen)
    return "pass" if mean >= 1 else "fail" if mean <= 0 else "partial"


def _num(v: bool | int | float) -> float:
    return 1.0 if v is True else 0.0 if v is False else float(v)


@dataclass
class MetricSeries:
    series_id: str
    metric_id: str
    kind: str
    reducer: str
    role: str
    aggregation: str
    k: int
    value: float | None
    reference_value: float | None
    counts: dict[str, int]
    categories: dict[str, float | None] = field(default_factory=dict)
    label: str | None = None
    #: Standard error and 95 % interval of ``reference_value`` over tasks (acx.stats).
    estimate: Estimate | None = None
    #: ``[low, high]`` the interval stays within: the metric's declared range, else the values'.
    range: Bounds | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("estimate", "range")}
        out["range"] = list(self.range) if self.range is not None else None
        est = self.estimate or Estimate(None, None, None, None, 0)
        out.update(est.to_json())
        return out


@dataclass
class MetricReport:
    k: int
    strategy: str
    aggregation: str
    series: list[MetricSeries]
    evaluation_failed: bool
    counts: dict[str, int]
    errors_by_code: dict[str, int]
    categories: dict[str, dict[str, int]]
    extra: dict[str, Any] = field(default_factory=dict)

    def headline(self) -> MetricSeries | None:
        return next((s for s in self.series if s.role == "headline"), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": "acx.metrics.v1",
            "k": self.k,
            "strategy": self.strategy,
            "aggregation": self.aggregation,
            "evaluation_failed": self.evaluation_failed,
            "counts": self.counts,
            "errors_by_code": self.errors_by_code,
            "categories": self.categories,
            "series": [s.to_json() for s in self.series],
            "metrics": {s.series_id: s.value for s in self.series},
            "extra": self.extra,
        }


def _reducers(contract: MetricContract, strategy: str) -> list[tuple[str, str]]:
    """(metric id, reducer) pairs the strategy reports, primary first.

    ``avg`` reports every metric's mean and, for binary metrics, ``pass``; further reducers a
    metric declares (``max``, ``median``, ``mode``, ``at_least_<m>``, ``pass_at_<k>``) follow.
    """
    primary = contract.primary_id()
    ordered = [primary, *[m for m in contract.metrics if m != primary]]
    pairs: list[tuple[str, str]] = []
    for mid in ordered:
        spec = contract.metrics[mid]
        if strategy == "pass":
            if mid == primary and spec.kind == "binary_success":
                pairs.append((mid, "pass"))
            continue
        names = ["avg", *(["pass"] if spec.kind == "binary_success" else [])]
        names += [r for r in spec.reducers if r not in names and r != "mean"]
        pairs += [(mid, r) for r in names]
    return pairs


def _task_value(attempts: Sequence[RunResult], metric: str, reducer: str) -> float | None:
    values = [_num(a.metrics[metric]) for a in attempts if metric in a.metrics]
    return reduce_attempts(values, reducer)


def _aggregate(
    per_task: list[tuple[str, float]], mode: str, *, declared: Bounds | None
) -> tuple[Estimate, dict[str, float | None]]:
    """Combine per-task values; the estimate carries the SE and a 95 % interval that stays
    within the metric's range (declared, else the values'; acx.stats)."""
    by_cat: dict[str, list[float]] = defaultdict(list)
    for cat, v in per_task:
        by_cat[cat].append(v)
    cats: dict[str, float | None] = {c: sum(vs) / len(vs) for c, vs in sorted(by_cat.items())}
    values = [v for _, v in per_task]
    bounds = value_bounds(values, declared)
    if mode == "category_mean":
        return stratified_estimate([by_cat[c] for c in sorted(by_cat)], bounds=bounds), cats
    return estimate(values, bounds=bounds), cats


def build_report(
    tasks: Sequence[TaskOutcome],
    contract: MetricContract,
    *,
    k: int,
    strategy: str,
    aggregation: str = "micro_weighted",
) -> MetricReport:
    primary = contract.primary_id()
    invalid = {t.task_id for t in tasks if t.state == "fatal"}
    errors: Counter[str] = Counter()
    for t in tasks:
        for a in t.attempts:
            for issue in a.issues:
                if issue.severity != "warning":
                    errors[issue.code] += 1
    series: list[MetricSeries] = []
    for mid, reducer in _reducers(contract, strategy):
        spec = contract.metrics[mid]
        per_task: list[tuple[str, float]] = []
        counts = Counter(total=len(tasks), evaluated=0, error=0, unavailable=0, invalidated=len(invalid))
        for t in tasks:
            if t.state != "normal":
                counts["error"] += 1
            value = _task_value(t.attempts, mid, reducer)
            if value is None:
                counts["unavailable"] += 1
                continue
            counts["evaluated"] += 1
            if t.task_id not in invalid:
                per_task.append((t.category, value))
        rate = spec.kind == "binary_success" or reducer == "pass" or reducer.startswith(("at_least_", "pass_at_"))
        declared = UNIT if rate else spec.bounds()
        est, cats = _aggregate(per_task, aggregation, declared=declared)
        value = est.mean
        is_headline = mid == primary and reducer == ("pass" if strategy == "pass" else "avg")
        series.append(
            MetricSeries(
                series_id=f"{mid}.{reducer}@{k}",
                metric_id=mid,
                kind=spec.kind,
                reducer=reducer,
                role="headline" if is_headline else "auxiliary",
                aggregation=aggregation,
                k=k,
                value=None if invalid else value,
                reference_value=value,
                counts=dict(counts),
                categories=cats,
                label=spec.display.label,
                estimate=est,
                range=value_bounds([v for _, v in per_task], declared),
            )
        )
    categories: dict[str, dict[str, int]] = defaultdict(lambda: Counter())
    for t in tasks:
        categories[t.category]["tasks"] += 1
        categories[t.category][t.state] += 1
    states = Counter(t.state for t in tasks)
    extra: dict[str, Any] = {}
    judge = _judge_usage(tasks)
    if judge:
        extra["judge_usage"] = judge  # a grader's tokens, apart from the agents' own usage
    return MetricReport(
        k=k,
        strategy=strategy,
        aggregation=aggregation,
        series=series,
        evaluation_failed=bool(invalid),
        counts={"tasks": len(tasks), **{s: states.get(s, 0) for s in ("normal", "error", "fatal")}},
        errors_by_code=dict(errors.most_common()),
        categories={c: dict(v) for c, v in sorted(categories.items())},
        extra=extra,
    )


def _judge_usage(tasks: Sequence[TaskOutcome]) -> dict[str, float]:
    """Token counts scorers spent on graders (``telemetry.judge_usage``), summed over attempts."""
    total: dict[str, float] = {}
    for t in tasks:
        for a in t.attempts:
            usage = a.telemetry.get("judge_usage")
            if isinstance(usage, dict):
                for key, value in usage.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        total[key] = total.get(key, 0) + value
    return total


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.4f}".rstrip("0").rstrip(".") if v not in (0.0, 1.0) else f"{v:.0f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def render_summary(report: MetricReport, header: dict[str, Any]) -> str:
    """``summary.md``: overview, metrics table, per-category table, errors by code."""
    lines = [f"# acx run {header.get('run_id', '')} — {header.get('request', '')}", ""]
    for key in ("status", "benchmark", "harness", "model", "environment", "started_at", "finished_at"):
        if header.get(key) is not None:
            lines.append(f"- **{key.replace('_', ' ')}**: {header[key]}")
    head = report.headline()
    c = report.counts
    lines += [
        "",
        f"**{c['tasks']} task(s)**: {c['normal']} clean, {c['error']} with errors, {c['fatal']} fatal"
        + (f"; headline {head.series_id} = {_pct(head.value)}" if head else ""),
        "",
    ]
    if report.evaluation_failed:
        lines += [
            "**Evaluation failed:** final FATAL issues invalidate the official score; "
            f"the reference value over valid tasks is {_pct(head.reference_value) if head else '—'}.",
            "",
        ]
    lines += [f"Attempt plan: k={report.k}, strategy={report.strategy}, aggregation={report.aggregation}", ""]
    lines += [
        "| metric | value | ± SE | 95% CI | evaluated | unavailable | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in report.series:
        est = s.estimate
        se = "—" if est is None or est.stderr is None else _fmt(est.stderr)
        ci = "—" if est is None or est.ci_low is None else f"[{_fmt(est.ci_low)}, {_fmt(est.ci_high)}]"
        lines.append(
            f"| {s.series_id}{' (headline)' if s.role == 'headline' else ''} | {_fmt(s.value)} | {se} | {ci} | "
            f"{s.counts['evaluated']} | {s.counts['unavailable']} | {s.counts['error']} |"
        )
    lines += [
        "",
        "SE: standard error over tasks (attempts of a task are reduced first, so tasks are the clusters); "
        "95% CI: mean ± t(0.975, n-1)·SE. An invalidated run's interval refers to its reference value.",
    ]
    if head is not None and head.categories:
        # The column is the headline series per category (its mean over the category's evaluated
        # tasks), labelled with the series id like the table above — not a share of tasks passed.
        lines += [
            "",
            "## By category",
            "",
            f"| category | tasks | {head.series_id} | clean | errors | fatal |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for cat, value in head.categories.items():
            cc = report.categories.get(cat, {})
            lines.append(
                f"| {cat} | {cc.get('tasks', 0)} | {_pct(value)} | {cc.get('normal', 0)} | "
                f"{cc.get('error', 0)} | {cc.get('fatal', 0)} |"
            )
    if report.errors_by_code:
        lines += ["", "## Issues by code", "", "| code | count |", "|---|---:|"]
        lines += [f"| {code} | {n} |" for code, n in report.errors_by_code.items()]
    judge = report.extra.get("judge_usage")
    if judge:
        lines += [
            "",
            "## Grader usage",
            "",
            "Tokens spent by model-graded scorers, counted apart from the agents' own usage.",
            "",
            "| prompt tokens | completion tokens | cached tokens |",
            "|---:|---:|---:|",
            f"| {judge.get('prompt_tokens', 0):g} | {judge.get('completion_tokens', 0):g} | "
            f"{judge.get('cached_tokens', 0):g} |",
        ]
    return "\n".join(lines) + "\n"
