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
