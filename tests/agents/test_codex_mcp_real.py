"""The REAL Codex CLI (the pinned npm package, fixture of test_codex_real.py) handed MCP servers
in its own config.toml format (`[mcp_servers.<name>]`) by the shipped `codex` definition: codex
starts the server and offers its tools to the model. The server is a real one written with the
`mcp` SDK (tests/agents/mcp_servers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.agents.test_codex_real import codex_bin

from acx.cli import main
from acx.components.harnesses._agents import AGENTS, LOG_DIR
from acx.testing.fake_models import FakeModelServer, text

pytestmark = pytest.mark.slow
pytest.importorskip("mcp")

TOY = Path(__file__).parent / "mcp_servers" / "toy_server.py"
__all__ = ["codex_bin"]  # the fixture, re-exported for pytest


def _run(spec: Path, monkeypatch) -> dict:
    monkeypatch.chdir(spec.parent)
    main(["run", str(spec)])
    return json.loads(next((spec.parent / "results").rglob("attempt-1/result.json")).read_text())


def _spec(tmp_path: Path, base_url: str, codex: Path) -> Path:
    logs = tmp_path / "agent-logs"
    (tmp_path / "data.jsonl").write_text(
        json.dumps({"id": "q0", "question": "What is the secret word?", "answer": "pelican-7"}) + "\n"
    )
    command = f"export PATH={codex.parent}:$PATH CODEX_HOME={logs}/codex-home; " + AGENTS["codex"].command.replace(
        LOG_DIR, str(logs)
    )
    harness = {
        "id": "installed_agent",
        "agent": "codex",
        "agent_dir": str(tmp_path / "agent"),
        "install": f"{codex} --version",
        "command": command,
        "logs": [str(logs / "codex.jsonl"), str(logs / "codex-last-message.txt")],
        "answer_file": str(logs / "codex-last-message.txt"),
        "mcp_servers": [{"name": "toy", "command": sys.executable, "args": [str(TOY)], "timeout_seconds": 60}],
    }
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: codex
runtime: {{results_dir: results, progress: none}}
requests:
  - name: codex
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {{id: fake-model, base_url: "{base_url}", api_protocol: openai-responses}}
    environment: {{id: host_process}}
    execution: {{run_timeout_seconds: 180, max_retries: 0}}
"""
    )
    return spec


def test_codex_is_handed_the_mcp_servers_and_offers_their_tools(
    codex_bin: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """Codex read the servers from its config.toml, started the stdio server and listed its
    tools: it offers them to the model as the namespace tool ``mcp__toy``. (A call of one from the
    scripted model is not shown here: codex 0.171.0 answers a scripted namespaced function call
    with "unsupported call"; Claude Code's MCP call is in test_claude_mcp_real.py.)"""
    with FakeModelServer([text("pelican-7", usage=(30, 2))], default=None) as srv:
        result = _run(_spec(tmp_path, srv.base_url, codex_bin), monkeypatch)
    capsys.readouterr()
    config = (tmp_path / "agent" / "mcp-config.toml").read_text()
    assert config.startswith('[mcp_servers."toy"]') and "tool_timeout_sec = 60.0" in config, config
    tools = srv.requests[0].body.get("tools") or []
    (namespace,) = [t for t in tools if t.get("type") == "namespace" and t.get("name") == "mcp__toy"]
    names = {t["name"] for t in namespace["tools"]}
    assert {"secret_word", "add", "hang"} <= names, names
    assert result["final_answer"] == "pelican-7", result
