"""Planning warnings reach every caller of ``plan_attempt`` (contracts A1, H6, P7).

``acx run`` calls ``RequestPlan.plan_attempt(task, n)`` and nothing else; warnings must not need
another call: they are logged to ``acx.planner`` (stderr before the run, run.log during it)
unless the caller installs ``on_warning``, and are kept in ``RequestPlan.warnings``.
"""

from __future__ import annotations

import logging

import pytest

import acx.ir as ir
from acx.compiler._planner import PlanWarning
from acx.drivers import probe_capabilities
from acx.drivers._specs import DriverCapabilities

from ._helpers import DOCKER, make_plan, task

CONFLICT = task(
    "t1",
    artifacts=[{"source": "/app/a", "destination": "out"}, {"source": "/app/b", "destination": "out"}],
)


def test_plan_attempt_surfaces_warnings_without_changing_its_call() -> None:  # contract A1
    rp = make_plan(CONFLICT)
    seen: list[PlanWarning] = []
    rp.on_warning = seen.append
    sink: list[str] = []
    plan = rp.plan_attempt(CONFLICT, 1, warnings=sink)
    assert [a.source for a in plan.artifacts] == ["/logs/artifacts", "/app/a"]  # first wins
    assert len(sink) == 1 and "first declaration wins" in sink[0]
    assert seen == [PlanWarning("t1", 1, sink[0])]
    # planned again (preflight, then the run): reported once per task × attempt
    rp.plan_attempt(CONFLICT, 1)
    rp.plan_attempt(CONFLICT, 2)
    assert [(w.task_id, w.attempt) for w in rp.warnings] == [("t1", 1), ("t1", 2)]
    assert len(seen) == 2


def test_warnings_are_logged_when_nobody_listens(caplog: pytest.LogCaptureFixture) -> None:  # contract A1
    rp = make_plan(CONFLICT)
    with caplog.at_level(logging.WARNING, logger="acx.planner"):
        rp.plan_attempt(CONFLICT, 1)
        rp.plan_attempt(CONFLICT, 1)
    messages = [r.getMessage() for r in caplog.records if r.name == "acx.planner"]
    assert len(messages) == 1
    assert messages[0].startswith("acx: warning: request 'req': task 't1': artifact '/app/b'")


def test_load_warnings_reported_once_for_planned_tasks_only() -> None:  # contract H6
    noisy = task("noisy", load_warnings=["task.toml:3: per-task agent user `agent.user` is not mapped; ignored"])
    quiet = task("quiet")
    from ._helpers import ListBenchmark

    rp = make_plan(bench=ListBenchmark([noisy, quiet]))
    seen: list[PlanWarning] = []
    rp.on_warning = seen.append
    rp.plan_attempt(quiet, 1)
    assert seen == []  # the noisy task was not planned (not selected): nothing printed
    rp.plan_attempt(noisy, 1)
    rp.plan_attempt(noisy, 2)
    assert seen == [PlanWarning("noisy", None, noisy.load_warnings[0])]


def test_unenforceable_storage_is_dropped_with_a_warning() -> None:  # contract P7
    no_storage = DriverCapabilities(**{**_caps(DOCKER), "resources": ("cpu", "memory_mb")})
    t = task("t1", resources={"cpu": 2, "storage_mb": 10240})
    sink: list[str] = []
    plan = make_plan(t, caps=no_storage).plan_attempt(t, 1, warnings=sink)
    assert plan.environment.resources == ir.ResourceRequirements(cpu=2)
    assert sink == [
        "task 't1': driver 'docker' cannot limit disk size; environment.resources.storage_mb = 10240 is ignored"
    ]
    only = task("t2", resources={"storage_mb": 512})
    assert make_plan(only, caps=no_storage).plan_attempt(only, 1).environment.resources is None
    # the real docker driver passes storage_mb to the engine (issue 11.17): kept in the plan, and
    # dropped only by the driver at open time when the engine refuses it (tests/docker/test_storage.py)
    assert "storage_mb" in probe_capabilities("docker").resources
    kept = make_plan(only, caps=probe_capabilities("docker")).plan_attempt(only, 1, warnings=sink)
    assert kept.environment.resources == ir.ResourceRequirements(storage_mb=512)


def test_zero_gpus_is_no_gpu_request() -> None:  # contract P7
    no_gpu = DriverCapabilities(**{**_caps(DOCKER), "resources": ("cpu", "memory_mb")})
    t = task("t1", resources={"cpu": 1, "gpu": 0})
    assert make_plan(t, caps=no_gpu).plan_attempt(t, 1).environment.resources == ir.ResourceRequirements(cpu=1, gpu=0)
    from acx.errors import CapabilityError

    one = task("t2", resources={"gpu": 1})
    with pytest.raises(CapabilityError, match="gpu"):
        make_plan(one, caps=no_gpu).plan_attempt(one, 1)


def _caps(c: DriverCapabilities) -> dict[str, object]:
    return {f: getattr(c, f) for f in c.__struct_fields__}
