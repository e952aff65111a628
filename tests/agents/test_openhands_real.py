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

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acx.cli import main
from acx.components.harnesses._agents import AGENTS, LOG_DIR
from acx.testing.fake_models import FakeModelServer, error, tool_call

pytestmark = pytest.mark.slow

OPENHANDS_VERSION = "1.16.0"
REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".pytest_cache" / "acx-pip" / f"openhands-{OPENHANDS_VERSION}"
KEY = "sk-real-upstream-key-openhands-77"


def _require(reason: str) -> None:
    if os.environ.get("ACX_REQUIRE_OPENHANDS") == "1":
        pytest.fail(f"{reason} (ACX_REQUIRE_OPENHANDS=1)")
    pytest.skip(f"!!! real OpenHands tests SKIPPED: {reason} !!!")


@pytest.fixture(scope="session")
def openhands_bin() -> Path:
    binary = VENV / "bin" / "openhands"
    if not binary.exists():
        python = shutil.which(os.environ.get("ACX_OPENHANDS_PYTHON", "python3.12"))
        if python is None:
            _require("no Python 3.12 interpreter (set ACX_OPENHANDS_PYTHON)")
        try:
            subprocess.run([str(python), "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=120)
            pip = [str(VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
            subprocess.run([*pip, f"openhands=={OPENHANDS_VERSION}"], check=True, capture_output=True, timeout=1800)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            _require(f"could not install openhands=={OPENHANDS_VERSION}: {exc}")
    if not binary.exists():
        _require(f"{binary} is missing after the install")
    return binary


def _moved(value: Any, logs: Path) -> Any:
    return json.loads(json.dumps(value).replace(LOG_DIR, str(logs)))


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, openhands: Path) -> dict:
    logs = tmp_path / "agent-logs"
    d = AGENTS["openhands"]
    harness = {
        "id": "installed_agent",
        "agent": "openhands",
        "install": "true",  # installed by the fixture
        "agent_dir": str(tmp_path / "agent-dir"),
        "command": _moved(d.command, logs),
        "logs": _moved(d.logs, logs),
        "answer": _moved(msgspec.to_builtins(d.answer), logs),
    }
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "What is 6*7?", "answer": "42"}) + "\n")
    # The definition's fixed env points the conversation store at /logs/agent: moved here too.
    env = {
        "PATH": f"{openhands.parent}:{os.environ['PATH']}",
        "HOME": str(home),
        "OPENHANDS_CONVERSATIONS_DIR": str(logs / "openhands-conversations"),
    }
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: openhands
runtime: {{results_dir: results, progress: none}}
requests:
  - name: openhands
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {{id: fake-model, base_url: "{srv.base_url}", api_protocol: {d.protocol}, api_key: "{KEY}"}}
    environment: {{id: host_process, run_env_variables: {json.dumps(env)}}}
    execution: {{run_timeout_seconds: 600, max_retries: 0}}
"""
    )
    monkeypatch.chdir(tmp_path)
    main(["run", str(spec)])
    return json.loads(next((tmp_path / "results").rglob("attempt-1/result.json")).read_text())


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
