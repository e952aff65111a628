"""Benchmark: `acx lsp` latency on a generated 5,000-line .acx spec, against `acx check`.

Starts ``python3 -m acx lsp --debounce-ms 0`` and drives it over stdio with plain JSON-RPC framing:

* diagnostics: an edit (``didChange``, a different value on a middle line each time) until the
  ``publishDiagnostics`` for that version arrives;
* completion: ``textDocument/completion`` at positions spread over the file.

In the same run it times ``acx check FILE`` (the command a user would otherwise run, a fresh
process each time) and the check itself in-process (``check_file``, warm), and prints p50/p99 of
each and the ratios. The target: an incremental update costs no more than a full ``acx check``.

    python3 bench/lsp_latency.py [--lines 5000] [--edits 30] [--completions 50] [--checks 10]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

RUN = """\
  run "r{i}" {{
    harness none {{}}
    benchmark exact_match {{
      dataset = qa_dataset
    }}
    model {{
      id = "m{i}"
    }}
    execution {{
      run_timeout = 10m
      max_retries = 1
    }}
  }}
"""


def big_spec(lines: int) -> str:
    out = ['import "common.acx"', "", "orchestration big {", "  task_concurrency = 8", ""]
    i = 0
    while len(out) + RUN.count("\n") + 1 <= lines:
        out += RUN.format(i=i).splitlines()
        i += 1
    out.append("}")
    return "\n".join(out) + "\n"


class Client:
    """A minimal LSP client: Content-Length framing over the server's pipes, a reader thread."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while True:
            length = 0
            while (line := stream.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line:
                return
            self.messages.put(json.loads(stream.read(length)))

    def send(self, method: str, params: Any, *, request: bool = False) -> int | None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        ident = None
        if request:
            self.next_id += 1
            ident = msg["id"] = self.next_id
        body = json.dumps(msg).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()
        return ident

    def wait(self, match: Any, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            if match(msg):
                return msg

    def request(self, method: str, params: Any) -> dict[str, Any]:
        ident = self.send(method, params, request=True)
        return self.wait(lambda m: m.get("id") == ident and "method" not in m)

    def close(self) -> None:
        self.request("shutdown", None)
        self.send("exit", None)
        self.proc.wait(timeout=10)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(name: str, values: list[float]) -> str:
    p50, p99 = _pct(values, 0.5) * 1000, _pct(values, 0.99) * 1000
    return f"{name:<40} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms   (n={len(values)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=5000)
    ap.add_argument("--edits", type=int, default=30)
    ap.add_argument("--completions", type=int, default=50)
    ap.add_argument("--checks", type=int, default=10)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    sys.path.insert(0, str(SRC))

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "big.acx"
        text = big_spec(args.lines)
        spec.write_text(text)
        (Path(tmp) / "common.acx").write_text('let qa_dataset = "data/qa.jsonl"\n')
        uri = spec.as_uri()
        lines = text.splitlines()
        print(f"spec: {len(lines)} lines, {len(text) // 1024} KiB")

        # -- baseline: `acx check` (fresh process) and the check in-process (warm) ---------------
        cli: list[float] = []
        for _ in range(args.checks):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "acx", "check", str(spec)], env=env, capture_output=True, check=True)
            cli.append(time.perf_counter() - start)
        from acx.cli._lang import check_file

        check_file(str(spec))
        target = next(i for i, line in enumerate(lines) if i > len(lines) // 2 and "max_retries = 1" in line)
        changed = Path(tmp) / "changed.acx"
        warm: list[float] = []
        for n in range(args.checks):
            edited = list(lines)
            edited[target] = f"      max_retries = {n + 100}"  # a new text each time: no cached parse
            changed.write_text("\n".join(edited) + "\n")
            start = time.perf_counter()
            check_file(str(changed))
            warm.append(time.perf_counter() - start)

        # -- the server --------------------------------------------------------------------------
        client = Client([sys.executable, "-m", "acx", "lsp", "--debounce-ms", "0"], env)
        client.request("initialize", {"processId": os.getpid(), "rootUri": Path(tmp).as_uri(), "capabilities": {}})
        client.send("initialized", {})
        client.send(
            "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "acx", "version": 1, "text": text}}
        )

        def published(version: int) -> Any:
            return lambda m: (
                m.get("method") == "textDocument/publishDiagnostics"
                and m["params"]["uri"] == uri
                and m["params"].get("version") == version
            )

        client.wait(published(1))
        diag: list[float] = []
        for n in range(args.edits):
            version = n + 2
            edited = list(lines)
            edited[target] = f"      max_retries = {n + 2}"
            start = time.perf_counter()
            client.send(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": uri, "version": version},
                    "contentChanges": [{"text": "\n".join(edited) + "\n"}],
                },
            )
            msg = client.wait(published(version))
            diag.append(time.perf_counter() - start)
            assert msg["params"]["diagnostics"] == [], msg["params"]["diagnostics"][:1]
        comp: list[float] = []
        key_lines = [i for i, line in enumerate(lines) if line.strip() == "max_retries = 1"]
        for n in range(args.completions):
            line = key_lines[(n * 7919) % len(key_lines)]
            start = time.perf_counter()
            reply = client.request(
                "textDocument/completion",
                {"textDocument": {"uri": uri}, "position": {"line": line, "character": 6}},
            )
            comp.append(time.perf_counter() - start)
            items = reply["result"]["items"] if isinstance(reply["result"], dict) else reply["result"]
            assert any(i["label"] == "max_retries" for i in items)
        client.close()

    print(_row("acx check FILE (fresh process)", cli))
    print(_row("check_file in-process (warm, edited)", warm))
    print(_row("lsp: edit -> diagnostics", diag))
    print(_row("lsp: completion", comp))
    p50 = _pct(diag, 0.5)
    print(f"ratio diagnostics p50 / acx check p50:          {p50 / _pct(cli, 0.5):.2f}  (target <= 1)")
    print(f"ratio diagnostics p50 / in-process check p50:   {p50 / _pct(warm, 0.5):.2f}")
    print(f"ratio completion p50 / acx check p50:           {_pct(comp, 0.5) / _pct(cli, 0.5):.2f}")
    return 0 if p50 <= _pct(cli, 0.5) else 1


if __name__ == "__main__":
    sys.exit(main())
