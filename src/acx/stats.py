"""Statistics of evaluation results: means with standard errors and 95 % intervals, attempt
reducers, the unbiased pass@k estimator. Pure functions, standard library only.

Tasks are the unit of sampling. When a task has several attempts they are reduced to one value
per task first (``mean``, ``max``, …), so the standard error of the mean over tasks,
``s / sqrt(G)`` with ``G`` tasks, is the cluster-robust (CR1) standard error of the
attempt-level mean with tasks as clusters (equal for equal attempt counts, see
:func:`clustered_stderr`): repeated attempts of one task never count as independent samples.

The 95 % interval is ``mean ± t(0.975, G-1) · SE`` (Student's t, so a handful of tasks gets an
honestly wide interval), clipped to the metric's range: a mean cannot lie outside the values it
averages, so an interval past them (``[0.4984, 1.1016]`` for a 0–1 score) claims the impossible.
The range is the one the metric declares (``[0, 1]`` for success rates; :func:`value_bounds`);
a metric that declares none is not clipped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "REDUCER_PATTERN",
    "UNIT",
    "Bounds",
    "Estimate",
    "clustered_stderr",
    "estimate",
    "pass_at_k",
    "reduce_attempts",
    "stratified_estimate",
    "t_critical_975",
    "validate_reducer",
    "value_bounds",
]

#: Reducer names: fixed ones, ``at_least_<m>`` and ``pass_at_<k>`` (m, k ≥ 1).
REDUCER_PATTERN = re.compile(r"^(avg|mean|pass|max|median|mode|at_least_[1-9][0-9]*|pass_at_[1-9][0-9]*)$")

# Two-sided 95 % critical values of Student's t for 1..30 degrees of freedom.
_T975 = (
    12.706204736,
    4.302652730,
    3.182446305,
    2.776445105,
    2.570581836,
    2.446911851,
    2.364624252,
    2.306004135,
    2.262157163,
    2.228138852,
    2.200985160,
    2.178812830,
    2.160368656,
    2.144786688,
    2.131449546,
    2.119905299,
    2.109815578,
    2.100922040,
    2.093024054,
    2.085963447,
    2.079613845,
    2.073873068,
    2.068657610,
    2.063898562,
    2.059538553,
    2.055529439,
    2.051830516,
    2.048407142,
    2.045229642,
    2.042272456,
)
_Z975 = 1.959963984540054


def t_critical_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (table to 30, then the
    Cornish-Fisher expansion, accurate to 1e-5 there)."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` units with its standard error and 95 % interval (None when n < 2)."""

    mean: float | None
    stderr: float | None
    ci_low: float | None
    ci_high: float | None
    n: int

    def to_json(self) -> dict[str, object]:
        return {
            "stderr": self.stderr,
            "ci95": None if self.ci_low is None else [self.ci_low, self.ci_high],
            "n": self.n,
        }


Bounds = tuple[float, float]
#: The range of a success rate (and of every binary metric).
UNIT: Bounds = (0.0, 1.0)


def value_bounds(values: Sequence[float], declared: Bounds | None) -> Bounds | None:
    """The range an interval of the mean of ``values`` is clipped to: the metric's declared range,
    widened to any value outside it (a declared range is a convention some metrics only follow,
    e.g. Harbor's 0–1 reward); None when nothing is declared (then nothing is clipped: the
    values' own range would be a guess, and a narrower interval than the data supports)."""
    if declared is None:
        return None
    if not values:
        return declared
    return min(declared[0], min(values)), max(declared[1], max(values))


def _interval(mean: float, se: float, df: int, bounds: Bounds | None) -> tuple[float, float]:
    half = t_critical_975(df) * se
    lo, hi = mean - half, mean + half
    if bounds is not None:
        lo, hi = max(bounds[0], min(lo, bounds[1])), min(bounds[1], max(hi, bounds[0]))
    return lo, hi


