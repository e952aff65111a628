"""MCP server declarations without a model: Harbor `[[environment.mcp_servers]]` mapped with
Harbor's semantics (E0480 located for malformed entries), installed-agent formats (Claude Code's
JSON, Codex's TOML) and refusals (E0481/E0482) at `acx compile`, and the per-call timeout of a
hanging server enforced on trio's clock (MockClock: no real waiting). Contract H6 (nothing
declared is silently ignored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from acx.components._configs import McpServerConfig
from acx.components.harbor_task import load_harbor_task
from acx.components.harnesses._mcp_config import claude_config, codex_config, servers_for
from acx.errors import AcxPlanError


def harbor_task(root: Path, servers_toml: str) -> Path:
    task = root / "tasks" / "t1"
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text('schema_version = "1.4"\n[agent]\ntimeout_sec = 60.0\n\n' + servers_toml)
    (task / "instruction.md").write_text("Do it.\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("true\n")
    (task / "environment" / "Dockerfile").write_text("FROM scratch\n")
    return task


def test_harbor_servers_are_mapped_with_harbors_defaults(tmp_path: Path) -> None:  # contract H6
    task = harbor_task(
        tmp_path,
        """[[environment.mcp_servers]]
name = "search"
url = "http://search:8000/sse"

[[environment.mcp_servers]]
name = "web"
transport = "http"
url = "http://web:8000/mcp"
headers = { X-Team = "acx" }

