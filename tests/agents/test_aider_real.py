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

from pathlib import Path

import pytest

from acx.components.harnesses._agents import AGENTS
from acx.testing.fake_models import FakeModelServer, error, text

from ._real import home_env, run_qa, shipped_harness, venv_cli

pytestmark = pytest.mark.slow

AIDER_VERSION = "0.86.2"
KEY = "sk-real-upstream-key-aider-4242"


@pytest.fixture(scope="session")
def aider_bin() -> Path:
    return venv_cli("aider", "aider-chat", AIDER_VERSION, "aider", flag="ACX_REQUIRE_AIDER", label="aider")


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, aider: Path, question: str, answer: str) -> dict:
    (tmp_path / "work").mkdir()
    harness = shipped_harness("aider", tmp_path, install=f"{aider} --version", cwd=str(tmp_path / "work"))
    env = home_env(tmp_path, aider.parent)
    protocol = AGENTS["aider"].protocol
    return run_qa(
        tmp_path,
        monkeypatch,
        srv,
        harness,
        protocol=protocol,
        question=question,
        answer=answer,
        key=KEY,
        env=env,
        timeout=300,
    )


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