def estimate(values: Sequence[float], *, bounds: Bounds | None = None) -> Estimate:
    """Mean of ``values`` (one per task), SE = sample sd (n-1) / sqrt(n), t interval clipped to
    ``bounds`` (see the module docstring; None leaves it unclipped, as for a difference)."""
    n = len(values)
    if n == 0:
        return Estimate(None, None, None, None, 0)
    mean = math.fsum(values) / n
    if n < 2:
        return Estimate(mean, None, None, None, n)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    se = math.sqrt(var / n)
    lo, hi = _interval(mean, se, n - 1, bounds)
    return Estimate(mean, se, lo, hi, n)


def stratified_estimate(groups: Sequence[Sequence[float]], *, bounds: Bounds | None = None) -> Estimate:
    """Mean of group means (``category_mean``): SE = sqrt(Σ se_g²) / G; needs ≥ 2 units per group."""
    parts = [estimate(g, bounds=bounds) for g in groups if g]
    if not parts:
        return Estimate(None, None, None, None, 0)
    n = sum(p.n for p in parts)
    mean = math.fsum(p.mean for p in parts if p.mean is not None) / len(parts)
    if any(p.stderr is None for p in parts):
        return Estimate(mean, None, None, None, n)
    se = math.sqrt(math.fsum(p.stderr**2 for p in parts if p.stderr is not None)) / len(parts)
    df = max(1, n - len(parts))
    lo, hi = _interval(mean, se, df, bounds)
    return Estimate(mean, se, lo, hi, n)


def clustered_stderr(clusters: Sequence[Sequence[float]]) -> float | None:
    """CR1 cluster-robust SE of the mean of all observations, clusters = tasks.

    ``sqrt(G/(G-1) · Σ_g (Σ_j (x_gj - x̄))²) / N``. With equal cluster sizes this equals the SE of
    the mean of cluster means, which is what :func:`estimate` reports over per-task values.
    """
    clusters = [c for c in clusters if c]
    g = len(clusters)
    if g < 2:
        return None
    n = sum(len(c) for c in clusters)
    mean = math.fsum(v for c in clusters for v in c) / n
    total = math.fsum(math.fsum(v - mean for v in c) ** 2 for c in clusters)
    return math.sqrt(g / (g - 1) * total) / n


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator of pass@k from n attempts with c successes: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # Product form: stable for large n (no huge binomials).
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def validate_reducer(name: str) -> str | None:
    """None when ``name`` is a reducer, else a one-sentence reason."""
    if REDUCER_PATTERN.match(name):
        return None
    return f"unknown reducer `{name}`: use avg (= mean), pass, max, median, mode, at_least_<m> or pass_at_<k>"


def reduce_attempts(values: Sequence[float], reducer: str) -> float | None:
    """One task's attempts → one value; None when the reducer is undefined for them.

    ``pass``: 1 if any attempt succeeded (value ≥ 1). ``at_least_<m>``: 1 if at least m attempts
    succeeded. ``pass_at_<k>``: unbiased pass@k (needs ≥ k attempts). ``mode``: most frequent
    value, ties → the smallest (conservative and deterministic).
    """
    if not values:
        return None
    if reducer in ("avg", "mean"):
        return math.fsum(values) / len(values)
    if reducer == "max":
        return max(values)
    if reducer == "median":
        ordered = sorted(values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    if reducer == "mode":
        counts = Counter(values)
        top = max(counts.values())
        return min(v for v, n in counts.items() if n == top)
    successes = sum(1 for v in values if v >= 1.0)
    if reducer == "pass":
        return 1.0 if successes else 0.0
    if reducer.startswith("at_least_"):
        return 1.0 if successes >= int(reducer.removeprefix("at_least_")) else 0.0
    if reducer.startswith("pass_at_"):
        k = int(reducer.removeprefix("pass_at_"))
        return None if len(values) < k else pass_at_k(len(values), successes, k)
    raise ValueError(validate_reducer(reducer) or reducer)
