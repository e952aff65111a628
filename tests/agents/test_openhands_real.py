"""The shipped ``openhands`` definition with the REAL OpenHands CLI (PyPI ``openhands``, pinned)
through a whole ``acx run`` on ``host_process``, against acx's scripted fake model server through
the run's gateway (issue 23 item 2): its terminal tool really runs, the answer is its ``finish``
message from the ``--json`` events (not the console), and a refused model call — OpenHands still
exits 0 — is an ``answer_not_found`` error, not a completed attempt.

OpenHands needs Python ≥ 3.12: the package is installed once into ``.pytest_cache/acx-pip/`` with
``ACX_OPENHANDS_PYTHON`` (default ``python3.12``; minutes cold). Without that interpreter or PyPI
the tests are skipped loudly, unless ``ACX_REQUIRE_OPENHANDS=1`` makes that a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acx.components.harnesses._agents import AGENTS
from acx.testing.fake_models import FakeModelServer, error, tool_call

from ._real import home_env, run_qa, shipped_harness, venv_cli

# OpenHands starts its whole app per attempt; its fallback install is bounded by 800 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

OPENHANDS_VERSION = "1.16.0"
KEY = "sk-real-upstream-key-openhands-77"


@pytest.fixture(scope="session")
def openhands_bin() -> Path:
    return venv_cli(
        "openhands",
        "openhands",
        OPENHANDS_VERSION,
        "openhands",
        flag="ACX_REQUIRE_OPENHANDS",
        label="OpenHands",
        python=os.environ.get("ACX_OPENHANDS_PYTHON", "python3.12"),
        timeout=800,  # under pytest-timeout's 900 s (pyproject.toml); scripts/test.sh installs it first
        check_version=False,  # its --version starts the whole app; the pinned install is the check
    )


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, openhands: Path) -> dict:
    harness = shipped_harness("openhands", tmp_path)
    # The definition's fixed env points the conversation store at /logs/agent: moved here too.
    conversations = str(tmp_path / "agent-logs" / "openhands-conversations")
    env = home_env(tmp_path, openhands.parent, OPENHANDS_CONVERSATIONS_DIR=conversations)
    protocol = AGENTS["openhands"].protocol
    return run_qa(tmp_path, monkeypatch, srv, harness, protocol=protocol, key=KEY, env=env, timeout=600)


def test_openhands_runs_its_tool_and_answers_by_finish(
    openhands_bin: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    marker = tmp_path / "ran.txt"
    script = [
        tool_call(
            "terminal",
            {"command": f"echo tool-ran > {marker}", "is_input": False, "security_risk": "LOW"},
            call_id="c1",
        ),
        tool_call("finish", {"message": "42"}, call_id="c2"),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, openhands_bin)
    out = capsys.readouterr().out
    assert result["final_answer"] == "42", result
    assert [i for i in result["issues"] if i["severity"] != "warning"] == [], result["issues"]
    assert "correct.avg@1 = 1.000" in out, out
    assert marker.read_text().strip() == "tool-ran"
    assert [(r.method, r.path) for r in srv.requests] == [("POST", "/v1/chat/completions")] * 2
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in srv.requests)
    logs = result["telemetry"]["agent_logs"]
    conversation = [k for k in logs if "/openhands-conversations/" in k]
    assert conversation and any("FinishAction" in logs[k] for k in conversation)  # its own event store
    assert not any(KEY in v for v in logs.values())


def test_openhands_model_error_is_not_completed(openhands_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    with FakeModelServer([error(400, "scripted refusal")], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, openhands_bin)
    capsys.readouterr()
    assert result["telemetry"]["returncode"] == 0  # what OpenHands really does
    codes = {i["code"]: i for i in result["issues"]}
    assert codes["answer_not_found"]["severity"] == "error", result["issues"]
    events = result["telemetry"]["agent_logs"][str(tmp_path / "agent-logs" / "openhands.jsonl")]
    assert "ConversationErrorEvent" in events and "scripted refusal" in events
    assert srv.requests and all(r.path == "/v1/chat/completions" for r in srv.requests)
