"""Issue 29: a driver written from the docs/plugins.md skeleton passes the conformance suite, and
registering it adds only its own fields to the JSON Schemas.  # contract E1 E2 H5 T3 V2"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acx.testing import driver_conformance as dc

sys.path.insert(0, str(Path(__file__).parent))

from toy_driver import ToyConfig, ToyDriver


@pytest.mark.parametrize("check", dc.CHECKS, ids=dc.check_id)
def test_toy_driver_conformance(check: dc.Check, tmp_path: Path) -> None:
    # contract E1, E2, H5, T3, V2
    root = tmp_path / "sessions"
    root.mkdir()
    dc.run_check(check, lambda: ToyDriver(ToyConfig(root=str(root))), scratch=tmp_path)
    assert list(root.iterdir()) == [], "close() removes the session directory"


def test_registering_the_toy_driver_adds_only_its_own_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: the common environment fields are one shared definition each driver references
    (`environment.common`), so a new driver's schema entry is its own fields."""
    import jsonschema

    from acx.drivers import DRIVERS, DriverInfo
    from acx.schemas import generate_schemas

    before = generate_schemas()
    entry = DriverInfo("environment", "toy", "Toy.", "toy_driver:ToyConfig", "toy_driver:ToyDriver")
    monkeypatch.setitem(DRIVERS._builtins, "toy", entry)
    after = generate_schemas()
    for name in before:
        old, new = before[name]["$defs"], after[name]["$defs"]
        assert set(new) - set(old) == {"environment.toy"}
        assert set(new["environment.toy"]["properties"]) == set(ToyConfig.__struct_fields__) == {"root"}
        assert new["environment.toy"]["allOf"] == [{"$ref": "#/$defs/environment.common"}]
        changed = {k for k in old if old[k] != new[k]}
        assert changed <= {"EnvironmentSection", "ConfigRuntimeOptions", "ResolvedRuntimeOptions"}, changed
        assert "setup" in new["environment.common"]["properties"]
    orch = jsonschema.Draft202012Validator(after["orchestration"])
    doc = {"version": 1, "requests": [{"name": "r", "environment": {"id": "toy", "root": "/tmp"}}]}
    assert orch.is_valid(doc)
    doc["requests"][0]["environment"]["setup"] = {"workdir": "/w"}  # a common field, by reference
    assert orch.is_valid(doc)
    doc["requests"][0]["environment"]["rooot"] = "/tmp"
    assert not orch.is_valid(doc)
    config = jsonschema.Draft202012Validator(after["run_config"])
    assert config.is_valid({"environments": {"toy": {"root": "/x", "setup": {"workdir": "/w"}}}})
    assert not config.is_valid({"environments": {"toy": {"id": "toy"}}})


def _doc_block(heading: str) -> str:
    """The first ```python block after ``heading`` in docs/plugins.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text(encoding="utf-8")
    after = text.split(heading, 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_harness_skeleton_runs_on_the_toy_driver(tmp_path: Path) -> None:
    """The harness skeleton in docs/plugins.md is complete: it runs an agent command in a session
    and turns a non-zero exit into the documented issue (contract H5)."""
    import trio

    from acx.components import BaseHarness, HarnessContext
    from acx.drivers import OpenRequest
    from acx.ir import (
        BenchmarkSpec,
        EnvironmentSpec,
        ExecutionPlan,
        HarnessSpec,
        ModelSpec,
        PreparedTask,
        RunRequest,
        TaskInput,
    )

    namespace: dict[str, object] = {}
    exec(compile(_doc_block("### A harness"), "docs/plugins.md", "exec"), namespace)
    agent_cls, config_cls = namespace["MyAgent"], namespace["MyAgentConfig"]
    assert isinstance(agent_cls, type) and issubclass(agent_cls, BaseHarness)
    req = RunRequest(
        model=ModelSpec(id="m"),
        benchmark=BenchmarkSpec(id="exact_match"),
        harness=HarnessSpec(id="mine"),
        environment=EnvironmentSpec(id="toy"),
    )
    plan = ExecutionPlan(task_id="t", attempt=1, environment=EnvironmentSpec(id="toy"), run_timeout_seconds=30)
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="hello agent"))

    async def main() -> list[object]:
        driver = ToyDriver(ToyConfig(root=str(tmp_path)))
        async with await driver.open(OpenRequest(session_id="harness-skeleton")) as session:
            results = []
            for command in ("tr a-z A-Z", "cat; exit 3"):
                harness = agent_cls(config_cls(command=command))  # type: ignore[operator]
                ctx = HarnessContext.for_test(session, prepared, req, plan, budget=30)
                results.append(await harness.execute_task(ctx))
            return results

    ok, failed = trio.run(main)
    assert ok.final_answer == "HELLO AGENT" and ok.issues == []  # type: ignore[attr-defined]
    assert failed.final_answer == "hello agent"  # type: ignore[attr-defined]
    assert [i.code for i in failed.issues] == ["agent_exit_nonzero"]  # type: ignore[attr-defined]
