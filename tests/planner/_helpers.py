"""Helpers for planner tests: requests, small components, one-call planning."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

import acx.ir as ir
from acx.compiler._planner import RequestPlan, plan_request
from acx.compiler._recipes import RecipeRegistry
from acx.components._base import BaseBenchmark, BaseHarness
from acx.components._configs import BenchmarkConfig, HarnessConfig
from acx.drivers._specs import DriverCapabilities

DOCKER = DriverCapabilities(
    network_modes=("public", "no-network", "allowlist"),
    dynamic_network_policy=True,
    task_env=True,
    startup_env=True,
    resources=("cpu", "memory_mb", "storage_mb", "gpu"),
    isolated_filesystem=True,
    setup_image=True,
)
HOST = DriverCapabilities(
    network_modes=("public",),
    task_env=True,
    startup_env=True,
    unsupported_reasons={"allowlist": "host_process cannot filter egress by host; use --env docker"},
)


class FakeHarness(BaseHarness):
    id = "command"
    description = "test harness"
    default_run_timeout_seconds: ClassVar[float | None] = None
    calls_model: ClassVar[bool] = False


class ModelHarness(FakeHarness):
    id = "openai_chat"
    default_run_timeout_seconds: ClassVar[float | None] = 900.0
    calls_model: ClassVar[bool] = True


class ListBenchmark(BaseBenchmark):
    """A benchmark over an in-memory list of TaskSpecs (set ``tasks`` on the instance)."""

    id = "listbench"
    description = "test benchmark"
    evaluation_environment_mode: ClassVar[str] = "none"
    collect_artifacts: ClassVar[bool] = True

    def __init__(self, tasks: list[ir.TaskSpec], plan: ir.BenchmarkPlan | None = None, **attrs: Any) -> None:
        super().__init__(BenchmarkConfig())
        self.tasks = tasks
        self.plan = plan or ir.BenchmarkPlan()
        for k, v in attrs.items():
            setattr(self, k, v)

    def load_tasks(self, req: ir.RunRequest) -> list[ir.TaskSpec]:
        return list(self.tasks)

    def build_plan(self, task: ir.TaskSpec, req: ir.RunRequest) -> ir.BenchmarkPlan:
        return self.plan


def make_request(
    *,
    benchmark: str = "listbench",
    bench_params: dict[str, Any] | None = None,
    harness: str = "command",
    harness_params: dict[str, Any] | None = None,
    env: str = "docker",
    environment: dict[str, Any] | None = None,
    execution: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    name: str = "req",
    recipe_dirs: list[str] | None = None,
) -> ir.RunRequest:
    return ir.RunRequest(
        model=msgspec.convert(model or {"id": "m"}, ir.ModelSpec),
        benchmark=ir.BenchmarkSpec(id=benchmark, params=bench_params or {}),
        harness=ir.HarnessSpec(id=harness, params=harness_params or {}),
        environment=msgspec.convert({"id": env, **(environment or {})}, ir.EnvironmentSpec),
        execution=msgspec.convert(_arts(execution or {}), ir.ExecutionSpec),
        metadata=ir.RunMetadata(request_name=name, recipe_dirs=recipe_dirs or []),
    )


def _arts(fields: dict[str, Any]) -> dict[str, Any]:
    """A4: a string artifact is an absolute source path (shorthand for ``{source: …}``)."""
    if isinstance(fields.get("artifacts"), list):
        fields = {
            **fields,
            "artifacts": [{"source": a} if isinstance(a, str) else a for a in fields["artifacts"]],
        }
    return fields


def task(task_id: str = "t1", **fields: Any) -> ir.TaskSpec:
    return msgspec.convert({"task_id": task_id, **_arts(fields)}, ir.TaskSpec)


def plan_one(
    t: ir.TaskSpec | None = None,
    *,
    caps: DriverCapabilities = DOCKER,
    recipes: RecipeRegistry | None = None,
    harness: BaseHarness | None = None,
    bench: BaseBenchmark | None = None,
    attempt: int = 1,
    **req_kw: Any,
) -> ir.ExecutionPlan:
    return make_plan(t, caps=caps, recipes=recipes, harness=harness, bench=bench, **req_kw).plan_attempt(
        t or task(), attempt
    )


def make_plan(
    t: ir.TaskSpec | None = None,
    *,
    caps: DriverCapabilities = DOCKER,
    recipes: RecipeRegistry | None = None,
    harness: BaseHarness | None = None,
    bench: BaseBenchmark | None = None,
    provenance: ir.Provenance | None = None,
    harness_id: str = "command",
    **req_kw: Any,
) -> RequestPlan:
    """``harness`` is the component instance; ``harness_id`` the request's ``harness.id``."""
    t = t or task()
    return plan_request(
        make_request(harness=harness_id, **req_kw),
        base_dir=".",
        capabilities=caps,
        recipes=recipes if recipes is not None else RecipeRegistry(),
        benchmark=bench or ListBenchmark([t]),
        harness=harness or FakeHarness(HarnessConfig()),
        request_provenance=provenance,
    )