[[environment.mcp_servers]]
name = "fs"
transport = "stdio"
command = "mcp-fs"
args = ["--root", "/app"]
""",
    )
    t = load_harbor_task(task)
    assert not [w for w in t.load_warnings if "mcp" in w], t.load_warnings
    assert t.metadata["mcp_servers"] == [
        {"name": "search", "transport": "sse", "url": "http://search:8000/sse"},  # Harbor's default transport
        {"name": "web", "transport": "streamable-http", "url": "http://web:8000/mcp", "headers": {"X-Team": "acx"}},
        {"name": "fs", "transport": "stdio", "command": "mcp-fs", "args": ["--root", "/app"]},
    ]
    # the harness's own servers come first; one with a task server's name replaces it
    mine = [McpServerConfig(name="web", command="my-web")]
    got = servers_for(mine, t.metadata)
    assert [(s.name, s.resolved_transport) for s in got] == [("web", "stdio"), ("search", "sse"), ("fs", "stdio")]


@pytest.mark.parametrize(
    ("servers", "needle", "line"),
    [
        ('[[environment.mcp_servers]]\nname = "a"\ncommand = "x"\n', "sse MCP server needs a url", 5),
        ('[[environment.mcp_servers]]\nname = "a"\ntransport = "stdio"\n', "needs a command", 5),
        ('[[environment.mcp_servers]]\nname = "a b"\ntransport = "stdio"\ncommand = "x"\n', "needs a name", 6),
        ('[[environment.mcp_servers]]\nname = "a"\ntransport = "ws"\nurl = "http://x"\n', "unknown MCP transport", 7),
        ('[[environment.mcp_servers]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\nport = 1\n', "unknown MCP", 9),
        (
            '[[environment.mcp_servers]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\nheaders = { A = "b" }\n',
            "not a url or headers",
            5,
        ),
        (
            '[[environment.mcp_servers]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\n'
            '[[environment.mcp_servers]]\nname = "a"\ntransport = "stdio"\ncommand = "y"\n',
            "two MCP servers are named 'a'",
            5,
        ),
    ],
)
def test_malformed_harbor_servers_are_located_errors(tmp_path: Path, servers: str, needle: str, line: int) -> None:
    task = harbor_task(tmp_path, servers)
    with pytest.raises(AcxPlanError) as info:
        load_harbor_task(task)
    err = info.value
    assert err.code == "E0480" and needle in str(err) and err.help, err
    assert err.span is not None and err.span.file.endswith("task.toml") and err.span.line == line, err.span


def test_installed_agent_formats() -> None:
    servers = [
        McpServerConfig(name="fs", command="mcp-fs", args=["--root", "/app"], env={"K": 'v"1'}, timeout_seconds=30),
        McpServerConfig(name="web", transport="streamable-http", url="http://web/mcp", headers={"X-A": "b"}),
        McpServerConfig(name="old", transport="sse", url="http://old/sse"),
    ]
    claude = json.loads(claude_config(servers))["mcpServers"]
    assert claude["fs"] == {"type": "stdio", "command": "mcp-fs", "args": ["--root", "/app"], "env": {"K": 'v"1'}}
    assert claude["web"] == {"type": "http", "url": "http://web/mcp", "headers": {"X-A": "b"}}
    assert claude["old"] == {"type": "sse", "url": "http://old/sse"}
    codex = tomllib.loads(codex_config(servers[:2]))["mcp_servers"]
    assert codex["fs"] == {
        "command": "mcp-fs",
        "args": ["--root", "/app"],
        "env": {"K": 'v"1'},
        "startup_timeout_sec": 60.0,
        "tool_timeout_sec": 30.0,
    }
    assert codex["web"] == {
        "url": "http://web/mcp",
        "http_headers": {"X-A": "b"},
        "startup_timeout_sec": 60.0,
        "tool_timeout_sec": 60.0,
    }


def _compile(tmp_path: Path, harness: dict[str, object]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: r
runtime: {{results_dir: results, progress: none}}
requests:
  - name: r
    benchmark: {{id: harbor, path: tasks}}
    harness: {json.dumps(harness)}
    model: {{id: m, base_url: "http://127.0.0.1:9/v1"}}
    environment: {{id: docker}}
"""
    )
    return subprocess.run(
        [sys.executable, "-m", "acx", "compile", str(spec), "-o", str(tmp_path / "plan.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def test_definitions_that_cannot_take_mcp_servers_are_refused(tmp_path: Path) -> None:
    harbor_task(tmp_path, '[[environment.mcp_servers]]\nname = "old"\nurl = "http://old:8000/sse"\n')
    res = _compile(tmp_path, {"id": "installed_agent", "agent": "mini-swe-agent"})
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "E0481" in res.stderr and "mini-swe-agent" in res.stderr and "task.toml" in res.stderr, res.stderr
    res = _compile(tmp_path, {"id": "installed_agent", "agent": "codex"})
    assert res.returncode == 2 and "E0482" in res.stderr and "sse" in res.stderr, res.stderr
    res = _compile(tmp_path, {"id": "installed_agent", "agent": "claude-code"})
    assert res.returncode == 0, res.stderr  # Claude Code speaks sse


def test_a_hanging_tool_call_times_out_on_trios_clock() -> None:  # contract T1
    """The per-call timeout is enforced by acx (not the server): on a MockClock the 30 s budget
    passes at once, the call gets a tool error, and the server stays connected for the next call."""
    pytest.importorskip("mcp")
    from mcp.server.mcpserver import MCPServer

    from acx.components.harnesses._mcp import _Server

    server = MCPServer("clock")

    @server.tool()
    async def hang() -> str:
        await trio.sleep(3600)
        return "late"

    @server.tool()
    async def ping() -> str:  # async: a sync tool runs in a thread the autojumping clock does not wait for
        return "pong"

    config = msgspec.convert({"name": "clock", "command": "unused", "timeout_seconds": 30}, McpServerConfig)
    outcome: dict[str, object] = {}

    async def main() -> None:
        conn = _Server(config, server)
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            assert conn.failure is None, conn.failure
            started = trio.current_time()
            outcome["hang"] = await conn.call("hang", {}, None)
            outcome["elapsed"] = trio.current_time() - started
            outcome["ping"] = await conn.call("ping", {}, None)
            conn.stop.set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    hung: Any = outcome["hang"]
    answered: Any = outcome["ping"]
    assert hung.failed and "did not answer within 30 s" in hung.content and hung.meta["timed_out"] is True
    assert 30 <= outcome["elapsed"] < 31  # type: ignore[operator]
    assert answered.content == "pong" and answered.failed is None
