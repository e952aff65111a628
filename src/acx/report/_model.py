"""What a report shows, extracted from a run directory: pure functions over :mod:`acx.results`.

:func:`load_run` reads one run into a :class:`RunData` (overview, headline with its interval,
chart data, one compact row per task, one detail record per task). Nothing here renders HTML.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from acx.results import AttemptRecord, PhaseTiming, RunReader, TaskRecord
from acx.stats import UNIT, Bounds, estimate, value_bounds

__all__ = [
    "ROW_FIELDS",
    "RunData",
    "headline_interval",
    "load_run",
    "mean_interval",
    "task_value",
    "usage_of",
]

#: Columns of a task row (a row is a list, so 10,000 rows stay small in the embedded JSON).
ROW_FIELDS = (
    "task_id",
    "state",
    "category",
    "status",
    "score",
    "codes",
    "attempts",
    "retries",
    "duration",
    "tokens",
    "answer",
)
#: Strings longer than this are cut (head and tail kept) in the embedded task details.
MAX_TEXT = 20_000
Z95 = 1.959963984540054


@dataclass
class RunData:
    """One run, ready to render."""

    path: str
    info: dict[str, Any]
    metrics: dict[str, Any] | None
    progress: dict[str, Any] | None
    live: bool
    primary: str | None
    overview: dict[str, Any]
    headline: dict[str, Any] | None
    rows: list[list[Any]]
    details: list[dict[str, Any]]
    plans: list[dict[str, Any]]
    #: task id → metric id → per-task value (mean over the attempts that observed it).
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    metric_kinds: dict[str, str] = field(default_factory=dict)
    charts: dict[str, Any] = field(default_factory=dict)
    #: ``provenance.json`` (written by ``acx run``), None when the run has none.
    provenance: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        return str(self.info.get("run_id") or "")

    @property
    def name(self) -> str:
        return f"{self.info.get('request_name') or '?'} / {self.run_id}"


# ---- per-attempt facts ---------------------------------------------------------------------------


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _num(v: Any) -> float | None:
    t = type(v)
    if t is bool:
        return 1.0 if v else 0.0
    if (t is float or t is int) and math.isfinite(v):
        return float(v)
    return None


_USAGE_KEYS = (
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cache_tokens",
    "cost_usd",
    "model_calls",
    # Calls the model-call cache answered: consumed, not paid (docs/models.md).
    "cached_calls",
    "unpaid_cost_usd",
)


def usage_of(result: dict[str, Any]) -> dict[str, float]:
    """Token usage and cost of one attempt: the model gateway's ``telemetry.model_usage``, else a
    ``usage`` mapping (result, telemetry, extra or the harness telemetry), else the sum over an
    ACTF trajectory's step metrics; {} when none."""
    harness = _d(_d(result.get("meta")).get("harness"))
    telemetry = _d(result.get("telemetry"))
    candidates = (
        telemetry.get("model_usage"),
        result.get("usage"),
        telemetry.get("usage"),
        _d(result.get("extra")).get("usage"),
        _d(harness.get("telemetry")).get("usage"),
    )
    for usage in candidates:
        if isinstance(usage, dict):
            out = {k: n for k in _USAGE_KEYS if (n := _num(usage.get(k))) is not None}
            if out:
                return out
    traj = result.get("trajectory")
    steps = traj.get("steps") if isinstance(traj, dict) else None
    if isinstance(steps, list):
        prompt = completion = 0.0
        seen = False
        for step in steps:
            metric = step.get("metric") if isinstance(step, dict) else None
            if isinstance(metric, dict):
                p, c = _num(metric.get("prompt_tokens_len")), _num(metric.get("completion_tokens_len"))
                if p is not None or c is not None:
                    seen = True
                    prompt += p or 0.0
                    completion += c or 0.0
        if seen:
            return {"prompt_tokens": prompt, "completion_tokens": completion}
    return {}


def _duration(result: dict[str, Any] | None, phases: list[PhaseTiming]) -> float | None:
    done = [p.seconds for p in phases if p.seconds is not None]
    if done:
        return round(sum(done), 3)
    tel = result.get("telemetry") if result else None
    if isinstance(tel, dict):
        for key in ("wall_seconds", "duration_seconds"):
            if (n := _num(tel.get(key))) is not None:
                return n
    return None


