"""Built-in benchmarks: the plan-time halves (task loading, selection, plans) and shared helpers.

``exact_match`` and ``harbor`` live in their own modules; their run-time halves are mixins in
``_exact_match_runtime`` / ``_harbor_runtime``. Nothing here is imported by ``acx --help``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from acx.diagnostics import did_you_mean
from acx.errors import AcxPlanError
from acx.ir import TaskSpec

__all__ = ["apply_n_tasks", "normalize_sample_ids", "select_by_globs", "select_by_sample_ids"]


def normalize_sample_ids(sample_ids: str | int | Sequence[str | int] | None) -> list[str] | None:
    """``sample_ids`` as a list of strings (B2: normalised early); None selects everything."""
    if sample_ids is None:
        return None
    items: Iterable[str | int] = [sample_ids] if isinstance(sample_ids, str | int) else sample_ids
    out: list[str] = []
    for item in items:
        if isinstance(item, bool):
            raise AcxPlanError(
                f"sample_ids entry {item!r} is not a task id",
                code="E0404",
                path="benchmark.sample_ids",
                help="list task ids as strings, e.g. sample_ids: [q1, q2]",
            )
        out.append(str(item))
    return out


def select_by_sample_ids(tasks: list[TaskSpec], sample_ids: str | int | Sequence[str | int] | None) -> list[TaskSpec]:
    """Keep the tasks named by ``sample_ids`` in dataset order (B4); unknown ids are an error."""
    wanted = normalize_sample_ids(sample_ids)
    if wanted is None:
        return tasks
    known = {t.task_id for t in tasks}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        hint = did_you_mean(unknown[0], known)
        raise AcxPlanError(
            f"unknown benchmark sample_ids: {', '.join(unknown[:5])}{' …' if len(unknown) > 5 else ''}",
            code="E0404",
            path="benchmark.sample_ids",
            help=(f"did you mean {hint!r}? " if hint else "")
            + f"sample_ids must name task ids of the dataset ({len(known)} tasks); fix or remove the others",
        )
    keep = set(wanted)
    return [t for t in tasks if t.task_id in keep]


def select_by_globs(tasks: list[TaskSpec], patterns: Sequence[str] | None) -> list[TaskSpec]:
    """Keep tasks whose id matches any glob (case-sensitive, dataset order kept)."""
    if not patterns:
        return tasks
    return [t for t in tasks if any(fnmatch.fnmatchcase(t.task_id, p) for p in patterns)]


def apply_n_tasks(tasks: list[TaskSpec], n_tasks: int | None) -> list[TaskSpec]:
    return tasks if n_tasks is None else tasks[:n_tasks]
