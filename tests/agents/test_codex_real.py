"""The shipped ``codex`` definition with the REAL Codex CLI (npm ``@openai/codex``, pinned) on
``host_process``, against acx's scripted fake model server through the run's gateway (issue 23).

The CLI is installed once per session into ``.pytest_cache/acx-npm/`` (scripts/test.sh does it
beforehand and sets ``ACX_REQUIRE_CODEX=1``: then a failed install fails the tests; without it
they are skipped loudly). ``ACX_CODEX_BIN`` names an installed ``codex`` instead.

The definition's command runs unchanged except that ``/logs/agent`` (where a sandbox keeps the
agent's logs) is a directory of the test's own: host_process runs on the host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from acx.components.harnesses._agents import AGENTS, LOG_DIR
from acx.testing.fake_models import FakeModelServer, error, text, tool_call

from ._real import model_calls, npm_cli, run_qa

pytestmark = pytest.mark.slow

CODEX_VERSION = "0.171.0"


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    given = os.environ.get("ACX_CODEX_BIN", "")
    return npm_cli(
        "codex", "@openai/codex", CODEX_VERSION, "codex", flag="ACX_REQUIRE_CODEX", label="Codex CLI", given=given
    )


def _harness(tmp_path: Path, codex: Path) -> dict:
    logs = tmp_path / "agent-logs"
    # The shipped command, with the logs directory moved and codex on PATH.
    command = f"export PATH={codex.parent}:$PATH CODEX_HOME={logs}/codex-home; " + AGENTS["codex"].command.replace(
        LOG_DIR, str(logs)
    )
    return {
        "id": "installed_agent",
        "agent": "codex",
        "install": f"{codex} --version",
        "command": command,
        "logs": [str(logs / "codex.jsonl"), str(logs / "codex-last-message.txt")],
        "answer_file": str(logs / "codex-last-message.txt"),
    }


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, codex: Path) -> dict:
    return run_qa(tmp_path, monkeypatch, srv, _harness(tmp_path, codex), protocol="openai-responses", timeout=120)


def _calls(tmp_path: Path) -> list[dict]:
    return model_calls(tmp_path)


def test_codex_answers_through_the_gateway(codex_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """(a) codex runs a tool call the script asks for, then answers; the answer is its -o file.
    (c) Its only way to the model was the gateway: the fake server saw exactly the two calls (no
    WebSocket attempt, no retries), both POST /v1/responses, streamed, with the real key."""
    marker = tmp_path / "ran.txt"
    script = [
        tool_call("exec_command", {"cmd": f"echo tool-ran > {marker}"}, call_id="call_1"),
        text("42", usage=(30, 2)),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, codex_bin)
    out = capsys.readouterr().out
    assert result["issues"] == [], result["issues"]
    assert result["final_answer"] == "42"
    assert "correct.avg@1 = 1.000" in out, out
    assert marker.read_text().strip() == "tool-ran"  # codex assembled the streamed function call
    logs = result["telemetry"]["agent_logs"]
    assert logs[str(tmp_path / "agent-logs" / "codex-last-message.txt")].strip() == "42"
    events = [json.loads(line) for line in logs[str(tmp_path / "agent-logs" / "codex.jsonl")].splitlines()]
    assert events[-1]["type"] == "turn.completed", events
    assert not any("WebSocket" in json.dumps(e) or "Reconnecting" in json.dumps(e) for e in events), events
    # The fake server saw two POSTs to /v1/responses and nothing else (no GET/upgrade is recorded as
    # a request there, so also check the gateway's records below).
    assert [(r.method, r.path) for r in srv.requests] == [("POST", "/v1/responses")] * 2
    assert all(r.body["stream"] is True for r in srv.requests)
    second_input = json.dumps(srv.requests[1].body["input"])
    assert "call_1" in second_input and "function_call_output" in second_input
    calls = _calls(tmp_path)
    assert len(calls) == 2 and all(c["via"] == "http" and c["status"] == 200 for c in calls), calls
    assert result["telemetry"]["model_usage"]["model_calls"] == 2


def test_codex_failure_is_an_error_not_completed(codex_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """(b) The model refuses (a 400 the gateway passes through): codex exits non-zero, and that
    exit status survives the tee into the log — the attempt has an agent_exit_nonzero error."""
    with FakeModelServer([error(400, "scripted refusal")], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, codex_bin)
    capsys.readouterr()
    codes = [(i["severity"], i["code"]) for i in result["issues"]]
    assert ("error", "agent_exit_nonzero") in codes, result["issues"]
    assert result["telemetry"]["returncode"] != 0
    assert 1 <= len(srv.requests) <= 5 and all(r.path == "/v1/responses" for r in srv.requests)
