"""``acx results show DIR``: the status, headline and summary of a run directory."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("results", help="inspect run directories", description="Inspect acx run directories.")
    rsub = p.add_subparsers(dest="results_command", metavar="SUBCOMMAND")
    show = rsub.add_parser(
        "show",
        help="print a run's status, metrics and summary",
        description="Print the status, headline metrics, task counts and summary.md of a run "
        "directory (the one holding run_info.json).",
    )
    show.add_argument("run_dir", metavar="DIR", help="results/<request>/<run id>")
    show.add_argument("--format", choices=("text", "json"), default="text")
    show.set_defaults(handler=_show)
    p.set_defaults(handler=lambda a: (p.print_help(), 2)[1])


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _show(args: argparse.Namespace) -> int:
    from acx.interpreter._store import RunStore

    store = RunStore.open_existing(args.run_dir)  # validates run_info.json and its schema
    info = store.read_run_info()
    metrics = _load(store.run_dir / "metrics.json")
    progress = _load(store.run_dir / "progress.json") or {}
    tasks = {state: len(list((store.details / state).glob("*/task.json"))) for state in ("normal", "error", "fatal")}
    tasks["running"] = len([d for d in (store.details / "running").glob("*") if d.is_dir()])
    live = store.live_session_records()
    if args.format == "json":
        payload = {
            "run_dir": str(store.run_dir),
            "run_id": info.get("run_id"),
            "request": info.get("request_name"),
            "status": info.get("status"),
            "started_at": info.get("started_at"),
            "finished_at": info.get("finished_at"),
            "tasks": tasks,
            "metrics": metrics,
            "live_environment_records": live,
            "progress": progress,
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return 0
    out = sys.stdout
    out.write(f"run {info.get('run_id')} ({info.get('request_name')}): {info.get('status')}\n")
    out.write(
        f"  dir: {store.run_dir}\n  started {info.get('started_at')}, finished {info.get('finished_at') or '—'}\n"
    )
    out.write("  tasks: " + ", ".join(f"{k} {v}" for k, v in tasks.items()) + "\n")
    if live:
        states = ", ".join(sorted({str(r.get("state", "active")) for r in live}))
        out.write(f"  {len(live)} environment(s) not released ({states}): kept, failed to release, or left by an\n")
        out.write("  interrupted run (--resume releases those); see journal.jsonl and .env-resources/\n")
    holder = store.locked_by()
    if info.get("status") == "running" and holder is not None:
        out.write(f"  the run is in progress (process {holder})\n")
    elif info.get("status") == "running":
        out.write("  the run did not finish; continue it with: acx run --resume " + str(store.run_dir) + "\n")
    summary = store.run_dir / "summary.md"
    if summary.is_file():
        out.write("\n" + summary.read_text(encoding="utf-8"))
    return 0
