"""`react` with real MCP servers (written with the `mcp` SDK, tests/agents/mcp_servers) on
host_process, a scripted model on loopback: the servers' tools are listed at start and offered as
<server>__<tool>, calls are relayed and recorded in the trajectory with their timing, HTTP
servers (streamable-http, sse) and stdio servers run as sandbox commands through the bridge, and a
server that fails, crashes, hangs or writes garbage gives the model a tool error and the attempt
an issue while the run goes on. Contracts M4, M6 (tool calls in the trajectory), T1 (budgets)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acx.testing.fake_models import FakeModelServer, Step, tool_call

pytest.importorskip("mcp")

HERE = Path(__file__).parent
TOY = HERE / "mcp_servers" / "toy_server.py"
KEY = "sk-react-mcp-5521"


def acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=240,
    )


def write_spec(tmp_path: Path, srv: FakeModelServer, servers: list[dict[str, Any]], extra: str = "") -> Path:
    rows = [{"id": "q0", "question": "What is the secret word?", "answer": "pelican-7"}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    harness = {"id": "react", "mcp_servers": servers, **json.loads(extra or "{}")}
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: r
task_concurrency: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: r
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {{id: m1, base_url: "{srv.base_url}", api_key: "${{MKEY}}"}}
    environment: {{id: host_process}}
"""
    )
    return spec


def run_result(tmp_path: Path) -> dict[str, Any]:
    (path,) = sorted((tmp_path / "results" / "r").rglob("attempt-1/result.json"))
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def stdio(name: str = "toy", *args: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": sys.executable, "args": [str(TOY), *args], **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(params=["streamable-http", "sse"])
def http_server(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(TOY), request.param, str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        path = "/mcp" if request.param == "streamable-http" else "/sse"
        yield {"name": "web", "transport": request.param, "url": f"http://127.0.0.1:{port}{path}"}
    finally:
        proc.terminate()
        proc.wait(10)


def test_react_solves_a_task_with_a_stdio_mcp_tool(tmp_path: Path) -> None:  # contracts M4, M6
    script = [
        tool_call("toy__secret_word", {}, call_id="c1"),
        tool_call("toy__add", {"a": 2, "b": 40}, call_id="c2"),
        tool_call("submit", {"answer": "pelican-7"}, call_id="c3"),
    ]
    with FakeModelServer(script, default=None) as srv:
        res = acx("run", str(write_spec(tmp_path, srv, [stdio()])), cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "ignored" not in res.stderr
    r = run_result(tmp_path)
    assert r["final_answer"] == "pelican-7" and r["metrics"]["correct"] is True, r
    assert r["issues"] == [], r["issues"]
    offered = [t["function"]["name"] for t in srv.requests[0].body["tools"]]
    assert offered[:4] == ["bash", "python", "edit", "submit"]
    assert {"toy__secret_word", "toy__add", "toy__crash", "toy__hang"} <= set(offered)
    steps = r["trajectory"]["steps"]
    first, second = steps[0]["observation"][0], steps[1]["observation"][0]
    assert first["content"] == "pelican-7" and first["tool"] == "toy__secret_word"
    assert first["mcp_server"] == "toy" and first["mcp_tool"] == "secret_word"
    assert isinstance(first["mcp_ms"], int) and first["mcp_ms"] > 0  # the call's timing
    assert steps[0]["metric"]["env_action_ms"] >= first["mcp_ms"]
    assert second["content"] == "42"
    assert srv.requests[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "pelican-7"}
    assert r["telemetry"]["mcp"]["servers"]["toy"] >= 6


def test_react_uses_http_mcp_servers(tmp_path: Path, http_server: dict[str, Any]) -> None:
    script = [
        tool_call("web__secret_word", {}, call_id="c1"),
        tool_call("web__image", {}, call_id="c2"),
        tool_call("submit", {"answer": "pelican-7"}, call_id="c3"),
    ]
    with FakeModelServer(script, default=None) as srv:
        res = acx("run", str(write_spec(tmp_path, srv, [http_server])), cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    r = run_result(tmp_path)
    assert r["metrics"]["correct"] is True and r["issues"] == [], r
    steps = r["trajectory"]["steps"]
    assert steps[0]["observation"][0]["content"] == "pelican-7"
    image = steps[1]["observation"][0]
    assert image["content"].startswith("[image image/png, ") and "sha256:" in image["content"]
    assert image["media"][0]["mime_type"] == "image/png"  # the image is a reference, not inlined


def test_failing_servers_give_tool_errors_and_issues_and_the_run_goes_on(tmp_path: Path) -> None:
    both = Step(
        "message",
        tool_calls=(
            ("f1", "toy__fail", {}),
            ("f2", "toy__crash", {}),
            ("f3", "toy__garbage", {}),
            ("f4", "slow__hang", {}),
        ),
        finish_reason="tool_calls",
    )
    script = [both, tool_call("toy__secret_word", {}, call_id="ok"), tool_call("submit", {"answer": "pelican-7"})]
    servers = [stdio(), stdio("slow", timeout_seconds=10), {"name": "gone", "command": "/nonexistent/mcp-server"}]
    with FakeModelServer(script, default=None) as srv:
        res = acx("run", str(write_spec(tmp_path, srv, servers)), cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    r = run_result(tmp_path)
    assert r["status"] == "completed" and r["metrics"]["correct"] is True, r
    obs = {o["source_call_id"]: o["content"] for o in r["trajectory"]["steps"][0]["observation"]}
    texts = [obs["f1"], obs["f2"], obs["f3"], obs["f4"]]
    assert texts[0].startswith("[error]") and "fail" in texts[0]  # an error result of the tool
    assert texts[1].startswith("[error]") and "exited" in texts[1]
    assert texts[2].startswith("[error]") and "not JSON" in texts[2]
    assert texts[3].startswith("[error]") and "did not answer within 10 s" in texts[3]
    issues = [(i["code"], i["severity"]) for i in r["issues"]]
    assert ("mcp_server_failed", "warning") in issues  # `gone` never started
    assert issues.count(("mcp_tool_failed", "warning")) == 3  # crash, garbage, hang (fail is the tool's own error)
    assert "gone" in " ".join(i["message"] for i in r["issues"])
    assert r["trajectory"]["steps"][1]["observation"][0]["content"] == "pelican-7"  # the server still answers
    assert r["telemetry"]["mcp"]["failures"] == 4 and r["telemetry"]["mcp"]["servers"]["gone"] == 0


def test_mcp_server_config_errors_are_located(tmp_path: Path) -> None:
    with FakeModelServer([], default=None) as srv:
        for servers, needle in [
            ([{"name": "a", "url": "http://x/mcp", "command": "y"}], "not a url or headers"),
            ([{"name": "a"}], "needs a command"),
            ([{"name": "bad name", "command": "x"}], "mcp_servers"),
            ([stdio("a"), stdio("a")], "two MCP servers are named 'a'"),
            ([{"name": "a", "transport": "sse", "url": "ftp://x"}], "http:// or https://"),
        ]:
            res = acx("compile", str(write_spec(tmp_path, srv, servers)), "--dry-run", cwd=tmp_path)
            assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
            assert needle in res.stderr and "run.yaml:" in res.stderr, res.stderr


def test_explain_names_where_mcp_servers_came_from(tmp_path: Path) -> None:
    with FakeModelServer([], default=None) as srv:
        spec = write_spec(tmp_path, srv, [stdio()])
        res = acx("explain", str(spec), "r", "harness.params.mcp_servers", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "run.yaml" in res.stdout and "toy" in res.stdout, res.stdout
