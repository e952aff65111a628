"""The shipped ``aider`` definition with the REAL aider (PyPI ``aider-chat``, pinned) through a
whole ``acx run`` on ``host_process``, against acx's scripted fake model server through the run's
gateway (issue 23 item 2). The answer is the reply in aider's chat history file, not its console
output; aider exits 0 when the model call fails, and the missing reply makes that attempt an
``answer_not_found`` error instead of a completed one.

aider is installed once into ``.pytest_cache/acx-pip/`` (a venv; minutes cold). Without PyPI the
tests are skipped loudly, unless ``ACX_REQUIRE_AIDER=1`` makes that a failure. The definition's
log directory (/logs/agent, a sandbox path) is a directory of the test's own on host_process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acx.cli import main
from acx.components.harnesses._agents import AGENTS, LOG_DIR
from acx.testing.fake_models import FakeModelServer, error, text

pytestmark = pytest.mark.slow

AIDER_VERSION = "0.86.2"
REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".pytest_cache" / "acx-pip" / f"aider-{AIDER_VERSION}"
KEY = "sk-real-upstream-key-aider-4242"


def _require(reason: str) -> None:
    if os.environ.get("ACX_REQUIRE_AIDER") == "1":
        pytest.fail(f"{reason} (ACX_REQUIRE_AIDER=1)")
    pytest.skip(f"!!! real aider tests SKIPPED: {reason} !!!")


@pytest.fixture(scope="session")
def aider_bin() -> Path:
    binary = VENV / "bin" / "aider"
    if not binary.exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=120)
            pip = [str(VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
            subprocess.run([*pip, f"aider-chat=={AIDER_VERSION}"], check=True, capture_output=True, timeout=1200)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            _require(f"could not install aider-chat=={AIDER_VERSION}: {exc}")
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    if version.returncode != 0 or AIDER_VERSION not in version.stdout:
        _require(f"{binary} --version: {version.stdout} {version.stderr[-1000:]}")
    return binary


def _moved(value: Any, logs: Path) -> Any:
    return json.loads(json.dumps(value).replace(LOG_DIR, str(logs)))


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, aider: Path, question: str, answer: str) -> dict:
    logs = tmp_path / "agent-logs"
    d = AGENTS["aider"]
    harness = {
        "id": "installed_agent",
        "agent": "aider",  # its env and aliases as shipped
        "install": f"{aider} --version",
        "agent_dir": str(tmp_path / "agent-dir"),
        "command": _moved(d.command, logs),
        "logs": _moved(d.logs, logs),
        "answer": _moved(msgspec.to_builtins(d.answer), logs),
        "cwd": str(tmp_path / "work"),
    }
    (tmp_path / "work").mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": question, "answer": answer}) + "\n")
    env = {"PATH": f"{aider.parent}:{os.environ['PATH']}", "HOME": str(home)}
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: aider
runtime: {{results_dir: results, progress: none}}
requests:
  - name: aider
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {{id: fake-model, base_url: "{srv.base_url}", api_protocol: {d.protocol}, api_key: "{KEY}"}}
    environment: {{id: host_process, run_env_variables: {json.dumps(env)}}}
    execution: {{run_timeout_seconds: 300, max_retries: 0}}
"""
    )
    monkeypatch.chdir(tmp_path)
    main(["run", str(spec)])
    return json.loads(next((tmp_path / "results").rglob("attempt-1/result.json")).read_text())


def test_aider_answer_is_its_reply_in_the_chat_history(aider_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    with FakeModelServer([text("42", usage=(30, 2))], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, aider_bin, "What is 6*7?", "42")
    out = capsys.readouterr().out
    assert result["final_answer"] == "42", result
    assert [i for i in result["issues"] if i["severity"] != "warning"] == [], result["issues"]
    assert "correct.avg@1 = 1.000" in out, out
    logs = result["telemetry"]["agent_logs"]
    assert "Aider v0.86.2" in logs["stdout"]  # the console output is a log, not the answer
    chat = logs[str(tmp_path / "agent-logs" / "aider.chat.md")]
    assert "#### What is 6*7?" in chat and "> Tokens:" in chat
    assert "LLM RESPONSE" in logs[str(tmp_path / "agent-logs" / "aider.llm.log")]
    assert [(r.method, r.path) for r in srv.requests] == [("POST", "/v1/chat/completions")]
    assert srv.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert not any(KEY in v for v in logs.values())


def test_aider_edits_a_file_with_its_whole_format(aider_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """The model's file listing (aider's `whole` edit format) is applied in the command's cwd."""
    listing = "hello.txt\n```\nHello, world!\n```"
    with FakeModelServer([text(listing)], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, aider_bin, "Create hello.txt saying Hello, world!", listing)
    capsys.readouterr()
    assert (tmp_path / "work" / "hello.txt").read_text().strip() == "Hello, world!"
    assert result["final_answer"] == listing
    assert len(srv.requests) == 1


def test_aider_model_error_is_not_completed(aider_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """aider exits 0 after a refused call; the attempt is still an error: no reply, no answer."""
    with FakeModelServer([error(400, "scripted refusal")], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, aider_bin, "What is 6*7?", "42")
    capsys.readouterr()
    assert result["telemetry"]["returncode"] == 0  # what aider really does
    codes = {i["code"]: i for i in result["issues"]}
    assert codes["answer_not_found"]["severity"] == "error", result["issues"]
    assert result["final_answer"] is None
    assert "scripted refusal" in result["telemetry"]["agent_logs"][str(tmp_path / "agent-logs" / "aider.chat.md")]
    assert len(srv.requests) >= 1 and all(r.path == "/v1/chat/completions" for r in srv.requests)
