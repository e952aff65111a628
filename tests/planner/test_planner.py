"""Planning steps, modes, policies, environments and capability checks (P3–P7, H2–H5, V1, V3, V4)."""

from __future__ import annotations

from typing import ClassVar

import pytest

import acx.ir as ir
from acx.compiler._recipes import BaseRecipe, RecipeRegistry
from acx.components._configs import HarnessConfig
from acx.drivers._specs import DriverCapabilities
from acx.errors import AcxPlanError, CapabilityError

from ._helpers import (
    DOCKER,
    HOST,
    FakeHarness,
    ListBenchmark,
    ModelHarness,
    make_plan,
    make_request,
    plan_one,
    task,
)

NO_NET = {"network_mode": "no-network"}


def test_plan_per_attempt_is_deterministic_and_pure() -> None:  # contract P3
    t = task("t1", question="q")
    rp = make_plan(t)
    p1, p2 = rp.plan_attempt(t, 1), rp.plan_attempt(t, 2)
    assert (p1.attempt, p2.attempt) == (1, 2)
    assert rp.plan_attempt(t, 1) == p1  # same inputs, same plan: no side effects of earlier planning
    assert ir.canonical_json(rp.plan_attempt(t, 1)) == ir.canonical_json(p1)
    assert rp.request == make_request()  # the request is never mutated (B5)


def test_evaluation_mode_precedence() -> None:  # contract P5
    bench = ListBenchmark([task()], evaluation_environment_mode="reuse")
    assert plan_one(bench=bench).evaluation_environment_mode == "reuse"
    t = task("t1", evaluation_environment_mode="none")
    assert (
        plan_one(t, bench=ListBenchmark([t], evaluation_environment_mode="reuse")).evaluation_environment_mode == "none"
    )
    p = plan_one(t, environment={"evaluation_environment_mode": "fresh"})
    assert p.evaluation_environment_mode == "fresh"
    assert p.evaluation_environment is not None


def test_policy_request_over_task_then_public() -> None:  # contract P6
    t = task(
        "t1",
        run_network_policy=NO_NET,
        evaluation_network_policy={"network_mode": "allowlist", "allowed_hosts": ["a"]},
    )
    p = plan_one(t)
    assert p.run_network_policy == ir.NetworkPolicy(network_mode="no-network")
    assert p.evaluation_network_policy.allowed_hosts == ["a"]
    assert p.environment.baseline_network_policy == ir.NetworkPolicy()  # step 7: missing → public
    p = plan_one(t, environment={"run_network_policy": {"network_mode": "public"}})
    assert p.run_network_policy == ir.NetworkPolicy()
    assert p.environment.run_network_policy == p.run_network_policy


class _SeesPolicies(BaseRecipe):
    """Records what a recipe sees: policies are not yet defaulted (P4 step 6 before step 7)."""

    id = "sees"
    seen: list[ir.ExecutionPlan] = []

    def apply(self, plan: ir.ExecutionPlan, req: ir.RunRequest, task: ir.TaskSpec) -> ir.ExecutionPlan:
        self.seen.append(plan)
        return plan


def test_step_order_recipes_before_defaults_and_verifier() -> None:  # contract P4
    _SeesPolicies.seen = []
    p = plan_one(
        task("t1"),
        recipes=RecipeRegistry([_SeesPolicies()]),
        bench=ListBenchmark([task("t1")], plan=ir.BenchmarkPlan(params={"k": 1})),
        environment={"evaluation_environment_mode": "fresh"},
    )
    seen = _SeesPolicies.seen[0]
    assert seen.benchmark_plan.params == {"k": 1}  # (4) before (6)
    assert seen.run_network_policy is None  # (7) after (6)
    assert seen.evaluation_environment is None  # (8) after (6)
    assert p.run_network_policy == ir.NetworkPolicy()
    assert p.evaluation_environment is not None
    assert p.applied_recipes == ["sees"]


