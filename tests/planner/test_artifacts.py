"""Artifact planning (contracts A1–A4)."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

import acx.ir as ir
from acx.compiler._recipes import BaseRecipe, RecipeRegistry
from acx.errors import AcxPlanError

from ._helpers import ListBenchmark, make_plan, plan_one, task

CONV = ir.ArtifactSpec(source="/logs/artifacts", destination="logs/artifacts")


def test_convention_dir_always_collected() -> None:  # contract A1
    p = plan_one(task("t1"))
    assert p.artifacts == [CONV]
    assert p.collect_artifacts and p.artifact_collection_supported
    p = plan_one(task("t1", artifacts=[]))  # [] = no extra paths, not "off"
    assert p.artifacts == [CONV] and p.collect_artifacts


def test_explicit_convention_entry_keeps_its_excludes() -> None:  # contract A1
    t = task("t1", artifacts=[{"source": "/logs/artifacts", "exclude": ["*.tmp"]}, "/app/out.txt"])
    p = plan_one(t)
    assert p.artifacts == [
        ir.ArtifactSpec(source="/logs/artifacts", destination="logs/artifacts", exclude=["*.tmp"]),
        ir.ArtifactSpec(source="/app/out.txt", destination="app/out.txt"),
    ]


def test_request_artifacts_replace_task_extras() -> None:  # contract A2
    t = task("t1", artifacts=["/app/task.txt"], artifact_collect=[{"command": "make sub"}])
    assert [a.source for a in plan_one(t).artifacts] == ["/logs/artifacts", "/app/task.txt"]
    p = plan_one(t, execution={"artifacts": ["/app/mine.txt"]})
    assert [a.source for a in p.artifacts] == ["/logs/artifacts", "/app/mine.txt"]
    p = plan_one(t, execution={"artifacts": []})  # [] keeps only the convention dir
    assert p.artifacts == [CONV]
    assert [c.command for c in p.artifact_collect] == ["make sub"]  # commands inherited (null)
    p = plan_one(t, execution={"artifact_collect": []})  # [] clears the commands
    assert p.artifact_collect == []


@pytest.mark.parametrize(("mode", "expected"), [("fresh", True), ("reuse", False), ("none", False)])
def test_save_artifacts_default_by_mode(mode: str, expected: bool) -> None:  # contract A2
    p = plan_one(environment={"evaluation_environment_mode": mode})
    assert p.save_artifacts is expected
    assert plan_one(
        environment={"evaluation_environment_mode": mode}, execution={"save_artifacts": True}
    ).save_artifacts


def test_fresh_with_save_false_is_an_error() -> None:  # contract A2
    with pytest.raises(AcxPlanError, match="save_artifacts is false") as e:
        plan_one(environment={"evaluation_environment_mode": "fresh"}, execution={"save_artifacts": False})
    assert e.value.code == "E0422"
    p = plan_one(environment={"evaluation_environment_mode": "reuse"}, execution={"save_artifacts": False})
    assert p.save_artifacts is False and p.collect_artifacts  # collection still runs


@pytest.mark.parametrize("override", [{"artifacts": []}, {"artifacts": ["/x"]}, {"artifact_collect": []}])
def test_non_collecting_benchmark_rejects_any_override(override: dict) -> None:  # contract A3
    bench = ListBenchmark([task()], collect_artifacts=False)
    with pytest.raises(AcxPlanError, match="unsupported") as e:
        make_plan(bench=bench, execution=override)
    assert e.value.code == "E0423"


def test_non_collecting_benchmark_plan() -> None:  # contracts A1, A3
    bench = ListBenchmark([task("t1", artifacts=["/app/x"])], collect_artifacts=False)
    p = plan_one(task("t1", artifacts=["/app/x"]), bench=bench, execution={"artifacts": None})
    assert p.artifacts == [] and not p.collect_artifacts and not p.artifact_collection_supported


class _Resolving(ListBenchmark):
    def resolve_artifacts(self, task, req, plan):  # type: ignore[no-untyped-def]
        return [ir.ArtifactSpec(source=f"{plan.environment.setup.workdir}/submission")]


class _Workdir(BaseRecipe):
    id = "wd"

    def apply(self, plan, req, task):  # type: ignore[no-untyped-def]
        setup = replace(plan.environment.setup, workdir="/ws")
        return replace(plan, environment=replace(plan.environment, setup=setup))


def test_benchmark_resolves_artifacts_after_recipes() -> None:  # contract A3
    bench = _Resolving([task()])
    p = plan_one(bench=bench, recipes=RecipeRegistry([_Workdir()]))
    assert [a.source for a in p.artifacts] == ["/logs/artifacts", "/ws/submission"]
    p = plan_one(bench=bench, recipes=RecipeRegistry([_Workdir()]), execution={"artifacts": ["/explicit"]})
    assert [a.source for a in p.artifacts] == ["/logs/artifacts", "/explicit"]  # explicit request wins


def test_destination_conflicts() -> None:  # contracts A1, A4
    t = task("t1", artifacts=[{"source": "/a/x", "destination": "out"}, {"source": "/b/y", "destination": "out"}])
    d = make_plan(t).plan_attempt_detailed(t, 1, provenance=False)
    assert [a.source for a in d.plan.artifacts] == ["/logs/artifacts", "/a/x"]  # first wins
    assert any("first declaration wins" in w for w in d.warnings)
    nested_ok = task("t1", artifacts=["/logs/artifacts/result.txt"])
    assert len(plan_one(nested_ok).artifacts) == 2
    bad = task("t1", artifacts=[{"source": "/a", "destination": "out"}, {"source": "/b", "destination": "out/sub"}])
    with pytest.raises(AcxPlanError, match="overlap"):
        plan_one(bad)


@pytest.mark.parametrize(
    "spec",
    [
        {"source": "relative/x"},
        {"source": "/a/../etc"},
        {"source": "/a", "destination": "/abs"},
        {"source": "/a", "destination": "../up"},
        {"source": "/a", "service": "db"},
    ],
)
def test_invalid_artifact_specs(spec: dict) -> None:  # contract A4
    with pytest.raises(AcxPlanError) as e:
        plan_one(execution={"artifacts": [spec]})
    assert e.value.code == "E0424"


def test_fresh_same_source_different_excludes() -> None:  # contract A4
    arts = [
        {"source": "/app", "destination": "a", "exclude": ["*.o"]},
        {"source": "/app", "destination": "b"},
    ]
    with pytest.raises(AcxPlanError, match="different excludes"):
        plan_one(environment={"evaluation_environment_mode": "fresh"}, execution={"artifacts": arts})
    assert len(plan_one(execution={"artifacts": arts}).artifacts) == 3
