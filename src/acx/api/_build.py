"""From a spec or a compiled program to plans and runnable programs (the plan-time half).

The one place that probes driver capabilities and calls ``plan_request`` for a compiled
orchestration; the CLI (``acx compile``, ``acx explain``, ``acx run``) and the library API
(:func:`acx.compile`, :func:`acx.run`) both go through it. Nothing here imports trio: compiling
stays plan-time only; drivers are instantiated (not opened) when runnable programs are built.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from acx.errors import AcxConfigError

if TYPE_CHECKING:
    from acx.api._options import RunOptions
    from acx.compiler import Compiled, RequestPlan
    from acx.interpreter import RequestProgram
    from acx.ir import CompiledProgram, ExecutionPlan, OrchestratedRun, Orchestration, TaskSpec

__all__ = [
    "PlannedRequest",
    "build_programs",
    "compile_spec",
    "is_program_file",
    "load_program",
    "plan_compiled",
    "plan_one",
    "program_from_plans",
]

#: Where messages for the user go (compile warnings, planner warnings); one text per call.
Reporter = Callable[[str], None]


def compile_spec(
    spec: str | os.PathLike[str],
    *,
    configs: Sequence[str | os.PathLike[str]] = (),
    environment: str | None = None,
    task_concurrency: int | None = None,
    execution: Mapping[str, Any] | None = None,
    runtime: Mapping[str, Any] | None = None,
    report: Reporter | None = None,
) -> Compiled:
    """Resolve a spec with its config layers (the resolver's ``Compiled``: orchestration and
    provenance). Warnings (e.g. W0301) are rendered and passed to ``report``."""
    from acx.compiler import compile_orchestration

    compiled = compile_orchestration(
        os.fspath(spec),
        configs=[os.fspath(c) for c in configs],
        task_concurrency=task_concurrency,
        execution_params=execution,
        runtime_params=runtime,
        environment=environment,
    )
    if compiled.warnings and report is not None:
        from acx.diagnostics import render_text

        report(render_text(compiled.warnings, sources=compiled.sources))
    return compiled


def plan_one(
    compiled: Compiled,
    run: OrchestratedRun,
    *,
    request: Any = None,
    task_glob: str | None = None,
) -> RequestPlan:
    """Plan one request of ``compiled``: capabilities probed here (the edge), then the pure
    planner. ``request`` replaces ``run.request`` (e.g. with secret references resolved)."""
    from acx.compiler import plan_request
    from acx.drivers import probe_capabilities

    req = run.request if request is None else request
    rp = plan_request(
        req,
        base_dir=compiled.base_dirs.get(run.name, os.getcwd()),
        capabilities=probe_capabilities(req.environment.id),
        task_glob=task_glob,
        request_provenance=compiled.provenance.get(run.name),
    )
    rp.name = run.name
    return rp


@dataclass
class PlannedRequest:
    """One request's plans: ``rows`` = (task, {attempt: plan}, warnings, first-attempt provenance)."""

    name: str
    rp: RequestPlan
    rows: list[tuple[TaskSpec, dict[int, ExecutionPlan], list[str], Any]] = field(default_factory=list)


def _quiet(warning: Any) -> None:
    """Planner warnings are collected per task into the plans (and printed with them)."""


def plan_compiled(
    compiled: Compiled, *, task_glob: str | None = None, provenance: bool = False
) -> list[PlannedRequest]:
    """Plan every task × attempt of every request. ``provenance``: also record the plan
    provenance of each task's first attempt (the compiled program keeps it for ``explain``)."""
    out: list[PlannedRequest] = []
    for run in compiled.orchestration.requests:
        rp = plan_one(compiled, run, task_glob=task_glob)
        rp.on_warning = _quiet
        planned = PlannedRequest(run.name, rp)
        for task in rp.tasks:
            first = rp.plan_attempt_detailed(task, 1, provenance=provenance)
            plans: dict[int, ExecutionPlan] = {1: first.plan}
            warnings = list(first.warnings)
            for attempt in rp.attempts()[1:]:
                more: list[str] = []
                plans[attempt] = rp.plan_attempt(task, attempt, warnings=more)
                warnings.extend(w for w in more if w not in warnings)  # usually the same per attempt
            planned.rows.append((task, plans, warnings, first.provenance))
        out.append(planned)
    return out


