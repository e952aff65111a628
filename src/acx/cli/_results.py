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

    tasks = rsub.add_parser(
        "tasks",
        help="list a run's tasks (the report's task table, filtered)",
        description="One line per task: id, state, category, final attempt status, score of the primary "
        "metric (mean over attempts), error codes, attempts, retries, duration, tokens. Filters as in the "
        "HTML report's task table.",
    )
    tasks.add_argument("run_dir", metavar="RUN_DIR")
    tasks.add_argument("--state", choices=("normal", "error", "fatal", "running"), help="task state")
    tasks.add_argument(
        "--status",
        type=_status,
        metavar="STATUS",
        help="final attempt status: " + ", ".join(_STATUSES),
    )
    tasks.add_argument("--category", help="task category")
    tasks.add_argument("--code", metavar="ERROR_CODE", help="tasks with an error or fatal issue of this code")
    tasks.add_argument(
        "--score", choices=("pass", "fail", "partial", "none"), help="primary score 1, 0, between, or unscored"
    )
    tasks.add_argument("--search", metavar="TEXT", help="case-insensitive text in id, category, codes, answer")
    tasks.add_argument("--format", choices=("text", "json"), default="text")
    tasks.set_defaults(handler=_tasks)

    compare = rsub.add_parser(
        "compare",
        help="compare two runs task by task (paired differences, flips)",
        description="Match the tasks of RUN_A (baseline) and RUN_B by id; per metric, the mean per-task "
        "difference B - A with a paired 95 % interval, the tasks that got better or worse, and the tasks "
        "present in only one run. See docs/report.md for the statistics.",
    )
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")
    compare.add_argument("--format", choices=("text", "json"), default="text")
    compare.add_argument(
        "--limit", type=_count, default=20, metavar="N", help="task ids listed per group (text; 0 lists none)"
    )
    compare.set_defaults(handler=_compare)
    _register_interop(rsub)
    p.set_defaults(handler=lambda a: (p.print_help(), 2)[1])


def _register_interop(rsub: Any) -> None:
    export = rsub.add_parser(
        "export",
        help="write a run as an Inspect log, a Harbor job directory or ATIF trajectories",
        description="Export RUN (a run directory) into DIR: --format inspect writes one Inspect eval log "
        "(.eval or .json, --inspect-format), harbor a Harbor job directory (job config and result, one trial "
        "directory per attempt with its reward, log and agent/trajectory.json), atif one ATIF trajectory per "
        "attempt. DIR also gets acx-export-<run id>-<format>.manifest.json listing what the format cannot hold. "
        "See docs/results.md.",
    )
    export.add_argument("run_dir", metavar="RUN")
    export.add_argument("--format", dest="export_format", choices=("inspect", "harbor", "atif"), required=True)
    export.add_argument("--inspect-format", choices=("eval", "json"), default="eval", help="default: eval")
    export.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write (created)")
    export.set_defaults(handler=_export)
    imp = rsub.add_parser(
        "import",
        help="turn an Inspect log or a Harbor job directory into a read-only acx run directory",
        description="Read PATH (an Inspect .eval/.json log, or a Harbor job directory) and write an acx run "
        "directory DIR (it must not exist, or be empty) that acx results show|tasks|compare, acx report and "
        "acx view read; run_info.json names the source. See docs/results.md.",
    )
    imp.add_argument("source", metavar="PATH")
    imp.add_argument("-o", "--output", required=True, metavar="DIR", help="the run directory to create")
    imp.add_argument(
        "--id-map",
        metavar="FILE",
        help="JSON object mapping the source's task ids to acx task ids (for tools that name tasks differently)",
    )
    imp.set_defaults(handler=_import)


def _export(args: argparse.Namespace) -> int:
    from acx.results import export_run

    done = export_run(args.run_dir, args.export_format, args.output, inspect_format=args.inspect_format)
    for f in done.files if len(done.files) <= 20 else done.files[:20]:
        sys.stdout.write(f"{done.out / f}\n")
    if len(done.files) > 20:
        sys.stdout.write(f"… and {len(done.files) - 20} more file(s)\n")
    sys.stdout.write(
        f"exported {args.export_format}: {len(done.files)} file(s); manifest {done.out / done.manifest} "
        f"({done.not_represented} item(s) not represented)\n"
    )
    return 0


def _import(args: argparse.Namespace) -> int:
    from acx.results import import_run, load_id_map

    id_map = load_id_map(args.id_map) if args.id_map else None
    done = import_run(args.source, args.output, id_map=id_map)
    sys.stdout.write(f"imported {done.source_tool} {args.source}: {done.tasks} task(s), {done.attempts} attempt(s)\n")
    sys.stdout.write(f"  run directory: {done.run_dir}\n")
    return 0


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
    live = store.records.live_session_records()
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


def _cell(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, list):
        return ",".join(str(x) for x in v) or "—"
    return str(v)


