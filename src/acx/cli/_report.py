"""``acx report RUN_DIR… [-o FILE]`` and ``acx view [RESULTS_DIR]``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of one or more runs",
        description="Write one self-contained HTML file (no network access needed to open it) with the "
        "runs' overview, headline metrics with 95 % intervals, charts, a filterable task table and a "
        "page per task (instruction, plan and provenance, attempts, retries, trajectory, issues, "
        "artifacts, verifier output, timings). With two or more runs it also compares each with the "
        "first (paired differences, flipped tasks). See docs/report.md.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (results/<request>/<run id>)")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the report (default: report.html in the run directory for one run, "
        "./report.html for several)",
    )
    p.set_defaults(handler=_report)

    v = sub.add_parser(
        "view",
        help="serve the runs of a results directory on a local web server",
        description="List the runs under RESULTS_DIR and serve their reports; a run still in progress "
        "is re-rendered as it advances and its page reloads itself. Listens on the loopback interface "
        "unless --host says otherwise. Ctrl-C stops it.",
    )
    v.add_argument("results_dir", nargs="?", default="results", metavar="RESULTS_DIR", help="default: ./results")
    v.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1: this machine only)")
    v.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    v.set_defaults(handler=_view)


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from acx.cli._output import write_output
    from acx.report import render_runs

    for d in args.run_dirs:
        _refuse_results_root(d)
    doc, runs, redacted = render_runs(args.run_dirs)
    out = args.output or str(Path(runs[0].path) / "report.html" if len(runs) == 1 else "report.html")
    write_output(out, doc.encode("utf-8"), flag="-o" if args.output else None)
    tasks = sum(len(r.rows) for r in runs)
    sys.stdout.write(f"report: {out} ({len(runs)} run(s), {tasks} task(s))\n")
    if redacted:
        sys.stderr.write(
            f"acx: warning: {redacted} string(s) that look like secrets were replaced by ******** in the report\n"
        )
    return 0


def _refuse_results_root(d: str) -> None:
    """A results root or request directory instead of a run directory: name the runs in it."""
    from pathlib import Path

    from acx.errors import AcxResultsError
    from acx.results import find_runs

    path = Path(d)
    if (path / "run_info.json").is_file() or not path.is_dir():
        return  # a run, or the reader's own "not a run directory" error
    runs = find_runs(path)
    if runs:
        shown = ", ".join(str(r) for r in runs[-5:])
        raise AcxResultsError(
            f"{path} is not a run directory; it holds {len(runs)} run(s)",
            code="E0603",
            path=str(path),
            help=f"pass run directories, e.g. {shown}; or browse them all with: acx view {path}",
        )


def _view(args: argparse.Namespace) -> int:
    from pathlib import Path

    from acx.errors import AcxUserError
    from acx.report import ViewServer
    from acx.report._server import is_loopback

    root = Path(args.results_dir)
    if not root.is_dir():
        raise AcxUserError(
            f"results directory {root} does not exist",
            code="E0641",
            path="RESULTS_DIR",
            help="pass the directory runs are written to (--results-dir / runtime.results_dir; default ./results)",
        )
    if not 0 <= args.port <= 65535:
        raise AcxUserError(f"--port {args.port} is not a port number", code="E0642", path="--port", help="use 0–65535")
    try:
        server = ViewServer(root, host=args.host, port=args.port)
    except OSError as exc:
        import errno
        import socket

        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            # The host is the problem (unknown name, not this machine's address), not the port.
            where, help_text = "--host", "use an address of this machine: 127.0.0.1 (the default) or 0.0.0.0 (all)"
        else:
            where, help_text = "--port", "choose another --port (0 picks a free one) or stop what uses it"
        raise AcxUserError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            code="E0642",
            path=where,
            help=help_text,
        ) from None
    if not is_loopback(args.host):
        sys.stderr.write(
            f"acx: warning: listening on {args.host}: anyone who can reach this machine can read these results\n"
        )
    sys.stdout.write(f"acx view: serving {root.resolve()} at {server.url} (Ctrl-C stops)\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0
