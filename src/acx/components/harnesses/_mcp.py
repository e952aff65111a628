"""MCP servers for ``react``: the one edge of acx that imports the ``mcp`` SDK (its client).

:class:`McpHub` connects to every server of the attempt when the episode starts, lists their
tools (offered to the model as ``<server>__<tool>``), relays calls and turns results into
observations. A server that fails (cannot start, crashes, hangs past its per-call timeout, writes
garbage) never ends the episode: the call the model made gets a tool error it sees, and the
attempt gets a warning issue.

Transports:

- ``streamable-http`` / ``sse``: the SDK's own client, from the host (where ``react`` runs) to the
  URL as written; the host must reach it (a server on the host or a port the environment publishes).
- ``stdio``: the server runs *inside the sandbox*, as a sandbox command under the run phase's
  policy and budget. A driver session has no streaming exec, so every exchange is one ``exec`` of
  the stdio bridge (``_mcp_bridge.py``, uploaded once), which starts the server, replays the
  handshake, sends one request and prints its response. The SDK client on the host sees an
  ordinary message stream (:class:`_BridgeTransport`). The server is therefore started per call:
  state it keeps in memory between calls is lost (state in files persists).
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from acx.components.harnesses._mcp_config import STARTUP_SECONDS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from acx.components._configs import McpServerConfig
    from acx.components._context import HarnessContext

__all__ = ["McpHub", "McpUnavailable"]

#: Where the stdio bridge is uploaded in the sandbox.
BRIDGE_DIR = "/tmp/acx-mcp"
#: Separator of server and tool in the names the model sees.
SEP = "__"
#: Time to connect and list a server's tools at the start of the episode.
CONNECT_SECONDS = STARTUP_SECONDS


class McpUnavailable(Exception):
    """The ``mcp`` package is not installed (react with MCP servers needs it)."""


@dataclass
class McpResult:
    content: str
    meta: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None  # why the server failed (an issue for the attempt), None = it answered


def _import_client() -> Any:
    try:
        import mcp
    except ImportError as exc:
        raise McpUnavailable(
            "MCP servers need the `mcp` package, which is not installed: pip install 'acx-eval[mcp]'"
        ) from exc
    return mcp


def _describe(exc: BaseException) -> str:
    """A one-line reason from an exception (or the first of a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 1200 else f"{text[:1200]} [...]"


def _render(result: Any) -> tuple[str, dict[str, Any]]:
    """A CallToolResult as the model's text: text blocks as they are, images and audio as
    references (type, size, digest; the bytes stay out of the conversation), resources by URI."""
    parts: list[str] = []
    media: list[dict[str, Any]] = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            data = (block.data or "").encode("ascii", "replace")
            ref = {"type": kind, "mime_type": block.mime_type, "sha256": hashlib.sha256(data).hexdigest()}
            ref["base64_chars"] = len(data)
            media.append(ref)
            parts.append(f"[{kind} {block.mime_type}, {len(data)} base64 characters, sha256:{ref['sha256'][:16]}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {res.uri}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    meta: dict[str, Any] = {}
    if media:
        meta["media"] = media
    text = "\n".join(parts) if parts else "[no output]"
    if result.is_error:
        meta["mcp_error"] = True
        text = f"[error] {text}"
    return text, meta


class _BridgeTransport:
    """An SDK transport to a stdio server inside the sandbox, one bridge ``exec`` per exchange."""

    def __init__(self, ctx: HarnessContext, server: McpServerConfig, python: str, cwd: str | None) -> None:
        self.ctx = ctx
        self.server = server
        self.python = python
        self.cwd = cwd
        self.handshake: list[dict[str, Any]] = []

    @asynccontextmanager
    async def open(self) -> AsyncIterator[tuple[Any, Any]]:
        import anyio

        await self._upload()
        to_client, from_bridge = anyio.create_memory_object_stream[Any](16)
        to_bridge, from_client = anyio.create_memory_object_stream[Any](16)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, from_client, to_client, nursery)
            try:
                yield from_bridge, to_bridge
            finally:
                nursery.cancel_scope.cancel()

    async def _upload(self) -> None:
        assert self.ctx.session is not None
        source = Path(__file__).with_name("_mcp_bridge.py").read_text(encoding="utf-8")
        await self.ctx.session.exec(["mkdir", "-p", BRIDGE_DIR], timeout=self.ctx.clip(30.0) or 30.0)
        await self.ctx.session.write_text(f"{BRIDGE_DIR}/bridge.py", source)

    async def _pump(self, from_client: Any, to_client: Any, nursery: trio.Nursery) -> None:
        async for session_message in from_client:
            msg = json.loads(session_message.message.model_dump_json(by_alias=True, exclude_unset=True))
            if "method" in msg and "id" not in msg:  # a notification: only `initialized` is replayed
                if msg["method"] == "notifications/initialized":
                    self.handshake.append(msg)
                continue
            if "method" not in msg:  # a response of ours to a server request: nothing to send it to
                continue
            if msg["method"] == "initialize":
                self.handshake = [msg]
                nursery.start_soon(self._exchange, [msg], msg["id"], to_client)
            else:
                nursery.start_soon(self._exchange, [*self.handshake, msg], msg["id"], to_client)

    async def _exchange(self, messages: list[dict[str, Any]], msg_id: Any, to_client: Any) -> None:
        import mcp_types
        from mcp.shared.message import SessionMessage

        line = await self._run_bridge(messages)
        try:
            parsed = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            error = {"code": -32603, "message": f"the MCP server's answer is not valid JSON-RPC: {line[:200]!r}"}
            parsed = mcp_types.jsonrpc_message_adapter.validate_python(
                {"jsonrpc": "2.0", "id": msg_id, "error": error}, by_name=False
            )
        await to_client.send(SessionMessage(parsed))

    async def _run_bridge(self, messages: list[dict[str, Any]]) -> str:
        """The response line, or a JSON-RPC error line saying why there is none."""
        assert self.ctx.session is not None
        msg_id = messages[-1]["id"]
        budget = self.ctx.clip(self.server.timeout_seconds + 5.0)
        if budget is not None and budget <= 0.05:
            return _error_line(msg_id, "not run: the task's time budget is used up")
        env = {
            **self.server.env,
            "ACX_MCP_BRIDGE_TIMEOUT": str(self.server.timeout_seconds if budget is None else max(0.1, budget - 5.0)),
            "ACX_MCP_BRIDGE_STDERR": f"{BRIDGE_DIR}/{self.server.name}.stderr.log",
        }
        stdin = "".join(json.dumps(m) + "\n" for m in messages).encode("utf-8")
        argv = [self.python, f"{BRIDGE_DIR}/bridge.py", str(self.server.command), *self.server.args]
        res = await self.ctx.session.exec(argv, cwd=self.cwd, env=env, stdin=stdin, timeout=budget)
        if res.timed_out:
            return _error_line(msg_id, f"the MCP server did not answer within {self.server.timeout_seconds:g} s")
        if res.returncode != 0:
            # The bridge's reason is its first line; the server's stderr tail follows it.
            first, _, rest = (res.stderr or "").strip().partition("\n")
            reason = first or f"the stdio bridge exited with status {res.returncode}"
            if rest.strip():
                reason = f"{reason}\n{rest.strip()[-1000:]}"
            return _error_line(msg_id, reason)
        lines = [ln for ln in (res.stdout or "").splitlines() if ln.strip()]
        return lines[-1] if lines else _error_line(msg_id, "the MCP server gave no answer")


def _error_line(msg_id: Any, message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32603, "message": message}})


