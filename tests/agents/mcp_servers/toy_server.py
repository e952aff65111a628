"""A real MCP server written with the `mcp` SDK, for the react MCP tests.

    python toy_server.py [stdio|streamable-http|sse] [PORT] [--garbage]

Tools: secret_word (the answer the tests' tasks need), add, image (a PNG), fail (an error
result), crash (the process exits mid-call), garbage (writes HTML instead of an answer), hang
(never answers). ``--garbage`` writes a line
that is not JSON-RPC on stdout before every answer (stdio only).
"""

from __future__ import annotations

import base64
import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ImageContent

server = MCPServer("toy")
WIRE = [1]
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@server.tool()
def secret_word() -> str:
    """The secret word of this task."""
    return "pelican-" + os.environ.get("TOY_SUFFIX", "7")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def image() -> ImageContent:
    """A one-pixel PNG."""
    return ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the toy tool failed on purpose")


@server.tool()
def crash() -> str:
    """The server process exits mid-call."""
    os._exit(7)


@server.tool()
def garbage() -> str:
    """Writes a line that is not JSON-RPC where the answer should be (stdio), then exits."""
    os.write(WIRE[0], b"<html>not json-rpc</html>\n")  # the SDK diverts fd 1; this is the real stdout
    os._exit(0)


@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return "late"


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    transport = args[0] if args else "stdio"
    if "--garbage" in sys.argv:
        sys.stdout.write("this is not json-rpc\n")
        sys.stdout.flush()
    if transport == "stdio":
        WIRE[0] = os.dup(1)
        server.run("stdio")
    else:
        server.run(transport, host="127.0.0.1", port=int(args[1]))  # type: ignore[call-overload]


if __name__ == "__main__":
    main()
