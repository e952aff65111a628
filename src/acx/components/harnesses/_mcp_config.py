"""An attempt's MCP servers, and how installed agents are given them in their own formats.

Plan-time safe (msgspec and json only). The servers are the harness config's ``mcp_servers``
followed by the task's own (Harbor ``[[environment.mcp_servers]]``, kept by the loader in
``TaskSpec.metadata["mcp_servers"]``); a task server with a configured server's name is replaced
by it (the request decides).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from acx.components._configs import McpServerConfig

__all__ = ["STARTUP_SECONDS", "claude_config", "codex_config", "servers_for"]

#: Time an agent gives a server to start and list its tools (react's own connect budget too).
STARTUP_SECONDS = 60.0


def servers_for(configured: list[McpServerConfig], task_meta: Mapping[str, Any] | None) -> list[McpServerConfig]:
    import msgspec

    from acx.components._configs import McpServerConfig

    names = {s.name for s in configured}
    out = list(configured)
    for raw in (task_meta or {}).get("mcp_servers") or []:
        if raw.get("name") not in names:
            out.append(msgspec.convert(raw, McpServerConfig))
    return out


def claude_config(servers: list[McpServerConfig]) -> str:
    """Claude Code's ``--mcp-config`` JSON (``{"mcpServers": {name: {...}}}``), also the file a
    custom command gets as ``$ACX_MCP_CONFIG``."""
    entries: dict[str, Any] = {}
    for s in servers:
        kind = s.resolved_transport
        if kind == "stdio":
            entries[s.name] = {"type": "stdio", "command": s.command, "args": list(s.args), "env": dict(s.env)}
        else:
            entries[s.name] = {"type": "http" if kind == "streamable-http" else "sse", "url": s.url}
            if s.headers:
                entries[s.name]["headers"] = dict(s.headers)
    return json.dumps({"mcpServers": entries}, indent=2, sort_keys=True) + "\n"


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def _toml_table(values: Mapping[str, str]) -> str:
    return "{ " + ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in sorted(values.items())) + " }"


def codex_config(servers: list[McpServerConfig]) -> str:
    """Codex's ``config.toml`` ``[mcp_servers.<name>]`` tables (stdio and streamable HTTP)."""
    lines: list[str] = []
    for s in servers:
        lines.append(f"[mcp_servers.{_toml_str(s.name)}]")
        if s.resolved_transport == "stdio":
            lines.append(f"command = {_toml_str(s.command or '')}")
            lines.append("args = [" + ", ".join(_toml_str(a) for a in s.args) + "]")
            if s.env:
                lines.append(f"env = {_toml_table(s.env)}")
        else:
            lines.append(f"url = {_toml_str(s.url or '')}")
            if s.headers:
                lines.append(f"http_headers = {_toml_table(s.headers)}")
        lines.append(f"startup_timeout_sec = {STARTUP_SECONDS}")
        lines.append(f"tool_timeout_sec = {float(s.timeout_seconds)}")
        lines.append("")
    return "\n".join(lines)
