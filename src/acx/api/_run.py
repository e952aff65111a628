"""Running programs (the run-time half): prepare the drivers, then the interpreter."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from acx.api._build import Reporter, build_programs
from acx.api._options import RunOptions

if TYPE_CHECKING:
    import trio

    from acx.interpreter import OrchestrationResult, ProgressEvent, RequestProgram
    from acx.ir import CompiledProgram, Orchestration

__all__ = ["prepare_drivers", "run_async", "run_programs"]

log = logging.getLogger("acx")


def _log_report(text: str) -> None:
    log.warning("%s", text)


async def prepare_drivers(programs: Sequence[RequestProgram], report: Reporter | None = None) -> None:
    """Every distinct driver the programs use prepares (``Driver.prepare``) before anything runs:
    a provider that cannot serve refuses the run here (``AcxUserError`` E0701) before any run
    directory exists; its notes (sandboxes of crashed runs removed) go to ``report``."""
    import msgspec

    from acx.errors import AcxUserError, EnvironmentSetupError

    seen: dict[bytes, Any] = {}
    for p in programs:
        env = p.request.environment
        seen.setdefault(msgspec.json.encode([env.id, env.params], order="sorted"), p.driver)
    for driver in seen.values():
        try:
            notes = await driver.prepare()
        except EnvironmentSetupError as exc:
            # The provider's own advice when it has one (a cluster: which node to start).
            help = exc.fields.get("help") or "make the environment provider reachable"
            raise AcxUserError(str(exc), code="E0701", help=help) from None
        for note in notes:
            (report or _log_report)(f"acx: {note}")
    for p in programs:
        contexts = _build_contexts(p)
        if contexts:
            await p.driver.check_builds(contexts)


def _build_contexts(program: RequestProgram) -> list[str]:
    """The build contexts (``environment/`` with a Dockerfile) of a program's tasks that have no
    image of their own or from the request (a Harbor task's Dockerfile is built then)."""
    if program.request.environment.setup.image is not None:
        return []
    out = []
    for task in program.tasks:
        meta = task.metadata if isinstance(task.metadata, dict) else {}
        context = meta.get("environment_dir")
        if task.environment_setup.image is None and isinstance(context, str):
            out.append(context)
    return out


async def run_programs(
    orchestration: Orchestration,
    programs: Sequence[RequestProgram],
    *,
    environ: Mapping[str, str] | None = None,
    progress: Callable[[ProgressEvent], None] | None = None,
    reuse: Mapping[str, str | None] | None = None,
    resume_dirs: Mapping[str, str] | None = None,
    replay: Mapping[str, str] | None = None,
    invocation: dict[str, Any] | None = None,
    cancel_scope_ready: Callable[[trio.CancelScope], None] | None = None,
    report: Reporter | None = None,
) -> OrchestrationResult:
    """Prepare the drivers, then run every program (``acx.interpreter.run_orchestration``)."""
    from acx.interpreter import keys_kept_from_agents, run_orchestration

    await prepare_drivers(programs, report)
    env = os.environ if environ is None else environ
    with keys_kept_from_agents(programs, env):
        return await run_orchestration(
            orchestration,
            programs,
            environ=env,
            console=progress or (lambda e: None),
            resume_dirs=resume_dirs,
            reuse=reuse,
            replay=replay,
            invocation=invocation,
            cancel_scope_ready=cancel_scope_ready,
        )


async def run_async(source: str | os.PathLike[str] | CompiledProgram, **options: Any) -> OrchestrationResult:
    """See :func:`acx.run` (this is its trio-native form; cancel it with a cancel scope). The
    keyword arguments are the fields of :class:`acx.api.RunOptions`."""
    opts = RunOptions(**options)
    if opts.benchmark_params is not None:
        raise TypeError("run_async() got an unexpected keyword argument 'benchmark_params'")
    orchestration, programs = build_programs(source, **{**vars(opts), "report": opts.report or _log_report})
    return await run_programs(
        orchestration,
        programs,
        environ=opts.environ,
        progress=opts.progress,
        reuse=reuse_map(programs, opts.reuse),
        report=opts.report,
        replay=replay_map(programs, opts.replay, opts.reuse),
    )


def replay_map(
    programs: Sequence[RequestProgram], replay: str | os.PathLike[str] | None, reuse: bool | str = False
) -> dict[str, str] | None:
    """``{request name: run directory}`` for ``replay`` (the request of the run's own name),
    checked before anything runs: E0660 (not a run, no model call), E0661 (with ``reuse``, or no
    such request in ``programs``)."""
    if replay is None:
        return None
    from acx.errors import AcxUserError
    from acx.interpreter._models import load_replay, replayed_request

    if reuse:
        raise AcxUserError(
            "replay excludes reuse", code="E0661", path="replay", help="replay starts a new run answered from RUN_DIR"
        )
    run_dir = os.path.abspath(replay)
    load_replay(run_dir)
    name = replayed_request(run_dir)
    if name not in {p.name for p in programs}:
        raise AcxUserError(
            f"replay {run_dir}: the spec has no request {name!r} (the replayed run's)",
            code="E0661",
            path="replay",
            help="replay with the spec the run came from",
        )
    return {str(name): run_dir}


def reuse_map(programs: Sequence[RequestProgram], reuse: bool | str | None) -> dict[str, str | None] | None:
    """Which run each request reuses: ``True``/``""`` the newest, ``"ID"`` that one, ``False``/``None``
    what the request's own ``runtime.reuse`` / ``reuse_run_id`` say."""
    if reuse is True or isinstance(reuse, str):
        source = reuse if isinstance(reuse, str) and reuse else None
        return {p.name: source for p in programs}
    out: dict[str, str | None] = {}
    for p in programs:
        if p.request.runtime.reuse or p.request.runtime.reuse_run_id:
            out[p.name] = p.request.runtime.reuse_run_id
    return out or None
