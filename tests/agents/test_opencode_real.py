"""The shipped ``opencode`` definition with the REAL OpenCode CLI (npm ``opencode-ai``, pinned) on
``host_process``, against acx's scripted fake model server through the run's gateway (issue 23).

The CLI is installed once into ``.pytest_cache/acx-npm/`` (scripts/test.sh does it beforehand and
sets ``ACX_REQUIRE_OPENCODE=1`` in CI: then a failed install fails the tests; without it they are
skipped loudly). ``ACX_OPENCODE_BIN`` names an installed ``opencode`` instead.

The definition's command and environment run unchanged except that ``/logs/agent`` (where a
sandbox keeps the agent's logs) is a directory of the test's own, and HOME is the test's (opencode
keeps its session store and caches under it): host_process runs on the host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from acx.components.harnesses._agents import AGENTS
from acx.testing.fake_models import FakeModelServer, error, text, tool_call

from ._real import home_env, model_calls, npm_cli, run_qa, shipped_harness

pytestmark = pytest.mark.slow

OPENCODE_VERSION = "1.18.33"
KEY = "sk-real-upstream-key-0123456789"


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    given = os.environ.get("ACX_OPENCODE_BIN", "")
    return npm_cli(
        "opencode",
        "opencode-ai",
        OPENCODE_VERSION,
        "opencode",
        flag="ACX_REQUIRE_OPENCODE",
        label="OpenCode CLI",
        given=given,
    )


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, opencode: Path) -> dict:
    harness = shipped_harness("opencode", tmp_path, install=f"{opencode} --version")
    env = home_env(tmp_path, opencode.parent)
    return run_qa(tmp_path, monkeypatch, srv, harness, protocol=AGENTS["opencode"].protocol, key=KEY, env=env)


def _calls(tmp_path: Path) -> list[dict]:
    return model_calls(tmp_path)


def test_opencode_answers_through_the_gateway(opencode_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """OpenCode runs the bash tool call the script asks for, then answers: the answer is the last
    text event of its JSON stream, scored correct; its only way to the model was the gateway (the
    fake server saw exactly the two scripted calls, with the real key — never the agent's token)."""
    marker = tmp_path / "ran.txt"
    script = [
        tool_call("bash", {"command": f"echo tool-ran > {marker}", "description": "write the marker"}, call_id="c1"),
        text("42", usage=(30, 2)),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, opencode_bin)
    out = capsys.readouterr().out
    assert [i for i in result["issues"] if i["severity"] != "warning"] == [], result["issues"]
    assert result["final_answer"] == "42"
    assert "correct.avg@1 = 1.000" in out, out
    assert marker.read_text().strip() == "tool-ran"  # opencode assembled the streamed tool call and ran it
    assert [(r.method, r.path) for r in srv.requests] == [("POST", "/v1/chat/completions")] * 2
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in srv.requests)
    second = json.dumps(srv.requests[1].body["messages"])
    assert '"role": "tool"' in second and "c1" in second
    calls = _calls(tmp_path)
    assert len(calls) == 2 and all(c["status"] == 200 for c in calls), calls
    assert result["telemetry"]["model_usage"]["model_calls"] == 2
    # Its own logs: the JSON event stream, the exported session, its log (stderr); no key in any.
    logs = result["telemetry"]["agent_logs"]
    events = [json.loads(line) for line in logs[str(tmp_path / "agent-logs" / "opencode.jsonl")].splitlines()]
    kinds = [e["type"] for e in events if e["type"] != "step_start"]
    assert kinds == ["tool_use", "step_finish", "text", "step_finish"], kinds
    assert events[0]["part"]["type"] == "step-start"
    session = json.loads(logs[str(tmp_path / "agent-logs" / "opencode-session.json")])
    assert session["info"]["model"]["providerID"] == "acx" and session["info"]["title"] == "acx"
    assert "llm.provider=acx" in logs["stderr"]
    assert not any(KEY in v for v in logs.values())


def test_opencode_model_error_is_not_completed(opencode_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """The model refuses (a 400 the gateway passes through): opencode exits 1, pipefail keeps that
    through the tee — agent_exit_nonzero — and its error event is no answer."""
    with FakeModelServer([error(400, "scripted refusal")], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, opencode_bin)
    capsys.readouterr()
    codes = {i["code"]: i for i in result["issues"]}
    assert codes["agent_exit_nonzero"]["severity"] == "error", result["issues"]
    assert result["telemetry"]["returncode"] == 1
    assert result["final_answer"] is None and "answer_not_found" in codes
    events = result["telemetry"]["agent_logs"][str(tmp_path / "agent-logs" / "opencode.jsonl")]
    assert '"type":"error"' in events and "scripted refusal" in events
    assert len(srv.requests) == 1 and srv.requests[0].path == "/v1/chat/completions"
