"""The agent phase of a Harbor task keeps the environment baseline (issue 22 item 1).

Harbor (``trial/network_policy.py``, ``resolve_agent_phase_policy``): the explicit ``[agent]``
policy, else the environment's baseline. AgentCompass 1.0.1: ``run_policy = agent policy if given
else baseline``. ``public`` is only the planner's last default (P4 step 7).
"""

from __future__ import annotations

import pytest
from tests.planner._helpers import ListBenchmark, make_plan, plan_one, task

import acx.ir as ir
from acx.components._configs import HarborConfig
from acx.components.benchmarks.harbor import HarborBenchmark
from acx.components.harbor_task import load_harbor_task

NO_NET = ir.NetworkPolicy(network_mode="no-network")
PUBLIC = ir.NetworkPolicy(network_mode="public")


def _harbor(path) -> HarborBenchmark:
    return HarborBenchmark(HarborConfig(path=str(path)))


def _plan(path, **req_kw) -> ir.ExecutionPlan:
    t = load_harbor_task(path)
    return plan_one(t, bench=_harbor(path), **req_kw)


@pytest.mark.parametrize(
    "env_toml",
    ['network_mode = "no-network"', "allow_internet = false", 'network_mode = "allowlist"\nallowed_hosts = []'],
)
def test_agent_phase_keeps_a_no_network_baseline(harbor_task, env_toml: str) -> None:  # contract P6
    plan = _plan(harbor_task("offline", f"[environment]\n{env_toml}\n"))
    assert plan.environment.baseline_network_policy == NO_NET
    assert plan.run_network_policy == NO_NET  # was `public` before issue 22


def test_agent_phase_keeps_an_allowlist_baseline(harbor_task) -> None:  # contract P6
    plan = _plan(harbor_task("pypi", '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'))
    assert plan.run_network_policy == ir.NetworkPolicy(network_mode="allowlist", allowed_hosts=["pypi.org"])


def test_explicit_agent_policy_wins(harbor_task) -> None:  # contract P6
    toml = '[environment]\nnetwork_mode = "no-network"\n[agent]\nnetwork_mode = "public"\n'
    plan = _plan(harbor_task("agent-public", toml))
    assert plan.environment.baseline_network_policy == NO_NET
    assert plan.run_network_policy == PUBLIC


def test_undeclared_network_stays_public(harbor_task) -> None:  # contract P4 step 7
    plan = _plan(harbor_task("plain", ""))
    assert plan.environment.baseline_network_policy == PUBLIC
    assert plan.run_network_policy == PUBLIC


def test_request_baseline_is_the_baseline_the_agent_keeps(harbor_task) -> None:  # contract P6
    path = harbor_task("plain", "")
    plan = _plan(path, environment={"baseline_network_policy": {"network_mode": "no-network"}})
    assert plan.run_network_policy == NO_NET
    explicit = _plan(
        path,
        environment={
            "baseline_network_policy": {"network_mode": "no-network"},
            "run_network_policy": {"network_mode": "public"},
        },
    )
    assert explicit.run_network_policy == PUBLIC  # an explicit request value always wins


def test_provenance_names_the_benchmark(harbor_task) -> None:  # contract P9
    path = harbor_task("offline", '[environment]\nnetwork_mode = "no-network"\n')
    t = load_harbor_task(path)
    planned = make_plan(t, bench=_harbor(path)).plan_attempt_detailed(t, 1)
    chain = planned.provenance["run_network_policy"]
    assert any("keeps the environment baseline" in str(step) for step in chain), chain


def test_other_benchmarks_keep_the_public_default() -> None:  # contract P4 step 7
    t = task("t1", baseline_network_policy={"network_mode": "no-network"})
    plan = plan_one(t, bench=ListBenchmark([t]))
    assert plan.run_network_policy == PUBLIC
