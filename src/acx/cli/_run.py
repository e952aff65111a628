"""``acx run SPEC|PLAN.json``: compile (or load a compiled program), then run it.

Exit codes: 0 every request completed; 1 a request failed, partially failed or timed out; 2 bad
input (nothing ran); 130 cancelled with Ctrl-C (sandboxes released within the grace period; a
second Ctrl-C exits at once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from acx.errors import AcxConfigError, AcxUserError

__all__ = ["build_programs", "register", "run_programs"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a spec or a compiled plan.json and write results",
        description="Compile SPEC (or load PLAN.json from `acx compile -o`) and run every request; "
        "results go to <results_dir>/<request>/<run_id>/ (run_info.json, details/, metrics.json, "
        "summary.md, progress.jsonl).",
    )
    p.add_argument("spec", metavar="SPEC|PLAN.json", nargs="?", help="orchestration/.acx spec or compiled program")
    p.add_argument("--config", action="append", default=[], metavar="FILE", help="run config layer (repeatable)")
    p.add_argument("--task-concurrency", type=int, metavar="N", help="global limit of concurrent attempts")
    from acx.cli._compile import add_env_flag

    add_env_flag(p)
    p.add_argument("--execution-params", metavar="JSON", help="execution overrides for every request")
    p.add_argument("--runtime-params", metavar="JSON", help="process runtime overrides")
    p.add_argument("--results-dir", metavar="DIR", help="results root (runtime.results_dir)")
    p.add_argument("--run-id", metavar="ID", help="explicit run id for every request (must not exist)")
    p.add_argument("--timeout-seconds", type=float, metavar="S", help="overall deadline; 0 disables")
    p.add_argument("--cleanup-grace-seconds", type=float, metavar="S", help="time to release sandboxes on cancel")
    p.add_argument("--max-retries", type=int, metavar="N", help="runtime retries per attempt (execution)")
    p.add_argument("--k", type=int, metavar="K", help="attempts per task (execution.attempts.k)")
    p.add_argument("--attempt-strategy", choices=("avg", "pass"), help="execution.attempts.strategy")
    p.add_argument("--keep-environment", action="store_true", default=None, help="leave sandboxes running")
    p.add_argument("--tasks", metavar="GLOB", help="only tasks whose id matches GLOB")
    p.add_argument(
        "--reuse",
        nargs="?",
        const="",
        metavar="RUN_ID",
        help="new run that copies verified finished tasks of RUN_ID (default: the newest run)",
    )
    p.add_argument(
        "--cluster",
        metavar="ray[://HOST:PORT]",
        help="open sandboxes on the nodes of a Ray cluster (docs/cluster.md; overrides "
        "runtime.cluster.address); needs acx-eval[cluster]",
    )
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a killed or cancelled run in place")
    p.add_argument(
        "--replay",
        metavar="RUN_DIR",
        help="new run of RUN_DIR's request with every model call answered from RUN_DIR's own transcripts "
        "(model_calls.json), per task and attempt in order; a call that differs is a replay_diverged issue",
    )
    p.add_argument(
        "--no-checkpoint-resume",
        dest="checkpoint_resume",
        action="store_false",
        default=None,
        help="with --resume/--reuse: rerun attempts whose evaluation failed in full instead of "
        "evaluating them again from their checkpoints (runtime.checkpoint_resume: false)",
    )
    p.add_argument(
        "--recovery",
        choices=("rerun", "strict"),
        default=None,
        help="with --resume/--reuse: what an attempt whose evaluation checkpoint is refused (an "
        "evaluation input changed) or missing does — rerun: its agent runs again (default); strict: "
        "it is marked eval_error with the reason and its agent is not run again",
    )
    p.add_argument("--progress", choices=("auto", "plain", "none"), help="console progress (default auto)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="final report format")
    p.add_argument(
        "--no-report",
        action="store_true",
        help="do not write report.html into each run directory at the end (acx report RUN_DIR writes it later)",
    )
    p.set_defaults(handler=_handle)


# ---- inputs ------------------------------------------------------------------------------------


def _json_arg(text: str | None, flag: str) -> dict[str, Any] | None:
    from acx.cli._compile import _EXAMPLE
    from acx.cli._compile import _json_arg as parse
    from acx.errors import AcxConfigError

    value = parse(text, flag)
    if value is not None and not isinstance(value, dict):
        raise AcxConfigError(
            f"{flag} must be a JSON object",
            code="E0216",
            path=flag,
            help=f"e.g. {flag} '{_EXAMPLE.get(flag, '{}')}'",
        )
    return value


def _execution_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    out = dict(_json_arg(args.execution_params, "--execution-params") or {})
    if args.max_retries is not None:
        out["max_retries"] = args.max_retries
    if args.k is not None or args.attempt_strategy is not None:
        attempts = dict(out.get("attempts") or {})
        if args.k is not None:
            attempts["k"] = args.k
        if args.attempt_strategy is not None:
            attempts["strategy"] = args.attempt_strategy
        out["attempts"] = attempts
    if args.keep_environment:
        out["keep_environment"] = True
    return out or None


def _runtime_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    out = dict(_json_arg(args.runtime_params, "--runtime-params") or {})
    for flag, key in (
        ("results_dir", "results_dir"),
        ("timeout_seconds", "timeout_seconds"),
        ("cleanup_grace_seconds", "cleanup_grace_seconds"),
        ("progress", "progress"),
    ):
        value = getattr(args, flag)
        if value is not None:
            out[key] = value
    return out or None


def _stderr(text: str) -> None:
    sys.stderr.write(text + "\n")


def build_programs(args: argparse.Namespace, spec: str) -> tuple[Any, list[Any]]:
    """(Orchestration, [RequestProgram]) for ``acx run``'s flags (:func:`acx.api.build_programs`)."""
    from acx.api import build_programs as build

    execution = _execution_overrides(args)
    runtime = _runtime_overrides(args)
    try:
        orch, programs = build(
            spec,
            configs=args.config,
            environment=getattr(args, "env", None),
            task_concurrency=args.task_concurrency,
            execution=execution,
            runtime=runtime,
            tasks=args.tasks,
            run_id=args.run_id,
            report=_stderr,
            benchmark_params=getattr(args, "benchmark_params_override", None),
            cluster=getattr(args, "cluster", None),
        )
    except AcxConfigError as exc:
        if exc.code == "E0614":  # say it in terms of the flags
            raise AcxConfigError(
                "a compiled program runs exactly as compiled",
                code="E0614",
                path=spec,
                help="pass --config/--env/--execution-params/--task-concurrency/--tasks to "
                "`acx compile`, or run the spec instead",
            ) from None
        raise
    from acx.cli._run_report import register_exports, register_provenance

    for p in programs:
        register_provenance(p.name, p.request_provenance, p.tasks, p.plan_provenance)
        register_exports(p.name, p.request.output.export)
    return orch, programs


