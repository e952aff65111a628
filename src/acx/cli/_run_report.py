"""What ``acx run`` adds to each run directory at the end: ``provenance.json`` (which layer set
the fields that matter) and ``report.html`` (``acx report``), and a link to it in ``summary.md``.

The report is generated at the end of every run unless ``--no-report``: it costs about as much as
reading the run's result files once (bench/report_bench.py: ~2 s of CPU for 10,000 tasks). A
failure to write it is a warning, never a failed run: ``acx report RUN_DIR`` writes it later.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["register_exports", "register_provenance", "write_run_exports", "write_run_reports"]

#: request name → a function returning its provenance record (set while the programs are built).
_SOURCES: dict[str, Callable[[], dict[str, Any]]] = {}
#: request name → its ``output.export`` entries (``acx.ir.ExportSpec``), set with the programs.
_EXPORTS: dict[str, list[Any]] = {}
#: Per-task plan provenance is re-derived by planning each task's first attempt again; past this
#: budget the remaining tasks show the request-level chains only (the page says so).
PLAN_PROVENANCE_BUDGET_SECONDS = 3.0


def register_provenance(
    name: str,
    request_provenance: dict[str, list[Any]] | None,
    tasks: list[Any],
    plan_provenance: Callable[[Any], dict[str, list[Any]]] | None,
) -> None:
    def build() -> dict[str, Any]:
        import msgspec

        chains: list[Any] = []
        index: dict[str, int] = {}
        per_task: dict[str, dict[str, int]] = {}
        complete = True
        deadline = time.monotonic() + PLAN_PROVENANCE_BUDGET_SECONDS
        for task in tasks if plan_provenance is not None else []:
            if time.monotonic() > deadline:
                complete = False
                break
            assert plan_provenance is not None
            fields = {}
            for field, chain in plan_provenance(task).items():
                data = msgspec.to_builtins(chain)
                key = msgspec.json.encode(data).decode()
                if key not in index:
                    index[key] = len(chains)
                    chains.append(data)
                fields[field] = index[key]
            per_task[task.task_id] = fields
        return {
            "schema_version": "acx.provenance.v1",
            "request": msgspec.to_builtins(request_provenance or {}),
            "chains": chains,
            "tasks": per_task,
            "tasks_complete": complete and plan_provenance is not None,
        }

    _SOURCES[name] = build


def _write_provenance(name: str, run_dir: Path) -> None:
    build = _SOURCES.get(name)
    if build is None:
        return
    import json

    from acx.cli._output import write_text_atomic

    write_text_atomic(str(run_dir / "provenance.json"), json.dumps(build(), indent=1) + "\n", flag=None)


def _link_summary(run_dir: Path) -> None:
    """Add a link to report.html under the summary's title (once; atomic rewrite)."""
    from acx.cli._output import write_text_atomic

    path = run_dir / "summary.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return
    line = "Report: [report.html](report.html) — regenerate with `acx report <this directory>`\n"
    if "](report.html)" in text:
        return
    head, _, rest = text.partition("\n\n")
    write_text_atomic(str(path), f"{head}\n\n{line}\n{rest}", flag=None)


def write_run_reports(outcomes: list[Any], *, enabled: bool) -> dict[str, str]:
    """request name → report path, for every request that has a run directory."""
    from acx.report import write_report

    written: dict[str, str] = {}
    for o in outcomes:
        if not getattr(o, "run_dir", None) or getattr(o, "status", None) == "disk_full":
            continue  # a run stopped by a full disk: nothing to report yet, nowhere to write it
        run_dir = Path(o.run_dir)
        try:
            _write_provenance(o.name, run_dir)
        except Exception as exc:  # a nicety: the run itself is recorded
            sys.stderr.write(f"acx: warning: {o.name}: provenance.json not written: {type(exc).__name__}: {exc}\n")
        if not enabled:
            continue
        try:
            out = write_report([run_dir], run_dir / "report.html", environ=os.environ)
            _link_summary(run_dir)
        except Exception as exc:
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            sys.stderr.write(
                f"acx: warning: {o.name}: the report was not written ({message}); try: acx report {run_dir}\n"
            )
            continue
        written[o.name] = str(out.path)
        if out.redacted:
            sys.stderr.write(
                f"acx: warning: {o.name}: {out.redacted} string(s) that look like secrets were replaced by "
                "******** in the report\n"
            )
    return written


def register_exports(name: str, exports: list[Any]) -> None:
    if exports:
        _EXPORTS[name] = list(exports)


def export_dir(run_dir: Path, spec: Any) -> Path:
    """``output.export[].dir``: relative to the run directory (each run its own); default
    ``exports/<format>``."""
    return run_dir / (spec.dir or f"exports/{spec.format}")


def write_run_exports(outcomes: list[Any]) -> dict[str, list[str]]:
    """Write every request's ``output.export`` entries; request name → the directories written.
    A failed export is a warning naming the command that retries it: the run itself is recorded."""
    from acx.results import export_run

    written: dict[str, list[str]] = {}
    for o in outcomes:
        specs = _EXPORTS.get(o.name)
        if not specs or not getattr(o, "run_dir", None) or getattr(o, "status", None) == "disk_full":
            continue
        run_dir = Path(o.run_dir)
        for spec in specs:
            target = export_dir(run_dir, spec)
            try:
                export_run(run_dir, spec.format, target, inspect_format=spec.inspect_format)
            except Exception as exc:
                message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                sys.stderr.write(
                    f"acx: warning: {o.name}: the {spec.format} export was not written ({message}); try: "
                    f"acx results export {run_dir} --format {spec.format} -o {target}\n"
                )
                continue
            written.setdefault(o.name, []).append(f"{target} ({spec.format})")
    return written
