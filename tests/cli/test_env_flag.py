"""`--env ID` switches every request's environment provider (compile, explain, run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acx.cli import main
from acx.compiler import compile_orchestration

SPEC = """version: 1
name: envflag
requests:
  - name: qa
    benchmark: {id: exact_match, dataset: data.jsonl}
    harness: {id: command, command: ["true"]}
    environment: {id: host_process, evaluation_environment_mode: none, keep_workdir: true}
"""


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    (tmp_path / "data.jsonl").write_text('{"id": "a", "question": "q", "answer": "1"}\n')
    path = tmp_path / "orch.yaml"
    path.write_text(SPEC)
    return path


def test_env_flag_replaces_provider_and_keeps_shared_fields(spec: Path) -> None:  # contract R8, R12
    compiled = compile_orchestration(str(spec), environment="docker")
    env = compiled.orchestration.requests[0].request.environment
    assert env.id == "docker"
    assert env.evaluation_environment_mode == "none"  # shared field still applies
    assert "keep_workdir" not in env.params  # host_process param dropped
    chain = compiled.provenance["qa"]["environment.id"]
    assert chain[-1].layer == "--env" and chain[-1].value == "docker"
    assert [w.code for w in compiled.warnings] == ["W0303"]


def test_env_flag_unknown_id_is_a_clear_error(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(spec), "--env", "dockr"]) == 2
    err = capsys.readouterr().err
    assert "unknown environment id `dockr`" in err and "did you mean `docker`" in err


def test_explain_shows_env_flag(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(spec), "qa", "environment.id", "--env", "docker", "--format", "json"]) == 0
    assert "--env" in json.dumps(json.loads(capsys.readouterr().out))


def test_run_refuses_env_with_compiled_program(spec: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    assert main(["compile", str(spec), "-o", str(plan)]) == 0
    assert main(["run", str(plan), "--env", "docker"]) == 2


def test_run_prints_compile_warnings(spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(spec), "--env", "docker", "--results-dir", str(tmp_path / "r"), "--progress", "none"])
    err = capsys.readouterr().err
    assert "W0303" in err  # the warning reaches the user before anything runs
    assert code in (0, 1, 2)