class _WorkdirRecipe(BaseRecipe):
    id = "workdir_default"

    def matches(self, req: ir.RunRequest, task: ir.TaskSpec, plan: ir.ExecutionPlan) -> bool:
        return plan.environment.setup.workdir is None

    def apply(self, plan: ir.ExecutionPlan, req: ir.RunRequest, task: ir.TaskSpec) -> ir.ExecutionPlan:
        from msgspec.structs import replace

        setup = replace(plan.environment.setup, workdir="/recipe")
        return replace(plan, environment=replace(plan.environment, setup=setup))


FRESH = {"evaluation_environment_mode": "fresh"}


def test_verifier_setup_inherits_only_when_none(harbor_task) -> None:  # contract H2
    recipes = RecipeRegistry([_WorkdirRecipe()])
    inherit = task("t1", environment_setup={"image": "agent:1"})
    p = plan_one(inherit, recipes=recipes, environment=FRESH)
    assert p.evaluation_environment is not None
    # None → inherits the resolved run setup, recipe defaults included
    assert p.evaluation_environment.setup == ir.EnvironmentSetup(image="agent:1", workdir="/recipe")
    independent = task("t1", environment_setup={"image": "agent:1"}, evaluation_environment_setup={})
    p = plan_one(independent, recipes=recipes, environment=FRESH)
    assert p.environment.setup.image == "agent:1"
    assert p.evaluation_environment.setup == ir.EnvironmentSetup()  # explicit empty table stays independent
    own = task("t1", evaluation_environment_setup={"image": "verifier:1", "workdir": "/grade"})
    p = plan_one(own, environment={**FRESH, "evaluation_setup": {"workdir": "/override"}})
    assert p.evaluation_environment.setup == ir.EnvironmentSetup(image="verifier:1", workdir="/override")


@pytest.mark.parametrize(
    ("field", "request_value"),
    [("image", "req:1"), ("workdir", "/req"), ("build_timeout_seconds", 77.0)],
)
def test_request_setup_is_layered_over_an_independent_verifier_setup(field: str, request_value: object) -> None:
    # contract H2; issue 11 item 17: the request's `environment.setup` was not layered into the
    # fresh verifier of a task that declares its own verifier environment (the reference does)
    verifier = {"image": "verifier:1", "workdir": "/grade", "build_timeout_seconds": 10.0}
    t = task("t1", environment_setup={"image": "agent:1", "workdir": "/app"}, evaluation_environment_setup=verifier)
    p = plan_one(t, environment={**FRESH, "setup": {field: request_value}})
    assert p.evaluation_environment is not None
    assert getattr(p.evaluation_environment.setup, field) == request_value
    assert getattr(p.environment.setup, field) == request_value
    # the task's run setup still does not leak into its independent verifier (H2)
    untouched = {k: v for k, v in verifier.items() if k != field}
    for k, v in untouched.items():
        assert getattr(p.evaluation_environment.setup, k) == v
    # request evaluation_setup beats request setup for the verifier
    p = plan_one(t, environment={**FRESH, "setup": {field: request_value}, "evaluation_setup": {"image": "eval:9"}})
    assert p.evaluation_environment.setup.image == "eval:9"
    # an explicit empty verifier table: request setup only, nothing of the task's run setup
    empty = task("t1", environment_setup={"image": "agent:1", "workdir": "/app"}, evaluation_environment_setup={})
    p = plan_one(empty, environment={**FRESH, "setup": {field: request_value}})
    assert p.evaluation_environment.setup == ir.EnvironmentSetup(**{field: request_value})


def test_request_setup_overrides_task_defaults() -> None:  # contract H2
    t = task("t1", environment_setup={"image": "task:1", "workdir": "/app", "build_timeout_seconds": 100})
    p = plan_one(t, environment={"setup": {"image": "mine:2"}})
    assert p.environment.setup == ir.EnvironmentSetup(image="mine:2", workdir="/app", build_timeout_seconds=100)


@pytest.mark.parametrize(("key", "target"), [("image", "setup.image"), ("evaluation_image", "evaluation_setup.image")])
def test_legacy_image_params_rejected(key: str, target: str) -> None:  # contract H3
    with pytest.raises(AcxPlanError) as e:
        make_plan(environment={"params": {key: "x:1"}})
    assert e.value.code == "E0420"
    assert target in str(e.value)


