"""Reports of acx runs: one self-contained HTML file, run comparison, the ``acx view`` server.

Reads run directories only through :mod:`acx.results` (never the interpreter). Public API::

    written = write_report(["results/qa/20261201_153014"], "report.html")   # ReportWritten
    run = load_run("results/qa/20261201_153014")      # RunData: overview, headline, rows, details
    filter_rows(run.rows, state="error", search="div")  # the report's task filters
    compare_runs(load_run(a), load_run(b))             # paired differences, flips, only-in-one
    server = ViewServer("results", port=0); server.start(); server.url   # acx view

A row is a list in :data:`ROW_FIELDS` order. Layout, statistics and the secret re-check:
docs/report.md.
"""

from acx.report._build import ReportWritten, filter_rows, render_runs, write_report
from acx.report._compare import compare_runs, paired_difference
from acx.report._model import ROW_FIELDS, RunData, load_run
from acx.report._redact import Redactor
from acx.report._server import ViewServer

__all__ = [
    "ROW_FIELDS",
    "Redactor",
    "ReportWritten",
    "RunData",
    "ViewServer",
    "compare_runs",
    "filter_rows",
    "load_run",
    "paired_difference",
    "render_runs",
    "write_report",
]
