"""``acx report``: read run directories, render, write one file atomically."""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acx.report._html import render_report
from acx.report._model import RunData, load_run
from acx.report._redact import Redactor

__all__ = ["ReportWritten", "filter_rows", "render_runs", "write_report"]


@dataclass(frozen=True)
class ReportWritten:
    path: Path
    runs: int
    tasks: int
    bytes: int
    redacted: int


def render_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    live: dict[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, list[RunData], int]:
    """(document, runs, redactions) for ``run_dirs``; the first run is the comparison baseline."""
    # A report builds hundreds of thousands of acyclic dicts and lists: the cyclic collector would
    # walk them again on every generation-2 pass (quadratic in the run's size; 10k tasks spent
    # ~40 % of their CPU there) and free nothing. Paused, the cost is linear in the tasks.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        runs = [load_run(str(d)) for d in run_dirs]
        doc, redacted = render_report(runs, live=live, redactor=Redactor(environ))
    finally:
        if was_enabled:
            gc.enable()
    return doc, runs, redacted


def write_report(
    run_dirs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
) -> ReportWritten:
    """Write the report of ``run_dirs`` to ``output`` (temporary file + rename: a reader never
    sees half a report)."""
    doc, runs, redacted = render_runs(run_dirs, environ=environ)
    out = Path(output)
    data = doc.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".tmp", dir=out.parent if str(out.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return ReportWritten(out, len(runs), sum(len(r.rows) for r in runs), len(data), redacted)


def _score_class(score: float | None) -> str:
    if score is None:
        return "none"
    if score >= 1:
        return "pass"
    if score <= 0:
        return "fail"
    return "partial"


def filter_rows(
    rows: list[list[Any]],
    *,
    state: str | None = None,
    status: str | None = None,
    category: str | None = None,
    code: str | None = None,
    score: str | None = None,
    search: str | None = None,
) -> list[list[Any]]:
    """The task-table filters of the HTML report, for the terminal (same semantics): ``score`` is
    ``pass`` (1), ``fail`` (0), ``partial`` or ``none`` (unscored); ``search`` matches the task id,
    category, error codes and final answer, case-insensitively."""
    needle = (search or "").lower()
    out = []
    for r in rows:
        if state and r[1] != state:
            continue
        if status and r[3] != status:
            continue
        if category and r[2] != category:
            continue
        if code and code not in r[5]:
            continue
        if score and _score_class(r[4]) != score:
            continue
        if needle and needle not in f"{r[0]} {r[2]} {' '.join(r[5])} {r[10]}".lower():
            continue
        out.append(r)
    return out