def test_fresh_verifier_baseline_precedence() -> None:  # contract H4
    agent = {"network_mode": "allowlist", "allowed_hosts": ["agent.example"]}
    declared = task("t1", baseline_network_policy=agent, evaluation_baseline_network_policy=NO_NET)
    p = plan_one(declared, environment=FRESH)
    assert p.evaluation_environment.baseline_network_policy == ir.NetworkPolicy(network_mode="no-network")
    # none declared → inherits the agent baseline
    p = plan_one(task("t1", baseline_network_policy=agent), environment=FRESH)
    assert p.evaluation_environment.baseline_network_policy.allowed_hosts == ["agent.example"]
    # explicit empty verifier table → its own default public (the loader sets NetworkPolicy())
    empty = task("t1", baseline_network_policy=agent, evaluation_baseline_network_policy={})
    p = plan_one(empty, environment=FRESH)
    assert p.evaluation_environment.baseline_network_policy == ir.NetworkPolicy()
    # request baseline > task verifier baseline; request evaluation baseline > request baseline
    p = plan_one(declared, environment={**FRESH, "baseline_network_policy": {"network_mode": "public"}})
    assert p.evaluation_environment.baseline_network_policy == ir.NetworkPolicy()
    p = plan_one(
        declared,
        environment={
            **FRESH,
            "baseline_network_policy": {"network_mode": "public"},
            "evaluation_baseline_network_policy": {"network_mode": "allowlist", "allowed_hosts": ["v"]},
        },
    )
    assert p.evaluation_environment.baseline_network_policy.allowed_hosts == ["v"]


@pytest.mark.parametrize(
    "field",
    [
        {"evaluation_setup": {"image": "v"}},
        {"evaluation_baseline_network_policy": NO_NET},
        {"evaluation_resources": {"cpu": 1}},
        {"evaluation_environment_env_variables": {"A": "1"}},
    ],
)
def test_evaluation_fields_require_fresh(field: dict) -> None:  # contracts H4, V3
    with pytest.raises(AcxPlanError, match="requires evaluation_environment_mode fresh") as e:
        plan_one(environment={"evaluation_environment_mode": "reuse", **field})
    assert e.value.code == "E0421"


def test_env_variable_layers_and_references() -> None:  # contracts V1, V3
    t = task(
        "t1",
        env_variables={"PUB": "task", "KEEP": "${KEEP_ME}"},
        run_env_variables={"RUN": "${AGENT_KEY:-none}"},
        evaluation_env_variables={"GRADER": "${GRADER_KEY}"},
    )
    p = plan_one(t, environment={"env_variables": {"PUB": "request ${EMBED}"}})
    env = p.environment
    assert env.env_variables == {"PUB": "request ${EMBED}", "KEEP": "${KEEP_ME}"}  # request per key
    assert env.run_env_variables == {"RUN": "${AGENT_KEY:-none}"}  # references stay references
    assert p.required_env == ["EMBED", "GRADER_KEY", "KEEP_ME"]  # names only; defaults not required


def test_fresh_verifier_startup_vars() -> None:  # contracts V1, V3
    base = {"env_variables": {"PUB": "1"}}
    inherit = plan_one(task("t1", **base), environment=FRESH)
    assert inherit.evaluation_environment.env_variables == {"PUB": "1"}  # None inherits public vars
    replaced = plan_one(task("t1", **base, evaluation_environment_env_variables={"V": "2"}), environment=FRESH)
    assert replaced.evaluation_environment.env_variables == {"V": "2"}  # a mapping replaces them
    nothing = plan_one(task("t1", **base, evaluation_environment_env_variables={}), environment=FRESH)
    assert nothing.evaluation_environment.env_variables == {}  # {} inherits nothing
    over = plan_one(
        task("t1", **base, evaluation_environment_env_variables={"V": "2"}),
        environment={**FRESH, "evaluation_environment_env_variables": {"V": "3", "W": "4"}},
    )
    assert over.evaluation_environment.env_variables == {"V": "3", "W": "4"}  # request per key
    no_override = plan_one(
        task("t1", **base, evaluation_environment_env_variables={"V": "2"}),
        environment={**FRESH, "evaluation_environment_env_variables": {}},
    )
    assert no_override.evaluation_environment.env_variables == {"V": "2"}  # request {} = no override


