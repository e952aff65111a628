"""Timeout budgets (contracts T1–T5)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import UNSET
from msgspec.structs import replace

import acx.ir as ir
from acx.compiler._budgets import resolve_budget
from acx.compiler._recipes import BaseRecipe, RecipeRegistry
from acx.components._configs import HarnessConfig
from acx.errors import AcxPlanError

from ._helpers import ListBenchmark, ModelHarness, make_plan, plan_one, task


def test_stage_multiplier_replaces_common() -> None:  # contract T2
    t = task("t1", run_timeout_seconds=100, evaluation_timeout_seconds=10)
    p = plan_one(t, execution={"timeout_multiplier": 2.0, "run_timeout_multiplier": 3.0})
    assert p.run_timeout_seconds == 300.0  # 100 × 3, not 100 × 2 × 3
    assert p.evaluation_timeout_seconds == 20.0  # no stage multiplier → the common one


def test_null_override_and_multiplier_inherit() -> None:  # contract T2
    t = task("t1", run_timeout_seconds=100)
    p = plan_one(t, execution={"run_timeout_seconds": None, "run_timeout_multiplier": None, "timeout_multiplier": 1.5})
    assert p.run_timeout_seconds == 150.0
    p = plan_one(t, execution={"run_timeout_seconds": 40, "timeout_multiplier": 1.5})
    assert p.run_timeout_seconds == 60.0  # the request override replaces the default, then ×


def test_harness_fallback_only_without_task_or_benchmark_default() -> None:  # contract T2
    h = ModelHarness(HarnessConfig())  # default_run_timeout_seconds = 900
    assert plan_one(harness=h).run_timeout_seconds == 900.0
    bench = ListBenchmark([task()], plan=ir.BenchmarkPlan(run_timeout_seconds=100))
    assert plan_one(harness=h, bench=bench).run_timeout_seconds == 100.0
    t = task("t1", run_timeout_seconds=50)
    assert (
        plan_one(
            t, harness=h, bench=ListBenchmark([t], plan=ir.BenchmarkPlan(run_timeout_seconds=100))
        ).run_timeout_seconds
        == 50.0
    )
    explicit_none = task("t1", run_timeout_seconds=None)  # "no deadline" is a task default too
    assert plan_one(explicit_none, harness=h).run_timeout_seconds is None
    assert plan_one(harness=h).evaluation_timeout_seconds is None  # no harness fallback for evaluation


def test_compensation_and_collect_budgets_never_scaled() -> None:  # contracts T3, T4
    p = plan_one(
        task("t1", run_timeout_seconds=100),
        execution={
            "timeout_multiplier": 3.0,
            "run_timeout_multiplier": 2.0,
            "evaluation_timeout_multiplier": 4.0,
        },
    )
    assert p.run_timer_compensation_seconds == 120.0
    assert p.runresult_collect_timeout_seconds == 60.0
    assert p.artifact_limits.timeout_seconds == 600.0
    assert p.artifact_collect_timeout_seconds is None
    p = plan_one(
        execution={
            "run_timer_compensation_seconds": 30,
            "runresult_collect_timeout_seconds": 5,
            "artifact_collect_timeout_seconds": 90,
            "artifact_limits": {"timeout_seconds": 120},
        }
    )
    assert (p.run_timer_compensation_seconds, p.runresult_collect_timeout_seconds) == (30, 5)
    assert (p.artifact_collect_timeout_seconds, p.artifact_limits.timeout_seconds) == (90, 120)


class _Budget(BaseRecipe):
    id = "budget"

    def __init__(self, value: float = 777.0) -> None:
        self.value = value

    def apply(self, plan: ir.ExecutionPlan, req: ir.RunRequest, task: ir.TaskSpec) -> ir.ExecutionPlan:
        return replace(plan, run_timeout_seconds=self.value)


def test_recipes_change_final_budget(harbor_task) -> None:  # contract T5
    p = plan_one(task("t1", run_timeout_seconds=100), recipes=RecipeRegistry([_Budget()]))
    assert p.run_timeout_seconds == 777.0


@pytest.mark.parametrize("bad", [0.0, -5.0, math.inf, math.nan])
def test_budget_must_be_finite_positive(bad: float) -> None:  # contract T1
    with pytest.raises(AcxPlanError, match="finite positive") as e:
        plan_one(recipes=RecipeRegistry([_Budget(bad)]))
    assert e.value.code == "E0425"


opt_seconds = st.one_of(st.none(), st.floats(min_value=0.5, max_value=1e6))
opt_source = st.one_of(st.just(UNSET), opt_seconds)


@given(
    task_value=opt_source,
    bench_value=opt_source,
    harness=opt_seconds,
    override=opt_seconds,
    common=st.floats(min_value=0.1, max_value=10),
    stage=st.one_of(st.none(), st.floats(min_value=0.1, max_value=10)),
)
def test_budget_algebra(task_value, bench_value, harness, override, common, stage) -> None:  # contract T2
    b = resolve_budget(
        task_value=task_value,
        benchmark_value=bench_value,
        harness_fallback=harness,
        override=override,
        common_multiplier=common,
        stage_multiplier=stage,
        stage_multiplier_field="run_timeout_multiplier",
    )
    if task_value is not UNSET:
        default = task_value
    elif bench_value is not UNSET:
        default = bench_value
    else:
        default = harness
    base = override if override is not None else default
    mult = stage if stage is not None else common
    assert b.seconds == (None if base is None else base * mult)
    assert b.multiplier_field == ("run_timeout_multiplier" if stage is not None else "timeout_multiplier")


class _Decl:
    def __init__(self, *, defaults: dict | None = None, set: dict | None = None) -> None:
        self.id, self.description, self.match = "decl_budgets", "test", {}
        self.defaults, self.set = defaults or {}, set or {}
        self.span = None


def test_multiplier_scales_a_budget_only_a_recipe_default_gives() -> None:  # contracts T2, T5
    from acx.compiler._recipes import DeclarativeRecipeAdapter

    defaults = DeclarativeRecipeAdapter(_Decl(defaults={"run_timeout_seconds": 600, "evaluation_timeout_seconds": 60}))
    reg = RecipeRegistry([defaults])
    p = plan_one(recipes=reg, execution={"timeout_multiplier": 2.0, "run_timeout_multiplier": 3.0})
    assert (p.run_timeout_seconds, p.evaluation_timeout_seconds) == (1800.0, 120.0)  # stage replaces common
    assert plan_one(recipes=reg).run_timeout_seconds == 600.0
    # a budget the task gives is scaled once, and the recipe default does not fill it
    p = plan_one(task("t1", run_timeout_seconds=100), recipes=reg, execution={"timeout_multiplier": 2.0})
    assert p.run_timeout_seconds == 200.0
    # `set` is a final plan value (T5): not scaled
    forced = DeclarativeRecipeAdapter(_Decl(set={"run_timeout_seconds": 50}))
    p = plan_one(recipes=RecipeRegistry([forced]), execution={"timeout_multiplier": 2.0})
    assert p.run_timeout_seconds == 50.0
    # explain: the recipe default, then the planner's scaling
    rp = make_plan(recipes=reg, execution={"timeout_multiplier": 2.0})
    chain = rp.plan_attempt_detailed(task(), 1).provenance["run_timeout_seconds"]
    assert [(c.layer, c.value) for c in chain[-2:]] == [("recipe:decl_budgets", 600.0), ("planner", 1200.0)]
    assert "timeout_multiplier" in chain[-1].source
