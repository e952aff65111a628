"""``acx regrade RUN_DIR``: evaluate a finished run again from its evaluation checkpoints (A9).

A new run directory (``-o DIR``, else the next run id next to the source) re-evaluates every
attempt of the source whose checkpoint is still valid, with the current evaluation — a new
verifier version, changed ``--benchmark-params`` or another ``--scorer`` — and runs no agent.
Attempts that cannot be recovered are recorded (``not_recoverable``) and listed with the reason.
The spec, configs and flags come from the source's ``.acx/invocation.json``, as for ``--resume``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "regrade",
        help="evaluate a run again from its evaluation checkpoints (no agent runs)",
        description="Start a new run that re-evaluates every recoverable attempt of RUN_DIR with the "
        "current evaluation (or changed --benchmark-params / --scorer), without running any agent; "
        "attempts that cannot be recovered are listed with the reason.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run to regrade (contains run_info.json)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--benchmark-params", metavar="JSON", help="benchmark params merged over the run's")
    group.add_argument("--scorer", metavar="ID", help="grade with this scorer (benchmark param scorers: [ID])")
    p.add_argument("-o", "--output", metavar="NEW_RUN_DIR", help="the new run directory (must not exist)")
    p.add_argument("--progress", choices=("auto", "plain", "none"), help="console progress (default auto)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="final report format")
    p.set_defaults(handler=_handle)


def _overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    from acx.cli._run import _json_arg

    if args.scorer is not None:
        return {"scorers": [args.scorer]}
    return _json_arg(args.benchmark_params, "--benchmark-params")


def _handle(args: argparse.Namespace) -> int:
    import trio

    from acx.api import prepare_drivers
    from acx.cli._run import _REPLAYED, _resume_inputs, _stderr, build_programs, run_programs
    from acx.errors import AcxResultsError, AcxUserError
    from acx.interpreter._events import make_console
    from acx.interpreter._store import refuse_if_running

    params = _overrides(args)  # bad JSON is refused before anything is read or written
    output = os.path.abspath(args.output) if args.output else None
    source = Path(args.run_dir).resolve()
    run_args = argparse.Namespace(
        **{**dict.fromkeys(_REPLAYED), "config": [], "spec": None, "resume": str(source), "env": None, "progress": None}
    )
    spec, name, _ = _resume_inputs(run_args)  # E0603/E0604/E0610 for a directory that is no run
    refuse_if_running(source)  # E0617 before planning (the run itself holds the source, too)
    run_args.run_id = None  # a new run: never the source's id
    run_args.benchmark_params_override = params
    try:
        orch, programs = build_programs(run_args, spec)
    except AcxUserError as exc:
        if args.scorer is not None and exc.code == "E0200" and "`scorers`" in str(exc):
            # Say it in terms of the flag: only dataset-style benchmarks take a scorer list.
            raise AcxUserError(
                f"--scorer {args.scorer}: the run's benchmark takes no `scorers` param",
                code="E0200",
                path="--scorer",
                help="--scorer works for the dataset benchmark and its presets; "
                "use --benchmark-params for other benchmarks",
            ) from None
        raise
    programs = [p for p in programs if p.name == name]
    if not programs:
        raise AcxResultsError(
            f"the spec no longer has request {name!r}",
            code="E0611",
            path=str(source),
            help="regrade with the spec the run started from",
        )
    trio.run(prepare_drivers, programs, _stderr)
    console = make_console(orch.runtime.progress if args.progress is None else args.progress)
    with console:
        result = run_programs(
            orch,
            programs,
            console.emit,
            regrade={name: str(source)},
            run_dirs={name: output} if output else None,
        )
    from acx.cli._run_report import write_run_reports

    reports = write_run_reports(result.requests, enabled=True)
    outcome = result.requests[0]
    unrecoverable = _unrecoverable(Path(outcome.run_dir)) if outcome.run_dir else []
    if args.format == "json":
        payload = {
            "source": str(source),
            "run_dir": outcome.run_dir,
            "status": outcome.status,
            "headline": outcome.headline,
            "report": reports.get(outcome.name),
            "not_recovered": unrecoverable,
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        head = outcome.headline or {}
        value = head.get("value")
        score = f"{head.get('series_id')} = {value:.3f}" if isinstance(value, int | float) else "no official score"
        sys.stdout.write(f"regraded {source}\n  → {outcome.run_dir}: {outcome.status} — {score}\n")
        if outcome.error:
            sys.stdout.write(f"  {outcome.error}\n")
        if unrecoverable:
            sys.stdout.write(f"  {len(unrecoverable)} attempt(s) not regraded:\n")
            for item in unrecoverable:
                sys.stdout.write(f"    {item['task_id']} attempt {item['attempt']}: {item['reason']}\n")
        else:
            sys.stdout.write("  every attempt was regraded\n")
    return int(result.exit_code)


def _unrecoverable(run_dir: Path) -> list[dict[str, Any]]:
    """The new run's attempts recorded as ``not_recoverable``, with the reason."""
    out: list[dict[str, Any]] = []
    for path in sorted(run_dir.glob("details/*/*/attempt-*/result.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for issue in data.get("issues", []):
            if issue.get("code") == "not_recoverable":
                reason = str(issue.get("message", "")).removeprefix("not regraded: ")
                out.append({"task_id": data.get("task_id"), "attempt": data.get("attempt"), "reason": reason})
    return out