def test_legacy_harness_env_rejected() -> None:  # contract V4
    req = make_request()
    req = ir.RunRequest(
        model=req.model,
        benchmark=req.benchmark,
        harness=ir.HarnessSpec(id="command", params={"env": {"A": "1"}}),
        environment=req.environment,
    )
    from acx.compiler._planner import plan_request

    with pytest.raises(AcxPlanError, match="run_env_variables"):
        plan_request(
            req,
            base_dir=".",
            capabilities=DOCKER,
            recipes=RecipeRegistry(),
            benchmark=ListBenchmark([task()]),
            harness=FakeHarness(HarnessConfig()),
        )


def test_host_side_harness_gets_no_sandbox_egress() -> None:  # contract P6 (model calls from the host)
    h = ModelHarness(HarnessConfig())
    model = {"id": "m", "base_url": "https://llm.example.com:8443/v1"}
    d = make_plan(harness=h, model=model, environment={"run_network_policy": NO_NET}).plan_attempt_detailed(task(), 1)
    assert d.plan.run_network_policy == ir.NetworkPolicy(network_mode="no-network")
    assert all(c.layer != "planner" for c in d.provenance["run_network_policy"])
    # the model endpoint need not even be known at planning time
    assert plan_one(harness=h, environment={"run_network_policy": NO_NET}).run_network_policy.network_mode == (
        "no-network"
    )


class SandboxModelHarness(ModelHarness):
    id = "command"
    calls_model: ClassVar[bool] = False

    def model_location(self, req: ir.RunRequest) -> str:
        return "sandbox"


def test_in_sandbox_agent_gets_exactly_the_gateway() -> None:  # contract P6 (model gateway)
    h = SandboxModelHarness(HarnessConfig())
    model = {"id": "m", "base_url": "https://llm.example.com:8443/v1"}
    d = make_plan(harness=h, model=model, environment={"run_network_policy": NO_NET}).plan_attempt_detailed(task(), 1)
    assert d.plan.run_network_policy == ir.NetworkPolicy(
        network_mode="allowlist", allowed_hosts=[ir.MODEL_GATEWAY_HOST]
    )
    chain = d.provenance["run_network_policy"]
    assert chain[-1].layer == "planner" and chain[-1].kind == "planner"
    assert chain[-1].source == "model gateway (the agent in the sandbox calls the model through it)"
    allow = {"network_mode": "allowlist", "allowed_hosts": ["pypi.org"]}
    p = plan_one(harness=h, model=model, environment={"run_network_policy": allow})
    assert p.run_network_policy.allowed_hosts == ["pypi.org", ir.MODEL_GATEWAY_HOST]  # never llm.example.com
    assert plan_one(harness=h, model=model).run_network_policy.network_mode == "public"


def test_capability_refuses_network_mode() -> None:  # contract P7
    with pytest.raises(CapabilityError) as e:
        plan_one(
            task("t9"),
            caps=HOST,
            env="host_process",
            environment={"run_network_policy": {"network_mode": "allowlist", "allowed_hosts": ["x"]}},
        )
    text = str(e.value)
    assert "t9" in text and "host_process" in text and "run_network_policy" in text
    assert "--env docker" in text  # the fix
    assert e.value.code == "E0451"


def test_capability_refuses_switch_without_dynamic_policy() -> None:  # contract P7
    caps = DriverCapabilities(network_modes=("public", "no-network"), dynamic_network_policy=False)
    with pytest.raises(CapabilityError, match="cannot switch") as e:
        plan_one(caps=caps, env="host_process", environment={"run_network_policy": NO_NET})
    assert e.value.code == "E0452"
    # one policy from start to end is fine
    p = plan_one(
        caps=caps,
        env="host_process",
        environment={
            "run_network_policy": NO_NET,
            "baseline_network_policy": NO_NET,
            "evaluation_network_policy": NO_NET,
        },
    )
    assert p.run_network_policy.network_mode == "no-network"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"resources": {"cpu": 2}}, "E0453"),
        ({"environment_setup": {"image": "x:1"}}, "E0455"),
        ({"environment_setup": {"os": "windows"}}, "E0454"),
    ],
)
def test_capability_refuses_resources_image_os(fields: dict, code: str) -> None:  # contract P7
    with pytest.raises(CapabilityError) as e:
        plan_one(task("t1", **fields), caps=HOST, env="host_process")
    assert e.value.code == code
    assert "host_process" in str(e.value)


