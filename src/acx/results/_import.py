"""``acx results import``: an Inspect eval log or a Harbor job directory becomes a read-only acx
run directory (docs/results.md, "Other tools"), so every acx reader — ``acx results show|tasks|
compare``, ``acx report``, ``acx view`` — works on it.

The readers of the other formats (``_read_inspect``, ``_read_harbor``) produce
:class:`ImportedAttempt` records; :func:`write_imported_run` lays them out as ``docs/results.md``
describes, with ``run_info.json``'s ``imported_from`` naming the source.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acx.errors import AcxResultsError
from acx.results._interop import atomic_write, dumps, iso, sync_all
from acx.results._reader import RUN_INFO_SCHEMA

__all__ = ["ImportWritten", "ImportedAttempt", "ImportedRun", "import_run", "load_id_map", "write_imported_run"]


@dataclass
class ImportedAttempt:
    task_id: str
    attempt: int
    instruction: str
    ground_truth: Any
    final_answer: Any
    metrics: dict[str, Any]
    category: str = "all"
    status: str = "completed"
    issues: list[dict[str, Any]] = field(default_factory=list)
    trajectory: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    wall_seconds: float | None = None
    started: float | None = None
    finished: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImportedRun:
    tool: str
    source: dict[str, Any]
    run_id: str
    request_name: str
    status: str
    started: float | None
    finished: float | None
    request: dict[str, Any]
    attempts: list[ImportedAttempt]
    #: The source tool's own aggregate results, kept verbatim under ``metrics.json``'s ``extra``.
    source_results: Any = None
    kinds: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportWritten:
    run_dir: Path
    source_tool: str
    tasks: int
    attempts: int


def load_id_map(path: str | os.PathLike[str]) -> dict[str, str]:
    """``--id-map FILE``: a JSON object, source task id → acx task id (E0655 when it is not)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise AcxResultsError(
            f"cannot read the id map: {exc.strerror}", code="E0655", path=str(path), help="pass a readable JSON file"
        ) from None
    except json.JSONDecodeError as exc:
        raise AcxResultsError(
            f"the id map is not JSON: {exc.msg}",
            code="E0655",
            path=f"{path}:{exc.lineno}:{exc.colno}",
            help='write a JSON object {"source id": "acx task id", ...}',
        ) from None
    bad = [k for k, v in data.items() if not isinstance(v, str) or not v] if isinstance(data, dict) else None
    if bad is None or bad:
        where = f"{path}: {bad[0]!r}" if bad else str(path)
        raise AcxResultsError(
            "the id map must be a JSON object of source task id → acx task id (non-empty strings)",
            code="E0655",
            path=where,
            help='write a JSON object {"source id": "acx task id", ...}',
        )
    return dict(data)


def import_run(
    source: str | os.PathLike[str], out: str | os.PathLike[str], *, id_map: dict[str, str] | None = None
) -> ImportWritten:
    """Read ``source`` (an Inspect ``.eval``/``.json`` log or a Harbor job directory) and write
    the acx run directory ``out`` (which must not exist, or be empty: E0653)."""
    path = Path(source)
    reader: Callable[[Path], ImportedRun]
    if path.is_dir():
        from acx.results._harbor_import import read_harbor_job

        reader = read_harbor_job
    elif path.is_file() and path.suffix in (".eval", ".json"):
        from acx.results._inspect_import import read_inspect_log

        reader = read_inspect_log
    else:
        raise AcxResultsError(
            f"{path} is neither an Inspect log (.eval, .json) nor a Harbor job directory"
            + ("" if path.exists() else " (it does not exist)"),
            code="E0654",
            path=str(path),
            help="pass an Inspect log file or the directory of a Harbor job (the one holding config.json)",
        )
    target = Path(out)
    _check_target(target)
    run = reader(path)
    if id_map:
        for a in run.attempts:
            a.task_id = id_map.get(a.task_id, a.task_id)
    write_imported_run(run, target)
    return ImportWritten(target, run.tool, len({a.task_id for a in run.attempts}), len(run.attempts))


def _check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise AcxResultsError(
            f"{target} already exists" + (" and is not empty" if target.is_dir() else ""),
            code="E0653",
            path=str(target),
            help="name a new directory for the imported run",
        )


def _task_dir(task_id: str) -> str:
    # The writer's naming (docs/results.md): readable id ≤ 80 chars + 16 hex of sha256(task id).
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[:80]
    return f"{safe}--{hashlib.sha256(task_id.encode()).hexdigest()[:16]}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _series(run: ImportedRun, by_task: dict[str, list[ImportedAttempt]], k: int) -> list[dict[str, Any]]:
    """One ``avg@k`` series per metric: the mean over tasks of each task's mean over its
    attempts (acx's ``micro_weighted`` aggregation), the first metric the headline."""
    names: list[str] = []
    for attempts in by_task.values():
        for a in attempts:
            names.extend(n for n in a.metrics if n not in names)
    out = []
    for i, name in enumerate(names):
        per_task = []
        for attempts in by_task.values():
            seen = [v for a in attempts if (v := _number(a.metrics.get(name))) is not None]
            if seen:
                per_task.append(sum(seen) / len(seen))
        kind = run.kinds.get(name) or (
            "binary_success"
            if all(isinstance(a.metrics.get(name), bool) for t in by_task.values() for a in t if name in a.metrics)
            else "scalar"
        )
        out.append(
            {
                "series_id": f"{name}.avg@{k}",
                "metric_id": name,
                "kind": kind,
                "reducer": "avg",
                "role": "headline" if i == 0 else "auxiliary",
                "aggregation": "micro_weighted",
                "k": k,
                "value": sum(per_task) / len(per_task) if per_task else None,
                "reference_value": sum(per_task) / len(per_task) if per_task else None,
                "counts": {
                    "total": len(by_task),
                    "evaluated": len(per_task),
                    "error": 0,
                    "unavailable": len(by_task) - len(per_task),
                    "invalidated": 0,
                },
                "n": len(per_task),
            }
        )
    return out


