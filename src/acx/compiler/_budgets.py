"""Stage budgets (contracts T1–T5): defaults, request overrides, stage vs common multipliers.

A budget is ``None`` (no deadline) or a finite positive number of seconds (T1). The run budget's
default comes from the task, then the benchmark plan; the harness fallback applies only when
neither says anything (``UNSET``); an explicit ``None`` from the task means "no deadline" and
stops the chain (T2). A non-null request override replaces the default; then the stage multiplier,
when set, *replaces* the common ``timeout_multiplier``. Compensation and collect budgets are never
scaled (T3, T4).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from msgspec import UNSET

from acx.errors import AcxPlanError

__all__ = ["Budget", "check_seconds", "resolve_budget"]


class Budget(NamedTuple):
    """A resolved stage budget and how it was reached (for provenance and ``explain``)."""

    seconds: float | None
    #: ``task``, ``benchmark``, ``harness`` or ``none`` (no source gave a default).
    default_source: str
    default: float | None
    override: float | None
    multiplier: float
    #: ``run_timeout_multiplier``/``evaluation_timeout_multiplier`` or ``timeout_multiplier``.
    multiplier_field: str


def resolve_budget(
    *,
    task_value: Any,
    benchmark_value: Any,
    harness_fallback: float | None,
    override: float | None,
    common_multiplier: float,
    stage_multiplier: float | None,
    stage_multiplier_field: str,
) -> Budget:
    if task_value is not UNSET:
        default, source = task_value, "task"
    elif benchmark_value is not UNSET:
        default, source = benchmark_value, "benchmark"
    elif harness_fallback is not None:
        default, source = harness_fallback, "harness"
    else:
        default, source = None, "none"
    base = override if override is not None else default
    if stage_multiplier is not None:
        mult, mult_field = stage_multiplier, stage_multiplier_field
    else:
        mult, mult_field = common_multiplier, "timeout_multiplier"
    seconds = None if base is None else float(base) * mult
    return Budget(seconds, source, default, override, float(mult), mult_field)


def check_seconds(value: Any, field: str, task_id: str, *, allow_none: bool = True) -> float | None:
    """T1: None or a finite positive number; anything else is a planning error."""
    if value is None and allow_none:
        return None
    if type(value) is float and 0 < value < math.inf:  # the common case, checked cheaply
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise AcxPlanError(
            f"task {task_id!r}: {field} must be a finite positive number of seconds, got {value!r}",
            code="E0425",
            path=field,
            help="give a positive number of seconds (null means no deadline)",
        )
    return float(value)
