"""The REAL Claude Code CLI (the pinned npm package, `claude_bin` fixture of test_real_agents.py)
handed MCP servers with `--mcp-config` in its own JSON format by the shipped `claude-code`
definition: a scripted model calls the server's tool (`mcp__<server>__<tool>`), and Claude Code's
own stream-json log shows the call and the server's answer. The server is a real one written with
the `mcp` SDK (tests/agents/mcp_servers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.agents.test_real_agents import _run, claude_bin

from acx.testing.fake_models import FakeModelServer, text, tool_call

pytestmark = pytest.mark.slow
pytest.importorskip("mcp")

TOY = Path(__file__).parent / "mcp_servers" / "toy_server.py"
__all__ = ["claude_bin"]  # the fixture, re-exported for pytest


def test_claude_code_is_handed_the_mcp_servers_and_calls_one(
    tmp_path: Path, monkeypatch, capsys, claude_bin: Path
) -> None:
    servers = [{"name": "toy", "command": sys.executable, "args": [str(TOY)], "env": {"TOY_SUFFIX": "9"}}]
    script = [tool_call("mcp__toy__secret_word", {}, call_id="toolu_1"), text("4")]
    with FakeModelServer(script, default=text("4")) as srv:
        result = _run(tmp_path, monkeypatch, srv, "claude-code", claude_bin, mcp_servers=servers)
    capsys.readouterr()
    config = json.loads((tmp_path / "agent-dir" / "mcp-config.json").read_text())
    assert config["mcpServers"]["toy"]["type"] == "stdio", config
    offered = {t.get("name") for r in srv.requests for t in (r.body or {}).get("tools", [])}
    assert "mcp__toy__secret_word" in offered, offered
    stream = [json.loads(line) for line in result["telemetry"]["agent_logs"]["stdout"].splitlines() if line.strip()]
    uses = [
        c
        for e in stream
        if e.get("type") == "assistant"
        for c in e["message"]["content"]
        if c.get("type") == "tool_use"
    ]
    assert [u["name"] for u in uses] == ["mcp__toy__secret_word"], uses
    results = [
        c
        for e in stream
        if e.get("type") == "user"
        for c in e["message"]["content"]
        if isinstance(c, dict) and c.get("type") == "tool_result"
    ]
    assert results and "pelican-9" in json.dumps(results[0]), results  # the server's env reached it
    assert result["final_answer"] == "4", result
