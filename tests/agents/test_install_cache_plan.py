"""The install cache in plans, without an engine (issue 23 item 4; contract P7): the key is in the
plan and ``acx compile --plans`` says where the agent is installed; ``acx explain`` names the key's
source; the key follows exactly what the install runs and sees; a driver that cannot cache
(host_process, bwrap) installs in every attempt and says so, and refuses ``install_cache = true``
(E0459, exit 2, at the field). The docker end-to-end tests are tests/docker/test_install_cache.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.cli import main
from acx.components._configs import InstalledAgentConfig
from acx.components.harnesses.installed_agent import InstalledAgentHarness
from acx.testing.fake_models import FakeModelServer, text


def _spec(write, harness: dict, env: str = "docker") -> Path:
    Path("data.jsonl").write_text(json.dumps({"id": "q0", "question": "say 0", "answer": "0"}) + "\n")
    setup = ', setup: {image: "acx-test/bookworm:latest"}' if env == "docker" else ""
    return write(
        "run.yaml",
        f"""
        version: 1
        name: ic
        runtime: {{results_dir: results, progress: none}}
        requests:
          - name: ic
            benchmark: {{id: exact_match, dataset: data.jsonl}}
            harness: {json.dumps(harness)}
            model: {{id: m, base_url: "http://127.0.0.1:9/v1"}}
            environment: {{id: {env}{setup}}}
        """,
    )


def _install_line(capsys) -> str:
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("install ")]
    assert len(lines) == 1, out
    return lines[0]


HARNESS = {"id": "installed_agent", "install": "pip install agent", "command": "agent"}


def test_docker_plan_shows_the_key_and_explain_its_source(project, write, capsys) -> None:  # P7, R10
    _spec(write, HARNESS)
    assert main(["compile", "--plans", "run.yaml"]) == 0
    line = _install_line(capsys)
    assert line.startswith("install      once per base image (install cache, key sha256:"), line
    assert main(["explain", "run.yaml", "ic", "install_cache_key", "--task", "q0"]) == 0
    out = capsys.readouterr().out
    assert "installed_agent harness (install, upload, agent_dir, definition env)" in out, out


def test_install_cache_false_installs_in_every_attempt(project, write, capsys) -> None:
    _spec(write, {**HARNESS, "install_cache": False})
    assert main(["compile", "--plans", "run.yaml"]) == 0
    assert _install_line(capsys) == "install      in every attempt (install_cache = false)"


@pytest.mark.parametrize("env", ["host_process", "bwrap"])
def test_a_driver_without_the_cache_says_so(project, write, capsys, env) -> None:  # P7: never silent
    _spec(write, HARNESS, env)
    assert main(["compile", "--plans", "run.yaml"]) == 0
    assert _install_line(capsys) == f"install      in every attempt (driver {env} cannot cache installs)"


@pytest.mark.parametrize("env", ["host_process", "bwrap"])
def test_install_cache_true_is_refused_where_it_cannot_be_honoured(project, write, capsys, env) -> None:  # P7
    _spec(write, {**HARNESS, "install_cache": True}, env)
    assert main(["compile", "--plans", "run.yaml"]) == 2
    err = capsys.readouterr().err
    assert "harness.params.install_cache: error[E0459]" in err, err
    assert f"driver '{env}' cannot cache an installed agent" in err and "Traceback" not in err


def _key(**fields: object) -> str | None:
    harness = InstalledAgentHarness(InstalledAgentConfig(**{"command": "agent", **fields}))  # type: ignore[arg-type]
    return harness._install_key()


def test_the_key_follows_what_the_install_runs() -> None:
    base = _key(install="pip install a")
    assert base == _key(install="pip install a", command="other", logs=["/x"])  # the run side: same
    assert base != _key(install="pip install b")
    assert base != _key(install=["pip", "install", "a"])
    assert base != _key(install="pip install a", agent_dir="/elsewhere")
    assert base != _key(install="pip install a", upload=["wheels"])
    # A shipped definition's fixed variables are seen by its install.
    assert _key(agent="codex", install="x") != _key(agent="claude-code", install="x")


@settings(max_examples=50, deadline=None)
@given(a=st.text(min_size=1, max_size=30), b=st.text(min_size=1, max_size=30))
def test_equal_keys_iff_equal_installs(a: str, b: str) -> None:
    assert (_key(install=a) == _key(install=b)) == (a == b)


def test_the_content_key_follows_the_uploads(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a.whl").write_bytes(b"one")
    harness = InstalledAgentHarness(InstalledAgentConfig(command="agent", upload=["wheels"]))
    harness.spec_dir = str(tmp_path)
    first = harness.install_content_key()
    assert first and first == harness.install_content_key()
    (tmp_path / "wheels" / "a.whl").write_bytes(b"two")
    second = harness.install_content_key()
    os.chmod(tmp_path / "wheels" / "a.whl", 0o755)
    third = harness.install_content_key()
    (tmp_path / "wheels" / "b.whl").write_bytes(b"")
    fourth = harness.install_content_key()
    assert len({first, second, third, fourth}) == 4
    assert InstalledAgentHarness(InstalledAgentConfig(command="agent")).install_content_key() == ""


def test_host_process_installs_in_the_attempt_and_says_uncached(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "say 0", "answer": "0"}) + "\n")
    agent_dir = tmp_path / "agent-dir"
    harness = {
        "id": "installed_agent",
        "agent_dir": str(agent_dir),
        "install": 'echo "$ACX_TASK_ID" >> installs',
        "command": "python3 -c 'print(0)'",
    }
    with FakeModelServer([text("0")]) as srv:
        (tmp_path / "run.yaml").write_text(
            f"""version: 1
name: h
runtime: {{results_dir: results, progress: none}}
requests:
  - name: h
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {{id: m, base_url: "{srv.base_url}"}}
    environment: {{id: host_process}}
    execution: {{attempts: {{k: 2}}}}
"""
        )
        assert main(["run", "run.yaml"]) == 0
    capsys.readouterr()
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "results").rglob("attempt-*/result.json"))]
    assert len(results) == 2
    assert all(r["telemetry"]["install_cached"] is False and r["telemetry"]["install_seconds"] >= 0 for r in results)
    assert (agent_dir / "installs").read_text() == "q0\nq0\n"  # each attempt installed, with its task id
