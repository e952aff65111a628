"""``acx run SPEC|PLAN.json``: compile (or load a compiled program), then run it.

Exit codes: 0 every request completed; 1 a request failed, partially failed or timed out; 2 bad
input (nothing ran); 130 cancelled with Ctrl-C (sandboxes released within the grace period; a
second Ctrl-C exits at once).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["build_programs", "register"]


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
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a killed or cancelled run in place")
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


def _is_program(path: str) -> bool:
    if not path.endswith(".json"):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"acx.program"' in head or b'"kind":"acx.program"' in head


def _load_program(path: str) -> Any:
    from acx.errors import AcxConfigError
    from acx.ir._program import ProgramError, decode_program

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AcxConfigError(
            f"cannot read {path}: {exc.strerror}",
            code="E0201",
            path=path,
            help="pass the file written by `acx compile SPEC -o plan.json`",
        ) from None
    try:
        return decode_program(data)
    except ProgramError as exc:
        raise AcxConfigError(
            f"{path}: {exc}",
            code="E0613",
            path=path,
            help="recompile it with `acx compile SPEC -o plan.json`",
        ) from None


def _components(req: Any, base_dir: str) -> tuple[Any, Any]:
    import msgspec

    from acx.components import BENCHMARKS, HARNESSES

    binfo, hinfo = BENCHMARKS[req.benchmark.id], HARNESSES[req.harness.id]
    bench = binfo.load()(msgspec.convert(req.benchmark.params, binfo.config_class), base_dir=Path(base_dir))
    harness = hinfo.load()(msgspec.convert(req.harness.params, hinfo.config_class))
    return bench, harness


def build_programs(args: argparse.Namespace, spec: str) -> tuple[Any, list[Any]]:
    """(Orchestration, [RequestProgram]) from a spec (compile + plan) or a compiled program."""
    import msgspec

    from acx.cli._run_report import register_provenance
    from acx.drivers import create_driver
    from acx.interpreter import RequestProgram

    runtime_over = _runtime_overrides(args)
    if _is_program(spec):
        from acx.errors import AcxConfigError

        if (
            args.config
            or _execution_overrides(args)
            or args.task_concurrency
            or args.tasks
            or getattr(args, "env", None)
        ):
            raise AcxConfigError(
                "a compiled program runs exactly as compiled",
                code="E0614",
                path=spec,
                help="pass --config/--env/--execution-params/--task-concurrency/--tasks to "
                "`acx compile`, or run the spec instead",
            )
        from acx.interpreter._envvars import live_request

        program = _load_program(spec)
        orch = program.orchestration
        _refuse_missing_env([run.request for run in orch.requests])
        if runtime_over:
            orch = msgspec.structs.replace(
                orch,
                runtime=msgspec.convert({**msgspec.to_builtins(orch.runtime), **runtime_over}, type(orch.runtime)),
            )
        progs = []
        for run in orch.requests:
            rp = program.request(run.name)
            _print_program_warnings(run.name, rp.warnings)
            live, _ = live_request(run.request, os.environ)
            bench, harness = _components(live, rp.base_dir)
            harness.spec_dir = rp.base_dir
            tasks = rp.tasks

            def plan_attempt(task: Any, attempt: int, _rp: Any = rp) -> Any:
                return _rp.plan(task.task_id, attempt)

            register_provenance(run.name, None, tasks, functools.partial(_program_provenance, rp))

            progs.append(
                RequestProgram(
                    name=run.name,
                    index=run.index,
                    key=run.key,
                    request=run.request,
                    benchmark=bench,
                    harness=harness,
                    tasks=tasks,
                    plan_attempt=plan_attempt,
                    driver=create_driver(live.environment.id, live.environment.params),
                    namespace=_namespace(run.name),
                    live_request=live,
                )
            )
        return orch, progs
    from acx.compiler import compile_orchestration
    from acx.compiler._planner import plan_request
    from acx.drivers import probe_capabilities
    from acx.interpreter._envvars import live_request

    compiled = compile_orchestration(
        spec,
        configs=args.config,
        task_concurrency=args.task_concurrency,
        execution_params=_execution_overrides(args),
        runtime_params=runtime_over,
        environment=getattr(args, "env", None),
    )
    if compiled.warnings:
        from acx.diagnostics import render_text

        sys.stderr.write(render_text(compiled.warnings, sources=compiled.sources) + "\n")
    orch = compiled.orchestration
    _refuse_missing_env([run.request for run in orch.requests])
    progs = []
    for run in orch.requests:
        req = run.request
        if args.run_id:
            req = msgspec.structs.replace(req, output=msgspec.structs.replace(req.output, run_id=args.run_id))
        # Components are built from the request with its secret references resolved (from this
        # process, right before the run); the request that is persisted keeps the references.
        live, _ = live_request(req, os.environ)
        rp = plan_request(
            live,
            base_dir=compiled.base_dirs.get(run.name, os.getcwd()),
            capabilities=probe_capabilities(req.environment.id),
            task_glob=args.tasks,
            request_provenance=compiled.provenance.get(run.name),
        )
        rp.harness.spec_dir = compiled.base_dirs.get(run.name, os.getcwd())
        register_provenance(
            run.name,
            compiled.provenance.get(run.name),
            rp.tasks,
            functools.partial(_plan_provenance, rp),
        )
        progs.append(
            RequestProgram(
                name=run.name,
                index=run.index,
                key=run.key,
                request=req,
                benchmark=rp.benchmark,
                harness=rp.harness,
                tasks=rp.tasks,
                plan_attempt=rp.plan_attempt,
                driver=create_driver(live.environment.id, live.environment.params),
                namespace=_namespace(run.name),
                live_request=live,
            )
        )
    return orch, progs


def _program_provenance(rp: Any, task: Any) -> Any:
    """A compiled program's recorded plan provenance of the task's first attempt."""
    return rp.provenance.get(task.task_id, {})


def _plan_provenance(rp: Any, task: Any) -> Any:
    """The plan provenance of the task's first attempt (planned again: pure and cheap)."""
    return rp.plan_attempt_detailed(task, 1).provenance


