"""Registries per extension point: built-ins, entry-point plugins and `module:Class` ids.

A plugin here is real: a module on ``sys.path`` plus a ``*.dist-info`` directory with an
``entry_points.txt``, found by ``importlib.metadata`` exactly like an installed distribution.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from acx.cli import main
from acx.components import BENCHMARKS, HARNESSES, SCORERS, registry
from acx.drivers import DRIVERS, DriverCapabilities, DriverInfo, default_provider_limits, probe_capabilities
from acx.registry import ComponentInfo, ComponentLookupError, Registry

PLUGIN_MODULE = '''
import msgspec
from typing import Annotated
from acx.components import BaseHarness, HarnessConfig
from acx.drivers import DriverCapabilities, EnvironmentConfig
from acx.drivers.fake import FakeDriver
from acx.components.scorers import BaseScorer, ScorerConfig


class ShoutScorer(BaseScorer):
    """Scores shouted answers (a test plugin)."""

    config_class = ScorerConfig


class EchoConfig(HarnessConfig, frozen=True, kw_only=True):
    """Params of the echo harness."""

    greeting: Annotated[str, msgspec.Meta(description="what to say first")] = "hello"


class EchoHarness(BaseHarness):
    """Echoes the prompt (a test plugin)."""

    config_class = EchoConfig


class NotAHarness:
    config_class = EchoConfig


class PlugEnvConfig(EnvironmentConfig, frozen=True):
    """Params of the plugin driver."""

    speed: Annotated[int, msgspec.Meta(description="how fast")] = 1


class PlugDriver(FakeDriver):
    """An in-memory plugin driver."""

    id = "plug_env"
    config_class = PlugEnvConfig
    default_concurrency = 7

    def __init__(self, config=None):
        super().__init__()
        self.config = config if config is not None else PlugEnvConfig()

    @classmethod
    def probe(cls):
        return DriverCapabilities(network_modes=("public",), task_env=True)
'''


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed-looking distribution `acxtestplug` with harness and driver entry points."""
    (tmp_path / "acxtestplug.py").write_text(textwrap.dedent(PLUGIN_MODULE), encoding="utf-8")
    dist = tmp_path / "acxtestplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acxtestplug\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(
        "[acx.harnesses]\necho = acxtestplug:EchoHarness\nbroken = acxtestplug:NotAHarness\n"
        "[acx.drivers]\nplug_env = acxtestplug:PlugDriver\n"
        "[acx.scorers]\nshout = acxtestplug:ShoutScorer\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for reg in (HARNESSES, DRIVERS, BENCHMARKS, SCORERS):
        reg.reset_plugins()
    yield tmp_path
    sys.modules.pop("acxtestplug", None)
    for reg in (HARNESSES, DRIVERS, BENCHMARKS, SCORERS):
        reg.reset_plugins()


def test_builtins_are_registered_in_their_own_package() -> None:  # contract B2
    # Derived from the registries (issue 29): adding a built-in changes no line here.
    packages = ((BENCHMARKS, "acx.components."), (HARNESSES, "acx.components."), (DRIVERS, "acx.drivers."))
    for reg, package in packages:
        assert list(reg._builtins) == list(reg)[: len(reg._builtins)], "built-ins come first, in order"
        for cid, info in reg._builtins.items():
            assert str(info.impl).startswith(package) and str(info.config).startswith(package), cid
            assert info.load().__name__ and info.config_class.__name__, cid
    assert {"exact_match", "harbor"} <= set(BENCHMARKS) and {"none", "command"} <= set(HARNESSES)
    assert registry("env") is DRIVERS and registry("scorer") is SCORERS
    assert BENCHMARKS["harbor"].config_class.__name__ == "HarborConfig"


def test_register_refuses_duplicates_and_colon_ids() -> None:
    reg = Registry("thing", group="acx.test-things", base="acx.components._base:BaseHarness")
    info = ComponentInfo("thing", "a", "A.", "acx.components._configs:HarnessConfig", "acx.components:BaseHarness")
    reg.register(info)
    with pytest.raises(ValueError, match="already registered"):
        reg.register(info)
    with pytest.raises(ValueError, match="contain no ':'"):
        reg.register(ComponentInfo("thing", "m:C", "A.", "x:y", "x:y"))
    assert list(reg) == ["a"] and reg["a"].config_class.__name__ == "HarnessConfig"