def task_value(attempts: list[AttemptRecord], metric: str) -> float | None:
    """The per-task value of ``metric``: the mean over the attempts that observed it (a binary
    observation counts 1/0); None when no attempt did (unavailable, never a 0)."""
    seen = [
        n
        for a in attempts
        if a.result is not None
        and isinstance(a.result.get("metrics"), dict)
        and (n := _num(a.result["metrics"].get(metric))) is not None
    ]
    return sum(seen) / len(seen) if seen else None


def _codes(task: TaskRecord) -> list[str]:
    codes: list[str] = []
    for a in task.attempts:
        for issue in (a.result or {}).get("issues") or []:
            code = _d(issue).get("code")
            if code and _d(issue).get("severity") != "warning" and str(code) not in codes:
                codes.append(str(code))
    return codes


# ---- statistics ----------------------------------------------------------------------------------


def mean_interval(values: list[float], *, declared: Bounds | None = None) -> tuple[float, float, float] | None:
    """(mean, low, high): the 95 % interval of a mean over tasks, ``mean ± t(0.975, n-1)·s/√n``
    (:func:`acx.stats.estimate`, as metrics.json's), within ``declared`` (:func:`acx.stats.value_bounds`);
    None for fewer than 2 values."""
    est = estimate(values, bounds=value_bounds(values, declared))
    if est.mean is None or est.ci_low is None or est.ci_high is None:
        return None
    return est.mean, est.ci_low, est.ci_high


def series_range(series: dict[str, Any], fallback: Bounds | None = None) -> Bounds | None:
    """The range a series' interval stays within: metrics.json's ``range``, [0, 1] for a rate,
    else ``fallback``."""
    given = series.get("range")
    if isinstance(given, list | tuple) and len(given) == 2:
        lo, hi = _num(given[0]), _num(given[1])
        if lo is not None and hi is not None and lo <= hi:
            return lo, hi
    reducer = str(series.get("reducer") or "")
    if series.get("kind") == "binary_success" or reducer == "pass" or reducer.startswith(("at_least_", "pass_at_")):
        return UNIT
    return fallback


def headline_interval(series: dict[str, Any], fallback: Bounds | None = None) -> tuple[float, float] | None:
    """The interval that ``metrics.json`` gives a series, whatever its spelling: ``ci``/``ci95``/
    ``interval`` as ``[low, high]`` or ``{low, high}``, ``ci_low``/``ci_high``, or ``stderr`` —
    clipped to the series' range (:func:`series_range`: an older or another tool's file may hold
    an interval past it)."""
    found = _given_interval(series)
    bounds = series_range(series, fallback)
    if found is None or bounds is None:
        return found
    lo, hi = found
    return max(bounds[0], min(lo, bounds[1])), min(bounds[1], max(hi, bounds[0]))


def _given_interval(series: dict[str, Any]) -> tuple[float, float] | None:
    for key in ("ci95", "ci", "interval", "confidence_interval"):
        v = series.get(key)
        if isinstance(v, list | tuple) and len(v) == 2 and all(_num(x) is not None for x in v):
            return float(v[0]), float(v[1])
        if isinstance(v, dict):
            lo, hi = _num(v.get("low", v.get("lower"))), _num(v.get("high", v.get("upper")))
            if lo is not None and hi is not None:
                return lo, hi
    lo, hi = _num(series.get("ci_low")), _num(series.get("ci_high"))
    if lo is not None and hi is not None:
        return lo, hi
    se, value = _num(series.get("stderr")), _num(series.get("value"))
    if se is not None and value is not None:
        return value - Z95 * se, value + Z95 * se
    return None


# ---- the run -------------------------------------------------------------------------------------


def _primary(metrics: dict[str, Any] | None, tasks: list[TaskRecord]) -> tuple[str | None, dict[str, str]]:
    kinds: dict[str, str] = {}
    primary = None
    for s in (metrics or {}).get("series") or []:
        if isinstance(s, dict) and s.get("metric_id"):
            kinds.setdefault(str(s["metric_id"]), str(s.get("kind") or ""))
            if s.get("role") == "headline" and primary is None:
                primary = str(s["metric_id"])
    for t in tasks:
        for a in t.attempts:
            for k, v in ((a.result or {}).get("metrics") or {}).items():
                kinds.setdefault(k, "binary_success" if isinstance(v, bool) else "scalar")
    if primary is None:
        for candidate in ("correct", "score"):
            if candidate in kinds:
                primary = candidate
                break
        else:
            primary = next(iter(kinds), None)
    return primary, kinds


