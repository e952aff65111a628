"""The library API: compile and run specs from Python, as the ``acx`` command does.

::

    import acx

    program = acx.compile("eval.acx", environment="docker")   # plan-time only (no trio)
    result = acx.run(program)                                  # or acx.run("eval.acx", ...)
    result.exit_code, [o.status for o in result.requests]

    # trio users:
    result = await acx.run_async("eval.acx", tasks="hello-*")

Keyword arguments mirror the command-line flags; the one list of them, with their meaning, is
:class:`RunOptions` (``configs`` = ``--config``, ``environment`` = ``--env``, ``execution`` =
``--execution-params``, ``runtime`` = ``--runtime-params``, ``tasks`` = ``--tasks``, …). Bad input raises
:class:`acx.AcxUserError` (with diagnostics: code, span or field path, help) before anything
runs; task failures never raise — they are in the returned
:class:`acx.interpreter.OrchestrationResult`.

Lower-level building blocks (what the CLI uses): :func:`compile_spec` (the resolver's view, with
provenance), :func:`plan_compiled` / :func:`program_from_plans`, :func:`build_programs` (runnable
:class:`acx.interpreter.RequestProgram` s) and :func:`run_programs`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from acx.api._build import (
    PlannedRequest,
    build_programs,
    compile_spec,
    is_program_file,
    load_program,
    plan_compiled,
    plan_one,
    program_from_plans,
)
from acx.api._options import RunOptions
from acx.api._run import prepare_drivers, reuse_map, run_async, run_programs

if TYPE_CHECKING:
    from acx.interpreter import OrchestrationResult
    from acx.ir import CompiledProgram

__all__ = [
    "PlannedRequest",
    "RunOptions",
    "build_programs",
    "compile",
    "compile_async",
    "compile_spec",
    "is_program_file",
    "load_program",
    "plan_compiled",
    "plan_one",
    "prepare_drivers",
    "program_from_plans",
    "reuse_map",
    "run",
    "run_async",
    "run_programs",
]


def compile(
    spec: str | os.PathLike[str],
    *,
    configs: Sequence[str | os.PathLike[str]] = (),
    environment: str | None = None,
    task_concurrency: int | None = None,
    execution: Mapping[str, Any] | None = None,
    runtime: Mapping[str, Any] | None = None,
    tasks: str | None = None,
    report: Callable[[str], None] | None = None,
) -> CompiledProgram:
    """Compile ``spec`` into a sealed :class:`acx.ir.CompiledProgram`: the orchestration and the
    plan of every selected task × attempt (exactly what ``acx compile SPEC -o plan.json`` writes;
    encode it with ``msgspec.json.encode``). Pure planning: no sandbox, model or secret is
    touched and trio is not imported. Compile warnings go to ``report`` (default: the ``acx``
    logger)."""
    from acx.api._run import _log_report

    compiled = compile_spec(
        spec,
        configs=configs,
        environment=environment,
        task_concurrency=task_concurrency,
        execution=execution,
        runtime=runtime,
        report=report or _log_report,
    )
    return program_from_plans(compiled, plan_compiled(compiled, task_glob=tasks, provenance=True))


async def compile_async(spec: str | os.PathLike[str], **options: Any) -> CompiledProgram:
    """:func:`compile` in a worker thread, for trio users (same keyword arguments)."""
    import functools

    import trio

    return await trio.to_thread.run_sync(functools.partial(compile, spec, **options))


def run(source: str | os.PathLike[str] | CompiledProgram, **options: Any) -> OrchestrationResult:
    """Run a spec (compiled here) or a compiled program (a :class:`CompiledProgram` or a
    ``plan.json`` path; it runs exactly as compiled, so only ``runtime``, ``run_id``, ``reuse``
    and ``cluster`` apply) and write results under ``runtime.results_dir``.

    The keyword arguments are the fields of :class:`RunOptions` (an unknown one is a
    ``TypeError``): ``configs``, ``environment``, ``task_concurrency``, ``execution``,
    ``runtime``, ``tasks``, ``run_id``, ``reuse``, ``environ``, ``progress``, ``report``,
    ``cluster``, ``replay``. Returns the :class:`~acx.interpreter.OrchestrationResult`
    (``exit_code``: 0 all completed, 1 a request failed or timed out).
    """
    import trio

    opts = RunOptions(**options)
    return trio.run(lambda: run_async(source, **vars(opts)))