def program_from_plans(compiled: Compiled, planned: list[PlannedRequest]) -> CompiledProgram:
    """The sealed compiled program (what ``acx compile -o plan.json`` writes)."""
    from acx.ir import CompiledProgram, CompiledRequest

    requests = [
        CompiledRequest(
            name=p.name,
            base_dir=compiled.base_dirs.get(p.name, os.getcwd()),
            tasks=[task for task, _, _, _ in p.rows],
            plans={task.task_id: {str(a): plan for a, plan in plans.items()} for task, plans, _, _ in p.rows},
            provenance={task.task_id: prov for task, _, _, prov in p.rows},
            warnings=[w for _, _, ws, _ in p.rows for w in ws],
        )
        for p in planned
    ]
    return CompiledProgram(orchestration=compiled.orchestration, requests=requests).sealed()


def is_program_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` looks like a compiled program (``acx compile -o``), not a spec."""
    path = os.fspath(path)
    if not path.endswith(".json"):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"acx.program"' in head or b'"kind":"acx.program"' in head


def load_program(path: str | os.PathLike[str]) -> CompiledProgram:
    """Read and verify a compiled program (E0201 unreadable, E0613 malformed or edited)."""
    from acx.ir import ProgramError, decode_program

    path = os.fspath(path)
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
            f"{path}: {exc}", code="E0613", path=path, help="recompile it with `acx compile SPEC -o plan.json`"
        ) from None


# ---- runnable programs ---------------------------------------------------------------------------


def build_programs(
    source: str | os.PathLike[str] | CompiledProgram, **options: Any
) -> tuple[Orchestration, list[RequestProgram]]:
    """``(orchestration, [RequestProgram])`` from a spec (compile + plan here) or a compiled
    program (its plans as compiled). The keyword arguments are the fields of
    :class:`acx.api.RunOptions` (``progress``, ``reuse`` and ``replay`` are the run's, unused
    here). A compiled program runs exactly as compiled: compile-time options with one are E0614;
    only ``runtime`` (process options), ``run_id`` and ``cluster`` apply. Secret references are
    resolved from ``environ`` (default ``os.environ``) for the components; the requests that get
    persisted keep the references. ``cluster`` (``ray`` or ``ray://HOST:PORT``, as ``--cluster``)
    or else ``runtime.cluster.address`` opens the sandboxes on a Ray cluster's nodes
    (:func:`acx.cluster.attach`)."""
    from acx.api._options import RunOptions

    opts = RunOptions(**options)
    orch, programs = _build(source, opts)
    if opts.cluster or orch.runtime.cluster.address:
        from acx.cluster import attach

        attach(programs, opts.cluster, orch.runtime)
    return orch, programs


def _build(
    source: str | os.PathLike[str] | CompiledProgram, opts: RunOptions
) -> tuple[Orchestration, list[RequestProgram]]:
    env = os.environ if opts.environ is None else opts.environ
    if isinstance(source, str | os.PathLike) and not is_program_file(source):
        compiled = compile_spec(
            source,
            configs=opts.configs,
            environment=opts.environment,
            task_concurrency=opts.task_concurrency,
            execution=opts.execution,
            runtime=opts.runtime,
            report=opts.report,
        )
        if opts.benchmark_params:
            compiled = _with_benchmark_params(compiled, opts.benchmark_params)
        return compiled.orchestration, _from_compiled(compiled, tasks=opts.tasks, run_id=opts.run_id, environ=env)
    program = load_program(source) if isinstance(source, str | os.PathLike) else source
    if opts.compile_time():
        raise AcxConfigError(
            "a compiled program runs exactly as compiled",
            code="E0614",
            path=os.fspath(source) if isinstance(source, str | os.PathLike) else "program",
            help="pass configs/environment/execution/task concurrency/tasks when compiling, or run the spec instead",
        )
    return _from_program(program, runtime=opts.runtime, run_id=opts.run_id, environ=env, report=opts.report)


def _with_benchmark_params(compiled: Compiled, params: Mapping[str, Any]) -> Compiled:
    """Every request's benchmark params with ``params`` merged over them (keys replaced), as
    ``acx regrade --benchmark-params`` asks; the benchmark's config validates them when planned."""
    import dataclasses

    runs = []
    for run in compiled.orchestration.requests:
        bench = run.request.benchmark
        new = msgspec.structs.replace(bench, params={**bench.params, **params})
        runs.append(msgspec.structs.replace(run, request=msgspec.structs.replace(run.request, benchmark=new)))
    orch = msgspec.structs.replace(compiled.orchestration, requests=runs)
    return dataclasses.replace(compiled, orchestration=orch)


def _with_run_id(req: Any, run_id: str | None) -> Any:
    if not run_id:
        return req
    return msgspec.structs.replace(req, output=msgspec.structs.replace(req.output, run_id=run_id))


def _from_compiled(
    compiled: Compiled, *, tasks: str | None, run_id: str | None, environ: Mapping[str, str]
) -> list[RequestProgram]:
    from acx.drivers import create_driver
    from acx.interpreter import RequestProgram
    from acx.interpreter._envvars import live_request

    orch = compiled.orchestration
    refuse_missing_env([run.request for run in orch.requests], environ)
    progs = []
    for run in orch.requests:
        req = _with_run_id(run.request, run_id)
        # Components are built from the request with its secret references resolved (from this
        # process, right before the run); the request that is persisted keeps the references.
        live, _ = live_request(req, environ)
        rp = plan_one(compiled, run, request=live, task_glob=tasks)
        rp.harness.spec_dir = compiled.base_dirs.get(run.name, os.getcwd())
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
                request_provenance=compiled.provenance.get(run.name),
                plan_provenance=functools.partial(_plan_provenance, rp),
            )
        )
    return progs


def _plan_provenance(rp: Any, task: TaskSpec) -> Any:
    """The plan provenance of the task's first attempt (planned again: pure and cheap)."""
    return rp.plan_attempt_detailed(task, 1).provenance


def _program_provenance(cr: Any, task: TaskSpec) -> Any:
    """A compiled program's recorded plan provenance of the task's first attempt."""
    return cr.provenance.get(task.task_id, {})


def _from_program(
    program: CompiledProgram,
    *,
    runtime: Mapping[str, Any] | None,
    run_id: str | None,
    environ: Mapping[str, str],
    report: Reporter | None,
) -> tuple[Orchestration, list[RequestProgram]]:
    from acx.drivers import create_driver
    from acx.interpreter import RequestProgram
    from acx.interpreter._envvars import live_request

    orch = program.orchestration
    refuse_missing_env([run.request for run in orch.requests], environ)
    if runtime:
        from acx.compiler._validate import check_cli_params
        from acx.ir import ResolvedRuntimeOptions

        # As for a spec: a bad override is a located error (E02xx at --runtime-params.<key>).
        errors = [
            d for d in check_cli_params(runtime, ResolvedRuntimeOptions, "--runtime-params") if d.severity == "error"
        ]
        if errors:
            raise AcxConfigError(diagnostics=errors)
        merged = {**msgspec.to_builtins(orch.runtime), **runtime}
        orch = msgspec.structs.replace(orch, runtime=msgspec.convert(merged, type(orch.runtime)))
    progs = []
    for run in orch.requests:
        cr = program.request(run.name)
        if report is not None:
            _report_program_warnings(run.name, cr.warnings, report)
        req = _with_run_id(run.request, run_id)
        live, _ = live_request(req, environ)
        bench, harness = _components(live, cr.base_dir)
        harness.spec_dir = cr.base_dir

        def plan_attempt(task: TaskSpec, attempt: int, _cr: Any = cr) -> ExecutionPlan:
            return _cr.plan(task.task_id, attempt)  # type: ignore[no-any-return]

        progs.append(
            RequestProgram(
                name=run.name,
                index=run.index,
                key=run.key,
                request=req,
                benchmark=bench,
                harness=harness,
                tasks=cr.tasks,
                plan_attempt=plan_attempt,
                driver=create_driver(live.environment.id, live.environment.params),
                namespace=_namespace(run.name),
                live_request=live,
                plan_provenance=functools.partial(_program_provenance, cr),
            )
        )
    return orch, progs


def _components(req: Any, base_dir: str) -> tuple[Any, Any]:
    from acx.components import BENCHMARKS, HARNESSES

    binfo, hinfo = BENCHMARKS[req.benchmark.id], HARNESSES[req.harness.id]
    bench = binfo.create(msgspec.convert(req.benchmark.params, binfo.config_class), base_dir=Path(base_dir))
    harness = hinfo.create(msgspec.convert(req.harness.params, hinfo.config_class))
    return bench, harness


def _report_program_warnings(name: str, warnings: list[str], report: Reporter) -> None:
    """A compiled program's planner warnings, worded as ``acx run SPEC`` logs them; a message
    recorded for many tasks is reported once with its count."""
    counts: dict[str, int] = {}
    for message in warnings:
        counts[message] = counts.get(message, 0) + 1
    for message, n in counts.items():
        times = f" ({n} tasks)" if n > 1 else ""
        report(f"acx: warning: request {name!r}: {message}{times}")


def _namespace(name: str) -> str:
    from acx.compiler import output_namespace

    return str(output_namespace(name))


def refuse_missing_env(requests: list[Any], environ: Mapping[str, str]) -> None:
    """Refuse before any task is loaded when loading needs a missing variable (a secret dataset
    path): then every name the requests need and the environment lacks is listed at once.
    Otherwise the interpreter's preflight lists them, with the names the tasks add (one E0310)."""
    from acx.interpreter._envvars import MissingEnvError, missing_names, referenced_names, request_names

    missing = {name for req in requests for name in missing_names(request_names(req), environ)}
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