@dataclass
class _Tool:
    server: str
    name: str
    spec: dict[str, Any]


class _Server:
    """One connection, held open by its own task; a failure of it stays inside this object."""

    def __init__(self, config: McpServerConfig, transport: Any) -> None:
        self.config = config
        self.transport = transport
        self.client: Any = None
        self.failure: str | None = None
        self.tools: list[_Tool] = []
        self.dead = trio.Event()
        self.stop = trio.Event()
        self.scope = trio.CancelScope()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        with self.scope:
            started = await self._hold(task_status)
        if not started:
            task_status.started()

    async def _hold(self, task_status: Any) -> bool:
        started = False
        connecting = trio.CancelScope(deadline=trio.current_time() + CONNECT_SECONDS)
        try:
            mcp = _import_client()
            with connecting:  # the handshake and the tool listing; lifted once connected
                async with mcp.Client(
                    self.transport, mode="legacy", read_timeout_seconds=self.config.timeout_seconds
                ) as client:
                    self.tools = await self._list(client)
                    connecting.deadline = float("inf")
                    self.client = client
                    task_status.started()
                    started = True
                    await self.stop.wait()
            if started and not self.stop.is_set():
                self.failure = f"the connection to MCP server {self.config.name!r} closed"
            if connecting.cancelled_caught and not started:
                self.failure = (
                    f"MCP server {self.config.name!r} did not answer the handshake and list its tools "
                    f"within {CONNECT_SECONDS:g} s"
                )
        except Exception as exc:  # the server's failure is the attempt's issue, never the run's crash
            self.failure = f"MCP server {self.config.name!r} failed: {_describe(exc)}"
        finally:
            self.client = None
            self.dead.set()
        return started

    async def _list(self, client: Any) -> list[_Tool]:
        tools: list[_Tool] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                spec = {
                    "type": "function",
                    "function": {
                        "name": f"{self.config.name}{SEP}{tool.name}",
                        "description": f"[MCP server {self.config.name}] {tool.description or tool.name}",
                        "parameters": tool.input_schema or {"type": "object", "properties": {}},
                    },
                }
                tools.append(_Tool(self.config.name, tool.name, spec))
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(self, tool: str, args: dict[str, Any], timeout: float | None) -> McpResult:
        meta: dict[str, Any] = {"mcp_server": self.config.name, "mcp_tool": tool}
        if self.client is None:
            return McpResult(
                f"[error] the MCP server {self.config.name!r} is not available: {self.failure}",
                meta,
                self.failure or "not connected",
            )
        client = self.client
        outcome: list[Any] = []

        async def do(cancel: trio.CancelScope) -> None:
            try:
                outcome.append(await client.call_tool(tool, args))
            except Exception as exc:
                outcome.append(exc)
            cancel.cancel()

        async def watch(cancel: trio.CancelScope) -> None:
            await self.dead.wait()
            outcome.append(RuntimeError(f"the MCP server stopped: {self.failure}"))
            cancel.cancel()

        limit = self.config.timeout_seconds if timeout is None else min(timeout, self.config.timeout_seconds)
        with trio.move_on_after(limit):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(do, nursery.cancel_scope)
                nursery.start_soon(watch, nursery.cancel_scope)
        if not outcome:
            why = f"the MCP tool {tool!r} of server {self.config.name!r} did not answer within {limit:g} s"
            return McpResult(f"[error] {why}", {**meta, "timed_out": True}, why)
        first = outcome[0]
        if isinstance(first, Exception):
            why = f"the MCP tool {tool!r} of server {self.config.name!r} failed: {_describe(first)}"
            return McpResult(f"[error] {why}", {**meta, "mcp_error": True}, why)
        text, extra = _render(first)
        return McpResult(text, {**meta, **extra})


