"""The stdio MCP bridge: uploaded into the sandbox and run there with its python, stdlib only.

A driver session runs a command to completion (``exec`` with stdin, no streaming), so ``react``
talks to a stdio MCP server inside the sandbox one exchange at a time: each exchange starts the
server (``argv[1:]``), replays the session's handshake, sends one request and prints the server's
answer to it, then stops the server. stdin holds the JSON-RPC lines to send, in order; a line that
is a request (``id`` and ``method``) waits for its response before the next is sent. The last
response goes to stdout as one JSON line.

Exit status: 0 answered; 3 the server exited (or closed stdout) before answering; 4 it wrote a
line that is not JSON-RPC; 5 it did not answer within ``ACX_MCP_BRIDGE_TIMEOUT`` seconds. The
reason is on stderr (with the server's own stderr tail), for the host to turn into a tool error.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Any, NoReturn

BUFFER = 1 << 16


def _fail(code: int, message: str, proc: Any, err_path: str) -> NoReturn:
    tail = ""
    try:
        with open(err_path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 2000))
            tail = fh.read().decode("utf-8", "replace").strip()
    except OSError:
        pass
    _stop(proc)
    sys.stderr.write(message + (f"\n[server stderr]\n{tail}" if tail else "") + "\n")
    sys.exit(code)


def _stop(proc: Any) -> None:
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _Lines:
    """Lines of the server's stdout, each read with the exchange's deadline."""

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd = fd
        self.deadline = deadline
        self.buf = b""

    def next(self) -> tuple[bytes | None, str | None]:
        while b"\n" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                return None, "timeout"
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None, "timeout"
            chunk = os.read(self.fd, BUFFER)
            if not chunk:
                return None, "eof"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line, None


def _await_response(lines: _Lines, msg_id: Any, proc: Any, err_path: str) -> bytes:
    while True:
        raw, why = lines.next()
        if why == "timeout":
            _fail(5, "the MCP server did not answer in time", proc, err_path)
        if why == "eof":
            _fail(3, f"the MCP server exited (status {proc.poll()}) before answering", proc, err_path)
        assert raw is not None
        if not raw.strip():
            continue
        try:
            msg = json.loads(raw)
        except ValueError:
            _fail(4, f"the MCP server wrote a line that is not JSON: {raw[:200]!r}", proc, err_path)
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            _fail(4, f"the MCP server wrote a line that is not JSON-RPC 2.0: {raw[:200]!r}", proc, err_path)
        if "method" in msg and "id" in msg:  # a request of the server's (sampling, roots): not offered
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "not supported"}}
            proc.stdin.write((json.dumps(reply) + "\n").encode())
            proc.stdin.flush()
            continue
        if "method" in msg:  # a notification (log, progress)
            continue
        if msg.get("id") == msg_id:
            return raw


def main() -> None:
    argv = sys.argv[1:]
    timeout = float(os.environ.get("ACX_MCP_BRIDGE_TIMEOUT", "60"))
    err_path = os.environ.get("ACX_MCP_BRIDGE_STDERR", "/tmp/acx-mcp-stderr.log")
    messages = [json.loads(line) for line in sys.stdin.read().splitlines() if line.strip()]
    with open(err_path, "wb") as err:
        try:
            proc: Any = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        except OSError as exc:
            sys.stderr.write(f"cannot start the MCP server {argv[0]!r}: {exc}\n")
            sys.exit(3)
    lines = _Lines(proc.stdout.fileno(), time.monotonic() + timeout)
    last: bytes | None = None
    for msg in messages:
        try:
            proc.stdin.write((json.dumps(msg) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            _fail(3, f"the MCP server exited (status {proc.poll()}) before reading its input", proc, err_path)
        if "id" in msg and "method" in msg:
            last = _await_response(lines, msg["id"], proc, err_path)
    _stop(proc)
    if last is not None:
        sys.stdout.write(last.decode("utf-8", "replace") + "\n")


if __name__ == "__main__":
    main()
