"""A compiled plan lists the provider limits of the providers its requests use, not of every
registered driver: no noise in plan.json / explain, and no dependency of the plan (or its content
hash) on the installed driver plugins (contracts P8, R3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import acx.drivers
from acx.cli import main

SPEC = """
version: 1
requests:
  - name: qa
    benchmark: {id: exact_match, dataset: qa.jsonl}
    harness: {id: command, command: "cat"}
    environment: {id: host_process}
"""


@pytest.fixture()
def spec(write) -> Path:
    write("qa.jsonl", '{"id": "q1", "question": "1+1?", "answer": "2"}\n')
    return write("orch.yaml", SPEC)


def _compile(spec: Path, out: str, *extra: str) -> dict:
    assert main(["compile", str(spec), "-o", out, *extra]) == 0
    return json.loads(Path(out).read_text(encoding="utf-8"))


def test_plan_lists_only_the_used_providers(spec: Path, capsys) -> None:  # contract P8
    plan = _compile(spec, "plan.json")
    runtime = plan["orchestration"]["runtime"]
    assert runtime["provider_limits"] == {"host_process": 128}
    assert runtime["env_open_qps"] == {"host_process": 0.0}
    assert main(["compile", str(spec), "--full"]) == 0
    out = capsys.readouterr().out
    assert "runtime.provider_limits.host_process = 128" in out
    assert "provider_limits.docker" not in out and "env_open_qps.bwrap" not in out


def test_installed_drivers_do_not_change_the_plan(spec: Path, monkeypatch) -> None:  # contract P8
    before = Path("a.json")
    _compile(spec, str(before))
    # A driver plugin installed since: its defaults join the registry's, not this plan.
    limits, qps = acx.drivers.default_provider_limits(), acx.drivers.default_env_open_qps()
    monkeypatch.setattr(acx.drivers, "default_provider_limits", lambda: {**limits, "plug_env": 7})
    monkeypatch.setattr(acx.drivers, "default_env_open_qps", lambda: {**qps, "plug_env": 2.0})
    after = Path("b.json")
    _compile(spec, str(after))
    assert before.read_bytes() == after.read_bytes()  # same plan, same content hash


def test_an_explicit_limit_stays_and_a_used_default_applies(spec: Path, write, capsys) -> None:  # contract R3
    write("layer.yaml", "runtime: {provider_limits: {docker: 4}, env_open_qps: {host_process: 5}}\n")
    plan = _compile(spec, "plan.json", "--config", "layer.yaml")
    runtime = plan["orchestration"]["runtime"]
    # docker is not used, but the user set it: kept (explain shows where it came from).
    assert runtime["provider_limits"] == {"host_process": 128, "docker": 4}
    assert runtime["env_open_qps"] == {"host_process": 5.0}
    # --env switches the provider: its defaults, not the spec's provider's (the dry run: no probe).
    capsys.readouterr()
    assert main(["compile", str(spec), "--env", "docker", "--format", "json"]) == 0
    switched = json.loads(capsys.readouterr().out)["runtime"]
    assert switched["provider_limits"] == {"docker": 128} and switched["env_open_qps"] == {"docker": 0.0}