def _tasks(args: argparse.Namespace) -> int:
    from acx.report import ROW_FIELDS, filter_rows, load_run

    run = load_run(args.run_dir)
    rows = filter_rows(
        run.rows,
        state=args.state,
        status=args.status,
        category=args.category,
        code=args.code,
        score=args.score,
        search=args.search,
    )
    _note_absent(run.rows, args.category, 2, "category")
    _note_absent(run.rows, args.code, 5, "error code")
    if args.format == "json":
        payload = {
            "run_dir": run.path,
            "primary": run.primary,
            "total": len(run.rows),
            "tasks": [dict(zip(ROW_FIELDS, r, strict=True)) for r in rows],
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return 0
    header = [
        "task",
        "state",
        "category",
        "status",
        run.primary or "score",
        "codes",
        "att",
        "retries",
        "secs",
        "tokens",
    ]
    table = [header] + [
        [
            _cell(r[0]),
            r[1],
            r[2],
            _cell(r[3]),
            _cell(r[4]),
            _cell(r[5]),
            str(r[6]),
            str(r[7]),
            _cell(r[8], 2),
            _cell(r[9], 0),
        ]
        for r in rows
    ]
    widths = [min(48, max(len(row[i]) for row in table)) for i in range(len(header))]
    for row in table:
        cells = [c if len(c) <= widths[i] else c[: widths[i] - 1] + "…" for i, c in enumerate(row)]
        sys.stdout.write("  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip() + "\n")
    sys.stdout.write(f"{len(rows)} of {len(run.rows)} task(s)\n")
    return 0


def _note_absent(rows: list[list[Any]], value: str | None, column: int, what: str) -> None:
    """A filter value no task of the run has: say so and list the values there are (categories
    and error codes are the run's own, so a typo is no error, but it must not pass unnoticed)."""
    if value is None:
        return
    seen: set[str] = set()
    for r in rows:
        cell = r[column]
        seen.update(str(c) for c in (cell if isinstance(cell, list) else [cell]) if c)
    if value in seen:
        return
    there = ", ".join(sorted(seen)[:20]) + (" …" if len(seen) > 20 else "") if seen else "none"
    sys.stderr.write(f"acx: note: no task of this run has {what} {value!r} ({what}s in the run: {there})\n")


def _compare(args: argparse.Namespace) -> int:
    from acx.report import compare_runs, load_run

    cmp = compare_runs(load_run(args.run_a), load_run(args.run_b))
    if args.format == "json":
        sys.stdout.write(json.dumps(cmp, indent=2) + "\n")
        return 0
    out = sys.stdout
    a, b = cmp["a"], cmp["b"]
    out.write(f"A: {a['request_name']} / {a['run_id']} ({a['tasks']} tasks)  {a['path']}\n")
    out.write(f"B: {b['request_name']} / {b['run_id']} ({b['tasks']} tasks)  {b['path']}\n")
    out.write(f"matched tasks: {cmp['matched']}; only in A: {len(cmp['only_a'])}; only in B: {len(cmp['only_b'])}\n\n")
    out.write(
        f"{'metric':<24} {'pairs':>6} {'A':>8} {'B':>8} {'B - A':>8}  {'95% interval':<20} {'up':>5} {'down':>5}\n"
    )
    for m in cmp["metrics"]:
        ci = f"[{m['ci95'][0]:+.3f}, {m['ci95'][1]:+.3f}]" if m["ci95"] else "—"
        diff = "—" if m["diff"] is None else f"{m['diff']:+.3f}"
        out.write(
            f"{m['metric']:<24} {m['n']:>6} {_cell(m['mean_a']):>8} {_cell(m['mean_b']):>8} {diff:>8}  {ci:<20} "
            f"{len(m['flipped_up']):>5} {len(m['flipped_down']):>5}\n"
        )

    def ids(label: str, items: list[str]) -> None:
        if items:
            more = f" … (+{len(items) - args.limit}; --format json lists all)" if len(items) > args.limit else ""
            out.write(f"  {label} ({len(items)}): {', '.join(items[: args.limit])}{more}\n")

    for m in cmp["metrics"]:
        if m["flipped_up"] or m["flipped_down"]:
            out.write(f"\n{m['metric']}:\n")
            ids("better in B", m["flipped_up"])
            ids("worse in B", m["flipped_down"])
    if cmp["only_a"] or cmp["only_b"]:
        out.write("\n")
        ids("only in A", cmp["only_a"])
        ids("only in B", cmp["only_b"])
    return 0


#: The final attempt statuses a task row can show (``acx.ir.TaskStatus``, and ``running`` for a
#: task still in progress); a test pins the two together (the CLI does not import acx.ir to start).
_STATUSES = (
    "completed",
    "run_error",
    "eval_error",
    "run_error_or_eval_error",
    "skipped",
    "cancelled",
    "interrupted",
    "running",
)


def _status(text: str) -> str:
    """``--status``: one of the statuses a row can have (a typo used to list no task, silently)."""
    if text not in _STATUSES:
        raise argparse.ArgumentTypeError(f"unknown status {text!r}; valid: {', '.join(_STATUSES)}")
    return text


def _count(text: str) -> int:
    """``--limit N``: a whole number >= 0 (a negative one used to cut the list from the end)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value
