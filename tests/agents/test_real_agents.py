"""The real mini-swe-agent (PyPI) and Claude Code (npm) through a whole ``acx run`` on
``host_process`` with the ``installed_agent`` harness and their shipped definitions, against acx's
scripted fake model server (through the run's gateway): the QA answer is the agent's submission /
final result, not its console output (issue 23 item 2). Each package is installed once into
``.pytest_cache/`` (tests/agents/_real.py; the Claude Code prefix is the one scripts/test.sh fetches
for the compatibility suite); without the registries the tests skip, saying so.

The definitions' log directory (/logs/agent, a sandbox path) becomes a temporary directory here:
on host_process it would be the host's own /logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from acx.components.harnesses._agents import AGENTS
from acx.testing.fake_models import FakeModelServer, error, text, tool_call

from ._real import home_env, npm_cli, run_qa, shipped_harness, venv_cli

pytestmark = pytest.mark.slow

MINI_VERSION = "2.4.6"
CLAUDE_VERSION = "2.1.197"


@pytest.fixture(scope="session")
def mini_bin() -> Path:
    binary = venv_cli(
        "mini-swe-agent", "mini-swe-agent", MINI_VERSION, "mini", flag=None, label="mini-swe-agent", check_version=False
    )
    return binary.parent


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    if shutil.which("node") is None:
        pytest.skip("!!! no node: the real Claude Code CLI cannot run !!!")
    binary = npm_cli(
        "claude-code", "@anthropic-ai/claude-code", CLAUDE_VERSION, "claude", flag=None, label="Claude Code"
    )
    return binary.parent


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, agent: str, bin_dir: Path, **extra: Any) -> dict:
    harness = shipped_harness(agent, tmp_path, **extra)
    env = home_env(tmp_path, bin_dir)
    protocol = AGENTS[agent].protocol
    return run_qa(
        tmp_path,
        monkeypatch,
        srv,
        harness,
        protocol=protocol,
        question="What is 2+2?",
        answer="4",
        env=env,
        retries=None,
    )


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
