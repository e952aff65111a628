"""Small fake benchmark/harness classes and a builder for interpreter tests (fake driver, MockClock)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import trio
import trio.testing

from acx.components._base import BaseBenchmark, BaseHarness
from acx.components._configs import BenchmarkConfig, HarnessConfig
from acx.drivers.fake import FakeDriver
from acx.interpreter import OrchestrationResult, RequestProgram, run_orchestration
from acx.ir import (
    BenchmarkSpec,
    EnvironmentSpec,
    ExecutionPlan,
    ExecutionSpec,
    HarnessSpec,
    MetricContract,
    ModelSpec,
    OrchestratedRun,
    Orchestration,
    PreparedTask,
    ResolvedRuntimeOptions,
    RunRequest,
    RunResult,
    TaskInput,
    TaskSpec,
)

Behaviour = Callable[..., Awaitable[Any]]


class FakeBench(BaseBenchmark):
    id = "fakebench"
    description = "test benchmark"
    metric_contract = MetricContract.binary("correct")
    evaluation_timeout_metrics: Any = None

    def __init__(
        self,
        *,
        evaluate: Behaviour | None = None,
        prepare: Behaviour | None = None,
        run_task: Behaviour | None = None,
        harness_free: bool = False,
        parallel: bool = False,
        timeout_metrics: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(BenchmarkConfig())
        self._evaluate, self._prepare, self._run_task = evaluate, prepare, run_task
        self.harness_free = harness_free  # type: ignore[misc]
        self.parallel_attempts_safe = parallel  # type: ignore[misc]
        self.evaluation_timeout_metrics = timeout_metrics
        self.calls: list[tuple[str, str]] = []

    async def prepare_task(self, task: TaskSpec, session: Any, req: Any, plan: Any) -> PreparedTask:
        self.calls.append(("prepare", task.task_id))
        if self._prepare is not None:
            await self._prepare(task, session)
        return PreparedTask(task_id=task.task_id, category=task.category, input=TaskInput(prompt=task.question))

    async def run_task(self, task: TaskSpec, prepared: PreparedTask, req: Any, plan: Any, session: Any) -> RunResult:
        assert self._run_task is not None
        return await self._run_task(task, session, plan)

    async def evaluate(
        self,
        task: TaskSpec,
        prepared: PreparedTask,
        result: RunResult,
        req: Any,
        plan: Any,
        session: Any = None,
    ) -> RunResult:
        self.calls.append(("evaluate", task.task_id))
        if self._evaluate is not None:
            return await self._evaluate(task, result, session)
        return msgspec.structs.replace(result, metrics={"correct": result.final_answer == task.ground_truth})


class PyHarness(BaseHarness):
    id = "pyharness"
    description = "test harness"

    def __init__(
        self, execute: Behaviour | None = None, *, collect: Behaviour | None = None, parallel: bool = False
    ) -> None:
        super().__init__(HarnessConfig())
        self._execute, self._collect = execute, collect
        self.parallel_attempts_safe = parallel  # type: ignore[misc]
        self.collected = 0
        self.closed = 0

    async def execute_task(self, ctx: Any) -> RunResult:
        prepared, session, plan = ctx.prepared, ctx.session, ctx.plan
        if self._execute is not None:
            return await self._execute(prepared, session, plan)
        return RunResult(task_id=prepared.task_id, final_answer=prepared.input.prompt.upper())

    async def collect_result(self, ctx: Any, partial: RunResult | None) -> RunResult | None:
        self.collected += 1
        if self._collect is not None:
            return await self._collect(ctx.prepared, ctx.session, partial)
        return partial

    async def close_session(self, ctx: Any) -> None:
        self.closed += 1


def tasks(n: int, *, category: str = "all") -> list[TaskSpec]:
    return [TaskSpec(task_id=f"t{i}", question=f"q{i}", ground_truth=f"Q{i}", category=category) for i in range(n)]


def request(
    execution: ExecutionSpec | None = None, environment: EnvironmentSpec | None = None, name: str = "req"
) -> RunRequest:
    from acx.ir import RunMetadata

    return RunRequest(
        model=ModelSpec(id="m"),
        benchmark=BenchmarkSpec(id="fakebench"),
        harness=HarnessSpec(id="pyharness"),
        environment=environment or EnvironmentSpec(id="fake"),
        execution=execution or ExecutionSpec(),
        metadata=RunMetadata(request_name=name),
    )


def program(
    bench: FakeBench,
    harness: PyHarness,
    task_list: list[TaskSpec],
    *,
    driver: FakeDriver | None = None,
    name: str = "req",
    index: int = 0,
    execution: ExecutionSpec | None = None,
    environment: EnvironmentSpec | None = None,
    plan_overrides: dict[str, Any] | None = None,
    plan_log: list[tuple[str, int]] | None = None,
) -> RequestProgram:
    req = request(execution, environment, name)

    def plan_attempt(task: TaskSpec, attempt: int) -> ExecutionPlan:
        if plan_log is not None:
            plan_log.append((task.task_id, attempt))
        fields: dict[str, Any] = {
            "task_id": task.task_id,
            "attempt": attempt,
            "environment": req.environment,
            "execution": req.execution,
            "run_timeout_seconds": req.execution.run_timeout_seconds,
            "evaluation_timeout_seconds": req.execution.evaluation_timeout_seconds,
            "run_timer_compensation_seconds": req.execution.run_timer_compensation_seconds,
            "runresult_collect_timeout_seconds": req.execution.runresult_collect_timeout_seconds,
        }
        fields.update(plan_overrides or {})
        return ExecutionPlan(**fields)

    return RequestProgram(
        name=name,
        index=index,
        key=f"o/{index}",
        request=req,
        benchmark=bench,
        harness=harness,
        tasks=task_list,
        plan_attempt=plan_attempt,
        driver=driver or FakeDriver(),
    )


def orchestration(
    programs: list[RequestProgram], tmp: Path, *, task_concurrency: int = 4, **runtime: Any
) -> Orchestration:
    rt = ResolvedRuntimeOptions(results_dir=str(tmp / "results"), progress="none", **runtime)
    return Orchestration(
        id="orch",
        name="test",
        task_concurrency=task_concurrency,
        runtime=rt,
        requests=[OrchestratedRun(key=p.key, index=p.index, name=p.name, request=p.request) for p in programs],
    )


def run(
    programs: list[RequestProgram],
    tmp: Path,
    *,
    mock_clock: bool = True,
    environ: dict[str, str] | None = None,
    events: list[Any] | None = None,
    task_concurrency: int = 4,
    **kw: Any,
) -> OrchestrationResult:
    orch = orchestration(
        programs,
        tmp,
        task_concurrency=task_concurrency,
        **{k: v for k, v in kw.items() if k in ResolvedRuntimeOptions.__struct_fields__},
    )
    extra = {k: v for k, v in kw.items() if k not in ResolvedRuntimeOptions.__struct_fields__}
    sink = events.append if events is not None else (lambda e: None)

    async def main() -> OrchestrationResult:
        return await run_orchestration(
            orch, programs, environ=environ or {}, console=sink, io_threads=not mock_clock, **extra
        )

    clock = trio.testing.MockClock(autojump_threshold=0) if mock_clock else None
    return trio.run(main, clock=clock)


def run_dir(result: OrchestrationResult, i: int = 0) -> Path:
    d = result.requests[i].run_dir
    assert d is not None
    return Path(d)


def read_results(d: Path) -> dict[str, list[dict[str, Any]]]:
    """task_id → attempt results from every final state dir."""
    import json

    out: dict[str, list[dict[str, Any]]] = {}
    for state in ("normal", "error", "fatal"):
        for td in sorted((d / "details" / state).glob("*")):
            tj = json.loads((td / "task.json").read_text())
            out[tj["task_id"]] = [json.loads(p.read_text()) for p in sorted(td.glob("attempt-*/result.json"))]
    return out
