"""The real mini-swe-agent (PyPI) and Claude Code (npm) through a whole ``acx run`` on
``host_process`` with the ``installed_agent`` harness and their shipped definitions, against acx's
scripted fake model server (through the run's gateway): the QA answer is the agent's submission /
final result, not its console output (issue 23 item 2). Each package is installed once per session
into a temporary venv / npm prefix; without the registries the tests skip, saying so.

The definitions' log directory (/logs/agent, a sandbox path) becomes a temporary directory here:
on host_process it would be the host's own /logs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acx.cli import main
from acx.components.harnesses._agents import AGENTS, LOG_DIR
from acx.testing.fake_models import FakeModelServer, error, text, tool_call

pytestmark = pytest.mark.slow

MINI_VERSION = "mini-swe-agent==2.4.6"
CLAUDE_VERSION = "@anthropic-ai/claude-code@2.1.197"


@pytest.fixture(scope="session")
def mini_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("mini-venv")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", MINI_VERSION],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"!!! could not install {MINI_VERSION} from PyPI: {exc} !!!")
    return venv / "bin"


@pytest.fixture(scope="session")
def claude_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("!!! no node/npm: the real Claude Code CLI cannot run !!!")
    prefix = tmp_path_factory.mktemp("claude-npm")
    try:
        subprocess.run(
            [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix), CLAUDE_VERSION],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"!!! could not install {CLAUDE_VERSION} from npm: {exc} !!!")
    return prefix / "node_modules" / ".bin"


def _moved(value: Any, logs: Path) -> Any:
    """The definition's value with /logs/agent moved to ``logs``."""
    return json.loads(json.dumps(value).replace(LOG_DIR, str(logs)))


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, agent: str, bin_dir: Path, **extra: Any) -> dict:
    logs = tmp_path / "agent-logs"
    d = AGENTS[agent]
    harness = {
        "id": "installed_agent",
        "agent": agent,  # its env and aliases as shipped
        "install": "true",  # installed by the fixture
        "agent_dir": str(tmp_path / "agent-dir"),
        "command": _moved(d.command, logs),
        "logs": _moved(d.logs, logs),
        "answer": _moved(msgspec.to_builtins(d.answer), logs),
        **extra,
    }
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "What is 2+2?", "answer": "4"}) + "\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(home)}
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: real
runtime: {{results_dir: results, progress: none}}
requests:
  - name: real
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {{id: m, base_url: "{srv.base_url}", api_protocol: {d.protocol}}}
    environment: {{id: host_process, run_env_variables: {json.dumps(env)}}}
    execution: {{run_timeout_seconds: 180}}
"""
    )
    monkeypatch.chdir(tmp_path)
    main(["run", str(spec)])
    return json.loads(next((tmp_path / "results").rglob("attempt-1/result.json")).read_text())


def test_mini_swe_agent_answer_is_its_submission(tmp_path: Path, monkeypatch, capsys, mini_bin: Path) -> None:
    # mini-swe-agent 2.x: a bash tool call whose output starts with the marker line submits the rest.
    submit = tool_call("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo 4"})
    with FakeModelServer([submit], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, "mini-swe-agent", mini_bin)
    out = capsys.readouterr().out
    assert result["final_answer"] == "4", result
    assert [i for i in result["issues"] if i["severity"] != "warning"] == [], result["issues"]
    assert result["metrics"]["correct"] == 1.0 and "correct.avg@1 = 1.000" in out
    # The console rendering is kept as a log, not taken for the answer.
    logs = result["telemetry"]["agent_logs"]
    assert "mini-swe-agent" in logs["stdout"] and "Saved trajectory" in logs["stdout"]
    traj = next(v for k, v in logs.items() if k.endswith("mini.traj.json"))
    assert json.loads(traj)["info"]["exit_status"] == "Submitted"
    assert len(srv.requests) == 1 and srv.requests[0].path == "/v1/chat/completions"


def test_mini_swe_agent_without_submission_is_answer_not_found(
    tmp_path: Path, monkeypatch, capsys, mini_bin: Path
) -> None:
    # Three replies without a tool call: mini stops with RepeatedFormatError, submission "".
    with FakeModelServer([], default=text("no tool call")) as srv:
        result = _run(tmp_path, monkeypatch, srv, "mini-swe-agent", mini_bin)
    capsys.readouterr()
    assert result["final_answer"] is None
    issue = next(i for i in result["issues"] if i["code"] == "answer_not_found")
    assert issue["severity"] == "error"
    assert 'info.exit_status == "Submitted"' in issue["message"]
    assert 'info.exit_status is "RepeatedFormatError"' in issue["message"], issue
    assert "stdout" in result["telemetry"]["agent_logs"]


def test_claude_code_answer_is_its_result_event(tmp_path: Path, monkeypatch, capsys, claude_bin: Path) -> None:
    with FakeModelServer([], default=text("4")) as srv:
        result = _run(tmp_path, monkeypatch, srv, "claude-code", claude_bin)
    out = capsys.readouterr().out
    assert result["final_answer"] == "4", result
    assert [i for i in result["issues"] if i["severity"] != "warning"] == [], result["issues"]
    assert "correct.avg@1 = 1.000" in out
    stream = result["telemetry"]["agent_logs"]["stdout"]
    assert '"type":"result"' in stream and '"type":"system"' in stream  # the whole stream-json, as a log
    # An anthropic model (the gateway streams only within one protocol, and Claude Code streams).
    assert srv.requests and all(r.path == "/v1/messages" for r in srv.requests)


def test_claude_code_failure_keeps_exit_status_through_tee(
    tmp_path: Path, monkeypatch, capsys, claude_bin: Path
) -> None:
    """The model refuses every call (400, not retried): Claude Code exits non-zero; under pipefail
    the `| tee` keeps that status — agent_exit_nonzero, and its error result is no answer."""
    with FakeModelServer([], default=error(400, "scripted refusal")) as srv:
        result = _run(tmp_path, monkeypatch, srv, "claude-code", claude_bin)
    capsys.readouterr()
    codes = {i["code"]: i for i in result["issues"]}
    assert "agent_exit_nonzero" in codes and codes["agent_exit_nonzero"]["severity"] == "error", result["issues"]
    assert result["telemetry"]["returncode"] != 0
    assert "answer_not_found" in codes and result["final_answer"] is None