# ---- resume ------------------------------------------------------------------------------------


#: Flags recorded in .acx/invocation.json and replayed by --resume (unless given again).
_REPLAYED = (
    "config",
    "execution_params",
    "runtime_params",
    "task_concurrency",
    "tasks",
    "run_id",
    "results_dir",
    "timeout_seconds",
    "cleanup_grace_seconds",
    "max_retries",
    "k",
    "attempt_strategy",
    "keep_environment",
    "cluster",
)


def _replay_inputs(args: argparse.Namespace) -> tuple[str, str]:
    """(spec, request name) of ``--replay DIR``: the spec and flags the run was started with (a
    new run id), its transcripts checked readable before anything runs (E0660)."""
    from acx.errors import AcxUserError
    from acx.interpreter._models import load_replay
    from acx.interpreter._store import read_record

    if args.resume or args.reuse is not None:
        raise AcxUserError(
            "--replay excludes --resume and --reuse",
            code="E0661",
            path="--replay",
            help="--replay starts a new run answered from RUN_DIR's transcripts",
        )
    run_dir = Path(args.replay).resolve()
    load_replay(run_dir)
    args.replay = str(run_dir)
    inv_path = run_dir / ".acx" / "invocation.json"
    inv = read_record(inv_path) if inv_path.is_file() else {}
    if not args.spec and inv.get("cwd") and os.path.isdir(inv["cwd"]):
        os.chdir(inv["cwd"])  # relative spec/config paths resolve as they did
    spec = args.spec or inv.get("spec")
    if not spec:
        raise AcxUserError(
            f"--replay {run_dir}: cannot tell which spec this run came from (no .acx/invocation.json)",
            code="E0661",
            path="--replay",
            help="pass the spec: acx run SPEC --replay RUN_DIR",
        )
    for key in _REPLAYED:
        if key != "run_id" and getattr(args, key, None) in (None, []) and inv.get(key) is not None:
            setattr(args, key, inv[key])
    return spec, str(inv.get("request_name") or read_record(run_dir / "run_info.json").get("request_name"))