def _state(attempts: list[ImportedAttempt]) -> str:
    return "normal" if all(a.status == "completed" for a in attempts) else "error"


def write_imported_run(run: ImportedRun, target: Path) -> None:
    """Lay ``run`` out as an acx run directory; its files are read-only (0444): an imported run
    is a record of another tool's run, never resumed or regraded."""
    by_task: dict[str, list[ImportedAttempt]] = {}
    for a in run.attempts:
        by_task.setdefault(a.task_id, []).append(a)
    k = max((len(v) for v in by_task.values()), default=1)
    request = {**run.request, "execution": {"attempts": {"k": k, "strategy": "avg"}}}
    info = {
        "schema_version": RUN_INFO_SCHEMA,
        "run_id": run.run_id,
        "request_name": run.request_name,
        "started_at": iso(run.started),
        "finished_at": iso(run.finished),
        "status": run.status,
        "error": None,
        "request": request,
        "imported_from": {"tool": run.tool, **run.source},
        "read_only": True,
    }
    series = _series(run, by_task, k)
    metrics = {
        "schema_version": "acx.metrics.v1",
        "k": k,
        "strategy": "avg",
        "aggregation": "micro_weighted",
        "evaluation_failed": False,
        "counts": {
            "tasks": len(by_task),
            "normal": sum(1 for v in by_task.values() if _state(v) == "normal"),
            "error": sum(1 for v in by_task.values() if _state(v) == "error"),
            "fatal": 0,
        },
        "series": series,
        "metrics": {s["series_id"]: s["value"] for s in series},
        "extra": {"imported_from": run.tool, "source_results": run.source_results},
    }
    files: dict[str, bytes] = {"run_info.json": dumps(info), "metrics.json": dumps(metrics)}
    for task_id, attempts in by_task.items():
        attempts.sort(key=lambda a: a.attempt)
        state = _state(attempts)
        base = f"details/{state}/{_task_dir(task_id)}"
        first = attempts[0]
        files[f"{base}/task.json"] = dumps(
            {
                "schema_version": "acx.task.v1",
                "task_id": task_id,
                "category": first.category,
                "ground_truth": first.ground_truth,
                "instruction": first.instruction,
                "attempts": {str(a.attempt): f"attempt-{a.attempt}" for a in attempts},
                "attempt_plan": {"k": k, "strategy": "avg"},
                "retry_counts": {str(a.attempt): 0 for a in attempts},
                "state": state,
            }
        )
        for a in attempts:
            files[f"{base}/attempt-{a.attempt}/result.json"] = dumps(_result(run, a))
    files["summary.md"] = _summary(run, series, by_task).encode("utf-8")
    target.mkdir(parents=True, exist_ok=True)
    info_bytes = files.pop("run_info.json")
    for rel, data in files.items():
        atomic_write(target / rel, data, mode=0o444, fsync=False)
    # run_info.json last, once the rest is durable: a directory with it is a whole run.
    sync_all()
    atomic_write(target / "run_info.json", info_bytes, mode=0o444)


def _result(run: ImportedRun, a: ImportedAttempt) -> dict[str, Any]:
    telemetry: dict[str, Any] = {}
    if a.usage:
        telemetry["model_usage"] = a.usage
    if a.wall_seconds is not None:
        telemetry["wall_seconds"] = a.wall_seconds
    return {
        "schema_version": "acx.attempt_result.v1",
        "task_id": a.task_id,
        "attempt": a.attempt,
        "status": a.status,
        "category": a.category,
        "final_answer": a.final_answer,
        "ground_truth": a.ground_truth,
        "trajectory": a.trajectory,
        "issues": a.issues,
        "artifacts": {},
        "metrics": a.metrics,
        "telemetry": telemetry,
        "retry_count": 0,
        "extra": {"imported_from": run.tool, **a.extra},
        "meta": {"benchmark": run.request.get("benchmark", {}).get("id"), "harness": {"id": run.tool}},
    }


def _summary(run: ImportedRun, series: list[dict[str, Any]], by_task: dict[str, list[ImportedAttempt]]) -> str:
    lines = [
        f"# {run.request_name} (imported from {run.tool})",
        "",
        f"- source: `{run.source.get('path')}`",
        f"- tasks: {len(by_task)}, attempts: {sum(len(v) for v in by_task.values())}",
        "",
        "| series | value | evaluated |",
        "|---|---|---|",
    ]
    for s in series:
        value = "—" if s["value"] is None else f"{s['value']:.3f}"
        lines.append(f"| {s['series_id']} | {value} | {s['counts']['evaluated']}/{s['counts']['total']} |")
    return "\n".join(lines) + "\n"