class McpHub:
    """The attempt's MCP servers: start them (:meth:`start`), offer their tools, relay calls."""

    def __init__(self, servers: list[McpServerConfig], ctx: HarnessContext, *, python: str, cwd: str | None) -> None:
        _import_client()  # McpUnavailable before anything starts
        self.ctx = ctx
        self.servers: dict[str, _Server] = {}
        self.failures: list[str] = []
        for config in servers:
            self.servers[config.name] = _Server(config, self._transport(config, python, cwd))

    def _transport(self, config: McpServerConfig, python: str, cwd: str | None) -> Any:
        transport = config.resolved_transport
        if transport == "stdio":
            return _BridgeTransport(self.ctx, config, python, cwd).open()
        _import_client()
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        assert config.url is not None
        if transport == "sse":
            return sse_client(config.url, headers=dict(config.headers) or None)
        client = create_mcp_http_client(headers=dict(config.headers) or None)
        return _owning(client, streamable_http_client(config.url, http_client=client))

    async def start(self, nursery: trio.Nursery) -> None:
        """Connect to every server (concurrently) and list their tools; failures are recorded."""
        async with trio.open_nursery() as starting:
            for server in self.servers.values():
                starting.start_soon(self._start_one, nursery, server)
        for server in self.servers.values():
            if server.failure is not None:
                self.failures.append(server.failure)

    @staticmethod
    async def _start_one(nursery: trio.Nursery, server: _Server) -> None:
        await nursery.start(server.run)

    def tool_specs(self) -> list[dict[str, Any]]:
        return [t.spec for s in self.servers.values() for t in s.tools]

    def tool_names(self) -> list[str]:
        return [t.spec["function"]["name"] for s in self.servers.values() for t in s.tools]

    def owns(self, name: str) -> bool:
        return name in self.tool_names()

    async def call(self, name: str, args: dict[str, Any]) -> McpResult:
        server_name, _, tool = name.partition(SEP)
        started = time.monotonic()
        result = await self.servers[server_name].call(tool, args, self.ctx.remaining())
        result.meta["mcp_ms"] = int((time.monotonic() - started) * 1000)
        return result

    async def aclose(self, grace: float = 5.0) -> None:
        """Disconnect every server; one that does not let go within ``grace`` seconds is cut off."""
        for server in self.servers.values():
            server.stop.set()
        with trio.move_on_after(grace):
            for server in self.servers.values():
                await server.dead.wait()
        for server in self.servers.values():
            server.scope.cancel()


@asynccontextmanager
async def _owning(http_client: Any, transport: Any) -> AsyncIterator[Any]:
    """The streamable-HTTP transport with the HTTP client it was given closed after it."""
    async with http_client, transport as streams:
        yield streams