def test_driver_entries_carry_probe_and_default_limits() -> None:  # contract P7
    info = DRIVERS["docker"]
    assert isinstance(info, DriverInfo)
    assert "allowlist" in info.capabilities().network_modes
    assert probe_capabilities("docker") is info.capabilities()  # probed once per process
    builtins = DRIVERS._builtins.values()
    assert default_provider_limits() == {i.id: i.default_concurrency for i in builtins}  # type: ignore[attr-defined]
    assert default_provider_limits()["docker"] == 128
    with pytest.raises(KeyError):
        probe_capabilities("no_such_driver")


def test_module_class_ids_resolve_and_explain_failures(plugin: Path) -> None:
    info = HARNESSES["acxtestplug:EchoHarness"]
    assert info.origin == "module:Class" and info.description == "Echoes the prompt (a test plugin)."
    assert info.config_class.__name__ == "EchoConfig"
    reasons = {
        "nosuchmod_xyz:Thing": "cannot import module `nosuchmod_xyz`",
        "acxtestplug:Missing": "has no attribute `Missing`",
        # QA: the public name the docs use, not the private defining module
        "acxtestplug:NotAHarness": "is not a harness class (it must subclass acx.components.BaseHarness)",
    }
    for cid, reason in reasons.items():
        assert cid not in HARNESSES
        with pytest.raises(ComponentLookupError) as exc:
            HARNESSES[cid]
        assert reason in exc.value.reason
    with pytest.raises(ComponentLookupError) as exc:
        DRIVERS["json:JSONDecoder"]
    assert "is not an environment class (it must subclass acx.drivers.Driver)" in exc.value.reason


def test_entry_point_plugins_are_listed_and_broken_ones_reported(plugin: Path, capsys) -> None:
    assert "echo" in HARNESSES and HARNESSES["echo"].origin == "plugin acxtestplug"
    assert SCORERS["shout"].description == "Scores shouted answers (a test plugin)."
    assert "broken" not in HARNESSES
    assert "must subclass" in HARNESSES.broken_plugins()["broken"]
    assert main(["list", "harness"]) == 0
    out, err = capsys.readouterr()
    assert "echo" in out and "[plugin acxtestplug]" in out
    assert "warning: entry point `broken = acxtestplug:NotAHarness`" in err
    assert main(["config", "docs", "harness", "echo", "--format", "json"]) == 0
    fields = [row["field"] for row in json.loads(capsys.readouterr().out)["fields"]]
    assert "greeting" in fields


def test_plugin_driver_is_a_first_class_provider(plugin: Path, project: Path, write, capsys) -> None:  # contract R12
    info = DRIVERS["plug_env"]
    assert isinstance(info, DriverInfo) and info.default_concurrency == 7
    assert probe_capabilities("plug_env") == DriverCapabilities(network_modes=("public",), task_env=True)
    assert main(["list", "env"]) == 0
    assert "plug_env" in capsys.readouterr().out
    write(
        "o.yaml",
        """
        version: 1
        runtime: {provider_limits: {plug_env: 3}}
        requests:
          - name: a
            benchmark: {id: harbor, path: t}
            harness: {id: oracle}
            environment: {id: plug_env, speed: nope}
        """,
    )
    assert main(["validate", "o.yaml"]) == 2
    err = capsys.readouterr().err
    assert "o.yaml:7:40: error[E0204]" in err and "speed" in err


def test_a_plan_on_a_plugin_driver_gets_its_default_limit(plugin: Path, project: Path, write) -> None:  # P8
    # The plugin loaded after other tests computed defaults: the plan still sees its entry.
    from acx.compiler import compile_orchestration

    write(
        "o.yaml",
        """
        version: 1
        requests:
          - name: a
            benchmark: {id: harbor, path: t}
            harness: {id: oracle}
            environment: {id: plug_env}
        """,
    )
    runtime = compile_orchestration("o.yaml", environ={}).orchestration.runtime
    assert runtime.provider_limits == {"plug_env": 7}  # only the provider the plan uses


def test_unknown_module_class_id_in_a_spec_is_located(project: Path, write, capsys) -> None:  # contract R12
    write(
        "o.yaml",
        "version: 1\nrequests: [{name: a, benchmark: {id: harbor, path: t}, harness: {id: 'nomod_q:Agent'}}]\n",
    )
    assert main(["validate", "o.yaml"]) == 2
    err = capsys.readouterr().err
    assert "error[E0301]" in err and "cannot import module `nomod_q`" in err and "o.yaml:2:" in err