def test_isolated_filesystem_required_names_docker() -> None:  # contract P7
    bench = ListBenchmark([task()], requires_isolated_filesystem=True)
    with pytest.raises(CapabilityError, match="--env docker") as e:
        plan_one(bench=bench, caps=HOST, env="host_process")
    assert "environment docker" in str(e.value)
    assert plan_one(bench=bench).task_id == "t1"  # docker is fine


def test_resources_merge_layers() -> None:
    t = task("t1", resources={"cpu": 1, "memory_mb": 1024}, run_resources={"memory_mb": 2048})
    p = plan_one(t, environment={"resources": {"cpu": 4}})
    assert p.environment.resources == ir.ResourceRequirements(cpu=4, memory_mb=2048)


def test_enabled_recipe_unknown_id() -> None:  # contract RC2
    with pytest.raises(AcxPlanError, match="unknown recipe") as e:
        make_plan(recipes=RecipeRegistry([_WorkdirRecipe()]), execution={"enabled_recipes": ["workdir_defualt"]})
    assert "workdir_default" in str(e.value)  # did you mean


def test_harness_none_pairs_only_with_harness_free_benchmarks() -> None:  # contract P4 (step 5)
    with pytest.raises(AcxPlanError, match="selects a harness-free benchmark") as e:
        make_plan(harness_id="none")
    assert e.value.code == "E0428"
    with pytest.raises(AcxPlanError, match="must be paired with harness `none`"):
        make_plan(bench=ListBenchmark([task()], harness_free=True))
    p = plan_one(bench=ListBenchmark([task()], harness_free=True), harness_id="none")
    assert p.harness_plan == ir.HarnessPlan()  # a bare HarnessPlan for harness-free benchmarks


class _RelativeWorkdir(BaseRecipe):
    id = "relative_workdir"

    def apply(self, plan: ir.ExecutionPlan, req: ir.RunRequest, task: ir.TaskSpec) -> ir.ExecutionPlan:
        from msgspec.structs import replace

        setup = replace(plan.environment.setup, workdir="app")
        return replace(plan, environment=replace(plan.environment, setup=setup))


@pytest.mark.parametrize(
    ("kw", "path"),
    [
        ({"environment": {"setup": {"workdir": "app"}}}, "environment.setup.workdir"),
        (
            {"environment": {"evaluation_environment_mode": "fresh", "evaluation_setup": {"workdir": "C:\\w"}}},
            "environment.evaluation_setup.workdir",
        ),
        ({"recipes": RecipeRegistry([_RelativeWorkdir()])}, "environment.setup.workdir"),
    ],
)
def test_workdir_must_be_absolute_posix_whoever_sets_it(kw: dict, path: str) -> None:  # contract H5
    with pytest.raises(AcxPlanError, match="absolute POSIX path") as e:
        plan_one(**kw)
    assert e.value.code == "E0429" and e.value.path == path


def test_unknown_components_suggest_a_name(tmp_path) -> None:  # contract P8-style clear errors
    from acx.compiler._planner import plan_request

    for kind, kw in (
        ("benchmark", {"benchmark": "exact_mach"}),
        ("harness", {"benchmark": "harbor", "bench_params": {"path": "."}, "harness": "orcle"}),
    ):
        with pytest.raises(AcxPlanError, match=f"unknown {kind}") as e:
            plan_request(make_request(**kw), base_dir=str(tmp_path), capabilities=DOCKER)
        assert e.value.code == "E0300" and "did you mean" in (e.value.help or "")
