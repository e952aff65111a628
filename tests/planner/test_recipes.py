"""Recipes: registry, whitelist, order, purity, declarative evaluation (contracts RC1–RC4)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import replace

import acx.ir as ir
from acx.compiler._recipes import (
    BaseRecipe,
    DeclarativeRecipeAdapter,
    RecipeRegistry,
    build_run_registry,
    builtin_registry,
    load_recipe_dir,
)
from acx.components._configs import HarnessConfig
from acx.diagnostics import Span
from acx.errors import AcxPlanError

from ._helpers import ModelHarness, make_plan, plan_one, task


class Timeout(BaseRecipe):
    """Sets the run budget to 100 unless one is set."""

    id = "timeout_100"

    def matches(self, req: ir.RunRequest, task: ir.TaskSpec, plan: ir.ExecutionPlan) -> bool:
        return plan.run_timeout_seconds is None

    def apply(self, plan: ir.ExecutionPlan, req: ir.RunRequest, task: ir.TaskSpec) -> ir.ExecutionPlan:
        return replace(plan, run_timeout_seconds=100.0)


class Double(BaseRecipe):
    """Doubles an existing run budget."""

    id = "double"

    def matches(self, req: ir.RunRequest, task: ir.TaskSpec, plan: ir.ExecutionPlan) -> bool:
        return plan.run_timeout_seconds is not None

    def apply(self, plan: ir.ExecutionPlan, req: ir.RunRequest, task: ir.TaskSpec) -> ir.ExecutionPlan:
        assert plan.run_timeout_seconds is not None
        return replace(plan, run_timeout_seconds=plan.run_timeout_seconds * 2)


def test_overlapping_recipes_follow_registry_order() -> None:  # contract RC3
    # Timeout then Double: Double sees Timeout's plan (RC2: each gets the previous plan) → 200.
    p = plan_one(recipes=RecipeRegistry([Timeout(), Double()]))
    assert (p.run_timeout_seconds, p.applied_recipes) == (200.0, ["timeout_100", "double"])
    # Reversed insertion order: Double does not match yet, Timeout applies → 100. Never sorted.
    p = plan_one(recipes=RecipeRegistry([Double(), Timeout()]))
    assert (p.run_timeout_seconds, p.applied_recipes) == (100.0, ["timeout_100"])


def test_whitelist() -> None:  # contract RC2
    reg = RecipeRegistry([Timeout(), Double()])
    p = plan_one(recipes=reg, execution={"enabled_recipes": ["double"]})
    assert p.applied_recipes == [] and p.run_timeout_seconds is None
    p = plan_one(recipes=reg, execution={"enabled_recipes": ["timeout_100"]})
    assert p.applied_recipes == ["timeout_100"]
    assert plan_one(recipes=reg, execution={"enabled_recipes": []}).applied_recipes == [
        "timeout_100",
        "double",
    ]


def test_apply_returns_copy_and_input_is_untouched() -> None:  # contract RC4
    seen: list[ir.ExecutionPlan] = []

    class Spy(Timeout):
        id = "spy"

        def apply(self, plan: ir.ExecutionPlan, req: ir.RunRequest, task: ir.TaskSpec) -> ir.ExecutionPlan:
            seen.append(plan)
            return super().apply(plan, req, task)

    p = plan_one(recipes=RecipeRegistry([Spy()]))
    assert seen[0].run_timeout_seconds is None  # frozen input plan unchanged
    assert p.run_timeout_seconds == 100.0


def test_recipe_must_return_a_plan() -> None:  # contract RC4
    class Bad(BaseRecipe):
        id = "bad"

        def apply(self, plan: Any, req: Any, task: Any) -> Any:
            return {"run_timeout_seconds": 1}

    with pytest.raises(AcxPlanError, match="not an ExecutionPlan"):
        plan_one(recipes=RecipeRegistry([Bad()]))


def test_recipe_provenance() -> None:
    rp = make_plan(recipes=RecipeRegistry([Timeout()]))
    chain = rp.plan_attempt_detailed(task(), 1).provenance["run_timeout_seconds"]
    assert chain[-1].layer == "recipe:timeout_100" and chain[-1].value == 100.0


def test_registry_ids_unique_and_copy() -> None:  # contract RC1
    reg = RecipeRegistry([Timeout()])
    with pytest.raises(AcxPlanError, match="duplicate recipe id"):
        reg.add(Timeout())
    copy = reg.copy()
    copy.add(Double())
    assert reg.ids() == ["timeout_100"] and copy.ids() == ["timeout_100", "double"]


def _recipe_dir(tmp_path: Path, body: str, acx: str | None = None) -> Path:
    d = tmp_path / "myrecipes"
    d.mkdir()
    (d / "__init__.py").write_text(textwrap.dedent(body))
    if acx is not None:
        (d / "more.acx").write_text(textwrap.dedent(acx))
    return d


def test_trusted_recipe_dir_appended_after_builtins(tmp_path: Path) -> None:  # contract RC1
    d = _recipe_dir(
        tmp_path,
        """
        from msgspec.structs import replace
        from acx.compiler._recipes import BaseRecipe

        class Ext(BaseRecipe):
            id = "ext_budget"

            def apply(self, plan, req, task):
                return replace(plan, run_timeout_seconds=42.0)

        RECIPE_CLASSES = [Ext]
        """,
        acx="""
        recipe ext_declarative {
          description = "x"
          match { harness = ["command"] }
          set { run_timer_compensation = 5s }
        }
        """,
    )
    reg = build_run_registry([str(d)])
    builtins = builtin_registry().ids()
    assert reg.ids() == [*builtins, "ext_budget", "ext_declarative"]
    p = plan_one(recipes=reg, recipe_dirs=[str(d)])
    assert p.run_timeout_seconds == 42.0 and p.run_timer_compensation_seconds == 5.0
    assert p.applied_recipes[-2:] == ["ext_budget", "ext_declarative"]


def test_recipe_dir_errors(tmp_path: Path) -> None:  # contract RC1
    with pytest.raises(AcxPlanError, match="RECIPE_CLASSES"):
        load_recipe_dir(_recipe_dir(tmp_path, "X = 1\n"))
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "__init__.py").write_text("class NotARecipe:\n    id = 'x'\nRECIPE_CLASSES = [NotARecipe]\n")
    with pytest.raises(AcxPlanError, match="not a concrete acx recipe"):
        load_recipe_dir(bad)
    with pytest.raises(AcxPlanError, match="does not exist"):
        load_recipe_dir(tmp_path / "missing")


class Decl:
    """A DeclarativeRecipe-shaped object (what ``load_acx_recipes`` returns)."""

    def __init__(self, id: str = "decl", *, match: Any = None, defaults: Any = None, set: Any = None) -> None:
        self.id = id
        self.description = "test"
        self.match = match or {}
        self.defaults = defaults or {}
        self.set = set or {}
        self.span = Span("recipes.acx", 3, 1)


def test_declarative_defaults_fill_only_missing() -> None:  # contracts RC4, H3
    r = DeclarativeRecipeAdapter(
        Decl(
            defaults={
                "environment": {"setup": {"workdir": "/app", "image": "default:1"}},
                "run_timer_compensation_seconds": 60,
            }
        )
    )
    p = plan_one(recipes=RecipeRegistry([r]))
    assert p.environment.setup.workdir == "/app" and p.environment.setup.image == "default:1"
    assert p.run_timer_compensation_seconds == 60.0
    # explicit user values win: workdir, image and compensation set by the request / task
    p = plan_one(
        task("t1", environment_setup={"image": "task:1"}),
        recipes=RecipeRegistry([r]),
        environment={"setup": {"workdir": "/work"}},
        execution={"run_timer_compensation_seconds": 30},
    )
    assert (p.environment.setup.workdir, p.environment.setup.image) == ("/work", "task:1")
    assert p.run_timer_compensation_seconds == 30.0


def test_declarative_keeps_explicit_value_equal_to_default() -> None:  # contract RC4
    r = DeclarativeRecipeAdapter(Decl(defaults={"run_timer_compensation_seconds": 60}))
    prov = {
        "execution.run_timer_compensation_seconds": [
            ir.Contribution(layer="default", kind="default", source="ExecutionSpec", value=120.0),
            ir.Contribution(layer="request", kind="file", source="spec.yaml:4:7", value=120.0),
        ]
    }
    rp = make_plan(recipes=RecipeRegistry([r]), provenance=prov, execution={"run_timer_compensation_seconds": 120})
    assert rp.plan_attempt(task(), 1).run_timer_compensation_seconds == 120.0
    assert make_plan(recipes=RecipeRegistry([r])).plan_attempt(task(), 1).run_timer_compensation_seconds == 60.0


def test_declarative_set_overrides_and_match() -> None:
    r = DeclarativeRecipeAdapter(
        Decl(
            match={"environment": ["docker"], "task_category": ["math"]},
            set={"run_timer_compensation_seconds": 1},
        )
    )
    reg = RecipeRegistry([r])
    hit = plan_one(task("t1", category="math"), recipes=reg, execution={"run_timer_compensation_seconds": 30})
    assert hit.run_timer_compensation_seconds == 1.0 and hit.applied_recipes == ["decl"]
    miss = plan_one(task("t1", category="prose"), recipes=reg)
    assert miss.applied_recipes == []


@pytest.mark.parametrize(
    ("decl", "message"),
    [
        (Decl(match={"benchmrk": ["x"]}), "unknown match key 'benchmrk'"),
        (Decl(defaults={"run_timeout": 5}), "no field 'run_timeout'"),
        (Decl(set={"environment": {"setup": {"wrkdir": "/x"}}}), "no field 'wrkdir'"),
        (Decl(set={"run_timer_compensation_seconds": "soon"}), "invalid value"),
    ],
)
def test_declarative_validation_errors(decl: Decl, message: str) -> None:
    with pytest.raises(AcxPlanError, match=message) as e:
        DeclarativeRecipeAdapter(decl)
    assert e.value.span == Span("recipes.acx", 3, 1)


def test_builtin_exact_match_budget_recipe(dataset) -> None:
    reg = builtin_registry()
    assert "exact_match_default_budgets" in reg.ids()
    from acx.components._configs import ExactMatchConfig
    from acx.components.benchmarks.exact_match import ExactMatchBenchmark

    path = dataset([{"id": "q1", "question": "?", "answer": "a"}])
    bench = ExactMatchBenchmark(ExactMatchConfig(dataset=str(path)))
    t = bench.load_tasks(None)[0]  # type: ignore[arg-type]
    p = plan_one(t, bench=bench, recipes=reg, benchmark="exact_match", env="host_process", caps=_host())
    assert (p.run_timeout_seconds, p.evaluation_timeout_seconds) == (600.0, 60.0)
    assert p.applied_recipes == ["exact_match_default_budgets"]
    # a harness fallback budget is not "missing": the recipe keeps it
    p = plan_one(
        t,
        bench=bench,
        recipes=reg,
        benchmark="exact_match",
        env="host_process",
        caps=_host(),
        harness=ModelHarness(HarnessConfig()),
    )
    assert p.run_timeout_seconds == 900.0


def _host() -> Any:
    from ._helpers import HOST

    return HOST


def test_builtin_harbor_dockerfile_workdir(harbor_task) -> None:
    from acx.components.harbor_task import load_harbor_task

    reg = builtin_registry()
    t = load_harbor_task(harbor_task("a", ""))
    p = plan_one(t, recipes=reg, benchmark="harbor")
    assert p.environment.setup.workdir == "/app"
    assert "harbor_docker_dockerfile_workdir" in p.applied_recipes
    own = load_harbor_task(harbor_task("b", '[environment]\nworkdir = "/srv"\n'))
    assert plan_one(own, recipes=reg, benchmark="harbor").environment.setup.workdir == "/srv"
    image = load_harbor_task(harbor_task("c", '[environment]\ndocker_image = "x:1"\n'))
    assert plan_one(image, recipes=reg, benchmark="harbor").environment.setup.workdir is None


@given(
    user=st.one_of(st.none(), st.floats(min_value=0, max_value=1e5)),
    recipe_default=st.floats(min_value=0, max_value=1e5),
)
def test_defaults_never_override_user_values(user: float | None, recipe_default: float) -> None:  # contract RC4
    r = DeclarativeRecipeAdapter(Decl(defaults={"run_timer_compensation_seconds": recipe_default}))
    execution = {} if user is None else {"run_timer_compensation_seconds": user}
    prov = (
        {}
        if user is None
        else {"execution.run_timer_compensation_seconds": [ir.Contribution(layer="cli", kind="cli", source="x")]}
    )
    p = make_plan(recipes=RecipeRegistry([r]), execution=execution, provenance=prov).plan_attempt(task(), 1)
    assert p.run_timer_compensation_seconds == (recipe_default if user is None else user)


def test_entry_point_recipes(monkeypatch: pytest.MonkeyPatch) -> None:  # contract RC1
    import importlib.metadata
    import types

    from acx.compiler import _recipes

    module = types.ModuleType("fake_recipes")
    module.RECIPE_CLASSES = [Double]  # type: ignore[attr-defined]

    class EP:
        def __init__(self, name: str, obj: Any) -> None:
            self.name, self.obj = name, obj

        def load(self) -> Any:
            return self.obj

    def fake(group: str) -> list[EP]:
        assert group == "acx.recipes"
        return [EP("one", Timeout), EP("mod", module)]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake)
    assert [r.id for r in _recipes._entry_point_recipes()] == ["timeout_100", "double"]


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("import not_a_module_anywhere\nRECIPE_CLASSES = []\n", 1, "ModuleNotFoundError"),
        ("x = 1\ny = (\n", 2, "SyntaxError"),
        ("def f():\n    raise RuntimeError('boom')\nf()\n", 2, "RuntimeError: boom"),
    ],
)
def test_recipe_dir_import_failure_is_a_clear_error(tmp_path: Path, body: str, line: int, message: str) -> None:
    # contract RC1: a trusted dir is still validated; a broken one names its file and line
    d = _recipe_dir(tmp_path, body)
    with pytest.raises(AcxPlanError, match=message) as e:
        load_recipe_dir(d)
    assert e.value.code == "E0430"
    assert e.value.span is not None and (e.value.span.file, e.value.span.line) == (str(d / "__init__.py"), line)
    assert "runtime.recipe_dirs" in (e.value.help or "")


def test_recipe_crash_is_a_planning_error_naming_the_recipe(tmp_path: Path) -> None:  # contract RC4
    d = _recipe_dir(
        tmp_path,
        """
        from acx.compiler._recipes import BaseRecipe

        class Crashing(BaseRecipe):
            id = "crashing"

            def apply(self, plan, req, task):
                return {}["missing"]

        class BadMatch(BaseRecipe):
            id = "bad_match"

            def matches(self, req, task, plan):
                raise ValueError("no")

        RECIPE_CLASSES = [Crashing, BadMatch]
        """,
    )
    crashing, bad_match = load_recipe_dir(d)
    assert crashing.origin == f"python:{d / '__init__.py'}:4:1 (Crashing)"  # the file, not a module hash
    with pytest.raises(AcxPlanError, match=r"recipe 'crashing' failed in apply\(\): KeyError") as e:
        plan_one(recipes=RecipeRegistry([crashing]))
    assert e.value.code == "E0432"
    assert e.value.span is not None and (e.value.span.file, e.value.span.line) == (str(d / "__init__.py"), 4)
    with pytest.raises(AcxPlanError, match=r"failed in matches\(\): ValueError: no"):
        plan_one(recipes=RecipeRegistry([bad_match]))


def test_builtin_origins_stay_module_paths() -> None:
    from acx.stdlib_recipes import HarborDockerfileWorkdir

    assert HarborDockerfileWorkdir().origin == "python:acx.stdlib_recipes._harbor.HarborDockerfileWorkdir"