def _refuse_missing_env(requests: list[Any]) -> None:
    """Refuse before any task is loaded when loading needs a missing variable (a secret dataset
    path): then every name the requests need and the environment lacks is listed at once. Otherwise
    the interpreter's preflight lists them, together with the names the tasks add (one E0310)."""
    import msgspec

    from acx.interpreter._envvars import MissingEnvError, missing_names, referenced_names, request_names

    missing = {name for req in requests for name in missing_names(request_names(req), os.environ)}
    loading = set()
    for req in requests:
        for value in _strings(msgspec.to_builtins(req.benchmark.params)):
            loading |= referenced_names(value)[0]
    if missing & loading:
        raise MissingEnvError(missing)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _print_program_warnings(name: str, warnings: list[str]) -> None:
    """The planner warnings recorded in a compiled program, on stderr before the run.

    Same wording as ``acx run SPEC`` (the planner logs them there); a message the program records
    for many tasks is printed once with its count instead of once per task.
    """
    counts: dict[str, int] = {}
    for message in warnings:
        counts[message] = counts.get(message, 0) + 1
    for message, n in counts.items():
        times = f" ({n} tasks)" if n > 1 else ""
        sys.stderr.write(f"acx: warning: request {name!r}: {message}{times}\n")


def _namespace(name: str) -> str:
    try:
        from acx.compiler import output_namespace

        return str(output_namespace(name))
    except ImportError:  # pragma: no cover
        return name


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
)


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

    from acx.errors import AcxUserError
    from acx.interpreter import run_orchestration
    from acx.interpreter._events import make_console

    if not args.spec and not args.resume:
        raise AcxUserError(
            "acx run needs SPEC, PLAN.json or --resume RUN_DIR",
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
    invocation = {
        # As given, with the cwd: --resume recompiles from there, so the request hashes equal.
        "spec": spec,
        **{key: getattr(args, key) for key in _REPLAYED},
        "cwd": os.getcwd(),
    }
    orch, programs = build_programs(args, spec)
    if only is not None:
        programs = [p for p in programs if p.name == only]
        _check_resume_hash(args.resume, programs)
    reuse = {p.name: (args.reuse or None) for p in programs} if args.reuse is not None else None
    for p in programs:
        if reuse is None and (p.request.runtime.reuse or p.request.runtime.reuse_run_id) and not resume_dirs:
            reuse = reuse or {}
            reuse[p.name] = p.request.runtime.reuse_run_id
    _prepare_drivers(programs)
    console = make_console(orch.runtime.progress if args.progress is None else args.progress)

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
                    console=console.emit,
                    resume_dirs=resume_dirs,
                    reuse=reuse,
                    invocation=invocation,
                    cancel_scope_ready=lambda s: holder.__setitem__("scope", s),
                )
                nursery.cancel_scope.cancel()
        return result

    with console:
        try:
            result = trio.run(main)
        except BaseExceptionGroup as group:
            raise _unwrap(group) from None
    from acx.cli._run_report import write_run_reports

    reports = write_run_reports(result.requests, enabled=not args.no_report)
    try:
        _report(result, args.format, reports)
    except BrokenPipeError:
        # The reader went away (`acx run ... | head`): the run itself is done and recorded; its
        # exit code says how it went. Later flushes of the dead pipe go to /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return int(result.exit_code)


def _prepare_drivers(programs: list[Any]) -> None:
    """Before anything runs: every driver the run uses prepares (``Driver.prepare``): one whose
    provider cannot serve refuses the run here (E0701, exit 2, before any run directory is
    created); the notes it returns (sandboxes of crashed runs removed) go to stderr."""
    import msgspec
    import trio

    from acx.errors import AcxUserError, EnvironmentSetupError

    seen: dict[bytes, Any] = {}
    for p in programs:
        env = p.request.environment
        seen.setdefault(msgspec.json.encode([env.id, env.params], order="sorted"), p.driver)

    async def main() -> list[str]:
        notes: list[str] = []
        for driver in seen.values():
            notes += await driver.prepare()
        return notes

    try:
        notes = trio.run(main)
    except EnvironmentSetupError as exc:
        raise AcxUserError(str(exc), code="E0701", help="make the environment provider reachable") from None
    for note in notes:
        sys.stderr.write(f"acx: {note}\n")


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


def _report(result: Any, fmt: str, reports: dict[str, str] | None = None) -> None:
    reports = reports or {}
    if fmt == "json":
        payload = {
            "orchestration_id": result.orchestration_id,
            "name": result.name,
            "status": result.status,
            "started_at": result.started_at,
            "finished_at": result.finished_at,
            "requests": [{**o.__dict__, "report": reports.get(o.name)} for o in result.requests],
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
        if o.run_dir:
            sys.stdout.write(f"  summary: {o.run_dir}/summary.md\n")
        if o.name in reports:
            sys.stdout.write(f"  report: {reports[o.name]}\n")
    sys.stdout.write(f"status: {result.status}\n")