def _cut(obj: Any) -> Any:
    """Long strings cut to head + tail (the full text stays in result.json)."""
    if isinstance(obj, str):
        if len(obj) <= MAX_TEXT:
            return obj
        cut = len(obj) - MAX_TEXT * 3 // 4
        return f"{obj[: MAX_TEXT // 2]}\n… [{cut} characters cut: see result.json] …\n{obj[-MAX_TEXT // 4 :]}"
    if isinstance(obj, dict):
        return {k: _cut(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cut(v) for v in obj]
    return obj


def _instruction(task: TaskRecord) -> str | None:
    value = task.task_json.get("instruction")
    if isinstance(value, str):
        return value
    for a in task.attempts:
        extra = (a.result or {}).get("extra")
        if isinstance(extra, dict):
            for key in ("instruction", "question", "prompt"):
                if isinstance(extra.get(key), str):
                    return str(extra[key])
    return None


def _attempt_detail(
    a: AttemptRecord, phases: list[PhaseTiming], plan_index: int | None, usage: dict[str, float]
) -> dict[str, Any]:
    r = a.result or {}
    retries = []
    for rec in a.retries:
        discarded = _d(rec.get("discarded_result"))
        retries.append(
            {
                "file": rec.get("file"),
                "retry": rec.get("retry"),
                "stage": rec.get("stage"),
                "reason": rec.get("reason"),
                "delay_seconds": rec.get("retry_delay_seconds"),
                "issues": rec.get("issues") or [],
                "status": discarded.get("status"),
                "final_answer": discarded.get("final_answer"),
                "trajectory": discarded.get("trajectory"),
            }
        )
    return {
        "n": a.n,
        "finished": a.result is not None,
        # result.json exists but is not a JSON object: say so rather than "not finished".
        "damaged": a.result is None and a.size > 0,
        "status": r.get("status"),
        "final_answer": r.get("final_answer"),
        "ground_truth": r.get("ground_truth"),
        "metrics": r.get("metrics") or {},
        "issues": r.get("issues") or [],
        "telemetry": r.get("telemetry") or {},
        "artifacts": r.get("artifacts") or {},
        "manifests": a.manifests,
        "extra": r.get("extra") or {},
        "meta": r.get("meta") or {},
        "usage": usage,
        "trajectory": r.get("trajectory"),
        "retry_count": r.get("retry_count"),
        "retries": retries,
        "phases": [[p.phase, None if p.seconds is None else round(p.seconds, 4), p.try_number] for p in phases],
        "plan": plan_index,
    }


def _overview(info: dict[str, Any], progress: dict[str, Any] | None, usage: dict[str, float]) -> dict[str, Any]:
    req = _d(info.get("request"))

    def comp(name: str) -> Any:
        return _d(req.get(name)).get("id")

    execution = _d(req.get("execution"))
    attempts = _d(execution.get("attempts"))
    return {
        "run_id": info.get("run_id"),
        "request_name": info.get("request_name"),
        "status": info.get("status"),
        "error": info.get("error"),
        "started_at": info.get("started_at"),
        "finished_at": info.get("finished_at"),
        "elapsed_seconds": (progress or {}).get("elapsed_seconds"),
        "model": comp("model"),
        "benchmark": comp("benchmark"),
        "harness": comp("harness"),
        "environment": comp("environment"),
        "k": attempts.get("k"),
        "strategy": attempts.get("strategy"),
        "max_retries": execution.get("max_retries"),
        "task_concurrency": execution.get("task_concurrency"),
        "reused_from": info.get("reused_from"),
        "roles": {str(k): _d(v).get("id") for k, v in _d(_d(req.get("model")).get("roles")).items()},
        "usage": usage,
        "request": req,
    }


def load_run(path: str) -> RunData:
    """Read a run directory into a :class:`RunData` (raises the reader's E06xx errors)."""
    reader = RunReader.open(path)
    info, metrics, progress = reader.info, reader.metrics, reader.progress
    tasks = reader.tasks()
    timings = reader.phase_timings()
    primary, kinds = _primary(metrics, tasks)
    plans_by_task = _d(info.get("resolved_execution_plans"))
    plan_index: dict[str, int] = {}
    plans: list[dict[str, Any]] = []
    plan_uses: list[int] = []
    rows: list[list[Any]] = []
    details: list[dict[str, Any]] = []
    values: dict[str, dict[str, float]] = {}
    totals: dict[str, float] = {}
    outcomes: Counter[str] = Counter()
    durations: list[float] = []
    tokens: list[float] = []
    for task in tasks:
        attempt_details = []
        task_tokens = 0.0
        has_tokens = False
        duration_total = 0.0
        has_duration = False
        for a in task.attempts:
            plan = _d(_d(plans_by_task.get(task.task_id)).get("attempts")).get(str(a.n))
            idx = None
            if isinstance(plan, dict):
                # The plan hash is the plan's content hash (cheap dedupe); else its canonical JSON.
                key = str(plan.get("plan_hash") or json.dumps(plan, sort_keys=True))
                if key not in plan_index:
                    plan_index[key] = len(plans)
                    plans.append(plan)
                    plan_uses.append(0)
                idx = plan_index[key]
                plan_uses[idx] += 1
            phases = timings.get((task.task_id, a.n), [])
            usage = usage_of(a.result or {})
            attempt_details.append(_attempt_detail(a, phases, idx, usage))
            outcomes[str((a.result or {}).get("status") or "unfinished")] += 1
            if a.retries:
                outcomes["discarded try (retried)"] += len(a.retries)
            for k, v in usage.items():
                totals[k] = totals.get(k, 0.0) + v
            if "prompt_tokens" in usage or "completion_tokens" in usage:
                has_tokens = True
                task_tokens += usage.get("prompt_tokens", 0.0) + usage.get("completion_tokens", 0.0)
            secs = _duration(a.result, phases)
            if secs is not None:
                has_duration = True
                duration_total += secs
        task_values = {m: tv for m in kinds if (tv := task_value(task.attempts, m)) is not None}
        values[task.task_id] = task_values
        last = next((a.result for a in reversed(task.attempts) if a.result), None) or {}
        answer = last.get("final_answer")
        answer_text = answer if isinstance(answer, str) else ("" if answer is None else str(answer))
        rows.append(
            [
                task.task_id,
                task.state,
                task.category,
                last.get("status") or ("running" if task.state == "running" else None),
                task_values.get(primary) if primary else None,
                _codes(task),
                len(task.attempts),
                sum(len(a.retries) for a in task.attempts),
                round(duration_total, 3) if has_duration else None,
                task_tokens if has_tokens else None,
                answer_text[:200],
            ]
        )
        if has_duration:
            durations.append(duration_total)
        if has_tokens:
            tokens.append(task_tokens)
        detail = {
            "task_id": task.task_id,
            "state": task.state,
            "category": task.category,
            "instruction": _instruction(task),
            "ground_truth": task.task_json.get("ground_truth"),
            "attempt_plan": task.task_json.get("attempt_plan"),
            "retry_counts": task.task_json.get("retry_counts"),
            "dir": str(task.path),
            "attempts": attempt_details,
        }
        # No string can be longer than the files it came from: small tasks skip the walk.
        big = sum(a.size for a in task.attempts) + sum(len(str(v)) for v in detail.values() if isinstance(v, str))
        details.append(_cut(detail) if big > MAX_TEXT else detail)
    if info.get("status") == "running":  # in progress or killed: tasks with no file yet
        _add_started(reader, {r[0] for r in rows}, timings, rows, details)
    headline = _headline(metrics, primary, [r[4] for r in rows if r[4] is not None], kinds.get(primary or ""))
    overview = _overview(info, progress, totals)
    overview["plans"] = _plan_summary(plans, plan_uses)
    charts = _chart_data(metrics, rows, primary, outcomes, durations, tokens)
    return RunData(
        path=str(reader.path),
        info=info,
        metrics=metrics,
        progress=progress,
        live=reader.is_live(),
        primary=primary,
        overview=overview,
        headline=headline,
        rows=rows,
        details=details,
        plans=plans,
        values=values,
        metric_kinds=kinds,
        charts=charts,
        provenance=reader.provenance,
    )


def _add_started(
    reader: RunReader,
    known: set[str],
    timings: dict[tuple[str, int], list[PhaseTiming]],
    rows: list[list[Any]],
    details: list[dict[str, Any]],
) -> None:
    """Rows for the tasks that started but have no file yet (state ``running``): their phases so
    far come from the progress events. They have no values, so a comparison ignores them."""
    started = {t: c for t, c in reader.started_tasks().items() if t not in known}
    by_task: dict[str, list[int]] = {}
    for t, n in timings:
        if t in started:
            by_task.setdefault(t, []).append(n)
    for task_id, category in started.items():
        attempts = [
            _attempt_detail(AttemptRecord(n, "", None), timings[(task_id, n)], None, {})
            for n in sorted(by_task.get(task_id, []))
        ]
        secs = sum(p.seconds or 0.0 for n in by_task.get(task_id, []) for p in timings[(task_id, n)])
        rows.append([task_id, "running", category, "running", None, [], len(attempts), 0, round(secs, 3), None, ""])
        details.append(
            {
                "task_id": task_id,
                "state": "running",
                "category": category,
                "instruction": None,
                "ground_truth": None,
                "attempt_plan": None,
                "retry_counts": None,
                "dir": None,
                "attempts": attempts,
            }
        )


def _plan_summary(plans: list[dict[str, Any]], uses: list[int]) -> dict[str, Any]:
    """How many distinct resolved plans the attempts used, and the fields of the most used one
    that say how an attempt runs."""
    if not plans:
        return {"distinct": 0}
    top = plans[max(range(len(plans)), key=lambda i: uses[i])]
    env = _d(top.get("environment"))
    return {
        "distinct": len(plans),
        "attempts": sum(uses),
        "environment": env.get("id"),
        "image": _d(env.get("setup")).get("image"),
        "evaluation_environment_mode": top.get("evaluation_environment_mode"),
        "run_network": _d(top.get("run_network_policy")).get("network_mode"),
        "evaluation_network": _d(top.get("evaluation_network_policy")).get("network_mode"),
        "run_timeout_seconds": top.get("run_timeout_seconds"),
        "evaluation_timeout_seconds": top.get("evaluation_timeout_seconds"),
        "applied_recipes": top.get("applied_recipes"),
    }


def _headline(
    metrics: dict[str, Any] | None, primary: str | None, scores: list[float], kind: str | None
) -> dict[str, Any] | None:
    """The headline series with its interval: from metrics.json when it has one, else computed
    here over the per-task values (normal approximation), and said so."""
    series = next(
        (s for s in (metrics or {}).get("series") or [] if isinstance(s, dict) and s.get("role") == "headline"), None
    )
    out: dict[str, Any]
    if series is not None:
        out = {
            "series_id": series.get("series_id"),
            "value": series.get("value"),
            "reference_value": series.get("reference_value"),
            "counts": series.get("counts") or {},
        }
        given = headline_interval(series)
        if given is not None:
            out.update(interval=list(given), interval_source="metrics.json")
            return out
    elif primary is not None and scores:
        out = {"series_id": f"{primary} (mean over tasks)", "value": sum(scores) / len(scores), "counts": {}}
    else:
        return None
    computed = mean_interval(scores, declared=UNIT if kind == "binary_success" else None)
    if computed is not None:
        out.update(
            interval=[computed[1], computed[2]],
            interval_source=f"computed by the report: mean of {len(scores)} per-task values ± t·s/√n",
        )
    return out


def _chart_data(
    metrics: dict[str, Any] | None,
    rows: list[list[Any]],
    primary: str | None,
    outcomes: Counter[str],
    durations: list[float],
    tokens: list[float],
) -> dict[str, Any]:
    by_category: dict[str, list[float]] = {}
    for r in rows:
        if r[4] is not None:
            by_category.setdefault(r[2], []).append(r[4])
    errors: Counter[str] = Counter()
    for r in rows:
        for code in r[5]:
            errors[code] += 1
    if metrics and isinstance(metrics.get("errors_by_code"), dict) and not errors:
        errors.update({str(k): int(v) for k, v in metrics["errors_by_code"].items() if isinstance(v, int)})
    return {
        "score_by_category": sorted((c, sum(v) / len(v), len(v)) for c, v in by_category.items()),
        "primary": primary,
        "outcomes": sorted(outcomes.items(), key=lambda kv: -kv[1]),
        "durations": durations,
        "tokens": tokens,
        "errors": sorted(errors.items(), key=lambda kv: (-kv[1], kv[0])),
    }