def _resume_inputs(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """(spec, request name, invocation) of the run in ``--resume DIR``."""
    from acx.errors import AcxResultsError
    from acx.interpreter._store import RunStore, read_record

    store = RunStore.open_existing(args.resume)
    inv_path = store.run_dir / ".acx" / "invocation.json"
    if not inv_path.is_file():
        raise AcxResultsError(
            f"{store.run_dir} has no .acx/invocation.json",
            code="E0610",
            help="only runs started by `acx run` can be resumed",
        )
    inv = read_record(inv_path)
    args.resume = str(store.run_dir.resolve())
    if not args.spec and inv.get("cwd") and os.path.isdir(inv["cwd"]):
        os.chdir(inv["cwd"])  # relative spec/config paths and spec metadata resolve as they did
    spec = args.spec or inv.get("spec")
    if not spec:
        raise AcxResultsError(
            "cannot tell which spec this run came from",
            code="E0610",
            help="pass the spec: acx run SPEC --resume DIR",
        )
    for key in _REPLAYED:
        if getattr(args, key, None) in (None, []) and inv.get(key) is not None:
            setattr(args, key, inv[key])
    return spec, str(inv.get("request_name")), inv


# ---- the command -------------------------------------------------------------------------------


def _handle(args: argparse.Namespace) -> int:
    import trio

    from acx.api import prepare_drivers, reuse_map
    from acx.errors import AcxUserError
    from acx.interpreter._events import make_console

    if not args.spec and not args.resume and not args.replay:
        raise AcxUserError(
            "acx run needs SPEC, PLAN.json, --resume RUN_DIR or --replay RUN_DIR",
            code="E0615",
            path="SPEC",
            help="e.g. acx run examples/quickstart.acx",
        )
    resume_dirs: dict[str, str] = {}
    spec = args.spec
    only: str | None = None
    if args.resume:
        if args.reuse is not None:
            raise AcxUserError(
                "--resume and --reuse exclude each other",
                code="E0616",
                path="--reuse",
                help="--resume continues a run in place; --reuse starts a new one",
            )
        spec, only, _ = _resume_inputs(args)
        resume_dirs[only] = args.resume
    replay_dirs: dict[str, str] = {}
    if args.replay:
        spec, only = _replay_inputs(args)
        replay_dirs[only] = args.replay
    invocation = {
        # As given, with the cwd: --resume recompiles from there, so the request hashes equal.
        "spec": spec,
        **{key: getattr(args, key) for key in _REPLAYED},
        "cwd": os.getcwd(),
    }
    orch, programs = build_programs(args, spec)  # on a cluster: --cluster, else runtime.cluster
    if only is not None:
        programs = [p for p in programs if p.name == only]
        if args.resume:
            _check_resume_hash(args.resume, programs)
    if replay_dirs and not programs:
        raise AcxUserError(
            f"--replay {args.replay}: the spec has no request {only!r} (the replayed run's)",
            code="E0661",
            path="--replay",
            help="replay with the spec the run came from",
        )
    reuse = None if resume_dirs else reuse_map(programs, args.reuse)
    if args.checkpoint_resume is False and not resume_dirs and not reuse:
        # It only acts when earlier attempts are recovered: refused, not silently ignored.
        raise AcxUserError(
            "--no-checkpoint-resume needs --resume or --reuse (or runtime.reuse)",
            code="E0616",
            path="--no-checkpoint-resume",
            help="a new run has no checkpoints to recover from: drop the flag, or add --resume RUN_DIR / --reuse",
        )
    _check_recovery_flag(args, bool(resume_dirs or reuse))
    # Before any run directory exists: a provider that cannot serve is E0701 (exit 2).
    trio.run(prepare_drivers, programs, _stderr)
    console = make_console(orch.runtime.progress if args.progress is None else args.progress)

    with console:
        result = run_programs(
            orch,
            programs,
            console.emit,
            resume_dirs=resume_dirs,
            reuse=reuse,
            replay=replay_dirs or None,
            checkpoint_resume=args.checkpoint_resume,
            recovery=args.recovery or "rerun",
            invocation=invocation,
        )
    from acx.cli._run_report import write_run_exports, write_run_reports

    reports = write_run_reports(result.requests, enabled=not args.no_report)
    exports = write_run_exports(result.requests)
    try:
        _report(result, args.format, reports, exports)
    except BrokenPipeError:
        # The reader went away (`acx run ... | head`): the run itself is done and recorded; its
        # exit code says how it went. Later flushes of the dead pipe go to /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return int(result.exit_code)


def _check_recovery_flag(args: argparse.Namespace, recovers: bool) -> None:
    """``--recovery`` only acts when earlier attempts are recovered: refused, not silently ignored."""
    if args.recovery is None:
        return
    if not recovers:
        raise AcxUserError(
            f"--recovery {args.recovery} needs --resume or --reuse (or runtime.reuse)",
            code="E0616",
            path="--recovery",
            help="a new run has no checkpoints to recover from: drop the flag, or add --resume RUN_DIR / --reuse",
        )
    if args.recovery == "strict" and args.checkpoint_resume is False:
        raise AcxUserError(
            "--recovery strict contradicts --no-checkpoint-resume (which reruns every such attempt's agent)",
            code="E0616",
            path="--recovery",
            help="keep one of them: --recovery strict never reruns an agent, --no-checkpoint-resume always does",
        )


def run_programs(orch: Any, programs: list[Any], emit: Any, **kwargs: Any) -> Any:
    """Run the orchestration with Ctrl-C/SIGTERM handling (first: cancel and release the
    sandboxes; second: exit at once); ``kwargs`` go to :func:`acx.interpreter.run_orchestration`."""
    import trio

    from acx.interpreter import keys_kept_from_agents, run_orchestration

    async def main() -> Any:
        import signal

        holder: dict[str, trio.CancelScope] = {}
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    count = 0
                    async for _ in signals:
                        count += 1
                        if count >= 2:
                            sys.stderr.write("acx: forced exit\n")
                            os._exit(130)
                        sys.stderr.write("\nacx: cancelling — releasing sandboxes (Ctrl-C again to force exit)\n")
                        if "scope" in holder:
                            holder["scope"].cancel()

                nursery.start_soon(watch)
                result = await run_orchestration(
                    orch,
                    programs,
                    environ=os.environ,
                    console=emit,
                    cancel_scope_ready=lambda s: holder.__setitem__("scope", s),
                    **kwargs,
                )
                nursery.cancel_scope.cancel()
        return result

    try:
        with keys_kept_from_agents(programs, os.environ):
            return trio.run(main)
    except BaseExceptionGroup as group:
        raise _unwrap(group) from None


def _unwrap(group: BaseExceptionGroup) -> BaseException:
    """The single real error inside trio's exception groups (e.g. an AcxUserError from preflight)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _check_resume_hash(run_dir: str, programs: list[Any]) -> None:
    from acx.errors import AcxResultsError
    from acx.interpreter._orchestrator import tasks_hash
    from acx.interpreter._store import read_record
    from acx.ir import content_hash

    info = read_record(Path(run_dir) / "run_info.json")
    if not programs:
        raise AcxResultsError(
            f"the spec no longer has request {info.get('request_name')!r}",
            code="E0611",
            help="resume with the spec the run started from",
        )
    if info.get("request_hash") and content_hash(programs[0].request) != info["request_hash"]:
        raise AcxResultsError(
            f"the request {programs[0].name!r} changed since the run in {run_dir} started",
            code="E0612",
            help="resume only with the same spec, configs and overrides; "
            "otherwise start a new run (optionally with --reuse)",
        )
    if info.get("tasks_hash") and tasks_hash(programs[0].tasks) != info["tasks_hash"]:
        raise AcxResultsError(
            f"the tasks of request {programs[0].name!r} changed since the run in {run_dir} started "
            "(the dataset was edited, or --tasks selects others)",
            code="E0619",
            help="resume only with the same dataset and --tasks; otherwise start a new run "
            "(--reuse copies the finished tasks that are still valid)",
        )


def _report(
    result: Any, fmt: str, reports: dict[str, str] | None = None, exports: dict[str, list[str]] | None = None
) -> None:
    reports = reports or {}
    exports = exports or {}
    if fmt == "json":
        payload = {
            "orchestration_id": result.orchestration_id,
            "name": result.name,
            "status": result.status,
            "started_at": result.started_at,
            "finished_at": result.finished_at,
            "requests": [
                {**o.__dict__, "report": reports.get(o.name), "exports": exports.get(o.name, [])}
                for o in result.requests
            ],
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    for o in result.requests:
        head = o.headline or {}
        value = head.get("value")
        score = f"{head.get('series_id')} = {value:.3f}" if isinstance(value, int | float) else "no official score"
        sys.stdout.write(f"{o.name}: {o.status} — {score} — {o.counts.get('tasks', 0)} task(s) — {o.run_dir}\n")
        if o.error:
            sys.stdout.write(f"  {o.error}\n")
        if o.run_dir and o.status != "disk_full":  # a run stopped by a full disk has no summary yet
            sys.stdout.write(f"  summary: {o.run_dir}/summary.md\n")
        if o.name in reports:
            sys.stdout.write(f"  report: {reports[o.name]}\n")
        for line in exports.get(o.name, []):
            sys.stdout.write(f"  export: {line}\n")
    sys.stdout.write(f"status: {result.status}\n")
