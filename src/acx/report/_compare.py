"""Two runs side by side: matched tasks, paired differences with a 95 % interval, flips.

For each metric, the per-task value (mean over the attempts that observed it; a binary metric
counts 1/0) is paired over the tasks both runs have and both observed. With ``d_i = b_i - a_i``
over those ``n`` pairs: ``mean = Σd/n``, ``s² = Σ(d - mean)²/(n - 1)``, ``se = s/√n`` and the 95 %
interval ``mean ± t(0.975, n - 1)·se`` (Student's t, :mod:`acx.stats`, as metrics.json's intervals;
it needs n ≥ 2). A task *flipped up* when ``b_i > a_i`` and *down* when
``b_i < a_i`` (for a binary metric with k = 1: failed → passed and passed → failed).
"""

from __future__ import annotations

from typing import Any

from acx.report._model import RunData
from acx.stats import estimate

__all__ = ["compare_runs", "paired_difference"]


def paired_difference(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """Statistics of ``b - a`` over ``pairs`` of (a, b)."""
    n = len(pairs)
    out: dict[str, Any] = {"n": n, "mean_a": None, "mean_b": None, "diff": None, "stderr": None, "ci95": None}
    if n == 0:
        return out
    diffs = [b - a for a, b in pairs]
    mean = sum(diffs) / n
    out.update(mean_a=sum(a for a, _ in pairs) / n, mean_b=sum(b for _, b in pairs) / n, diff=mean)
    est = estimate(diffs)
    if est.stderr is not None and est.ci_low is not None and est.ci_high is not None:
        out.update(stderr=est.stderr, ci95=[est.ci_low, est.ci_high])
    return out


def _ordered_metrics(a: RunData, b: RunData) -> list[str]:
    names = [m for m in (a.primary, b.primary) if m]
    names += sorted(set(a.metric_kinds) | set(b.metric_kinds))
    return list(dict.fromkeys(names))


def compare_runs(a: RunData, b: RunData) -> dict[str, Any]:
    """The comparison of run ``a`` (baseline) with run ``b``, as JSON-ready data."""
    ids_a, ids_b = set(a.values), set(b.values)
    matched = sorted(ids_a & ids_b)
    metrics = []
    for metric in _ordered_metrics(a, b):
        pairs: list[tuple[float, float]] = []
        up: list[str] = []
        down: list[str] = []
        unpaired = 0
        for task_id in matched:
            va, vb = a.values[task_id].get(metric), b.values[task_id].get(metric)
            if va is None or vb is None:
                unpaired += 1
                continue
            pairs.append((va, vb))
            if vb > va:
                up.append(task_id)
            elif vb < va:
                down.append(task_id)
        stats = paired_difference(pairs)
        stats.update(
            metric=metric,
            kind=a.metric_kinds.get(metric) or b.metric_kinds.get(metric),
            flipped_up=up,
            flipped_down=down,
            unpaired=unpaired,
        )
        metrics.append(stats)
    return {
        "a": {"run_id": a.run_id, "request_name": a.info.get("request_name"), "path": a.path, "tasks": len(ids_a)},
        "b": {"run_id": b.run_id, "request_name": b.info.get("request_name"), "path": b.path, "tasks": len(ids_b)},
        "matched": len(matched),
        "only_a": sorted(ids_a - ids_b),
        "only_b": sorted(ids_b - ids_a),
        "metrics": metrics,
    }
