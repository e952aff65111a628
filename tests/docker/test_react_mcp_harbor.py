"""A Harbor task whose tool is an MCP server, on Docker at `no-network`: the task declares
`[[environment.mcp_servers]]` (a published server package from PyPI, `mcp-server-time`, installed
in the task image from wheels copied in: docker builds have no index), `react` lists its tools,
a scripted model calls one and solves the task (reward 1). The stdio server runs inside the
container as a sandbox command, so the sandbox needs no network; no "ignored" warning is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from acx.testing.fake_models import FakeModelServer, tool_call

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".pytest_cache" / "acx-pypi" / "mcp-server-time-2026.10.19"
KEY = "sk-react-mcp-docker-3301"

TASK_TOML = """schema_version = "1.4"

[agent]
timeout_sec = 180.0
network_mode = "no-network"

[verifier]
timeout_sec = 60.0
network_mode = "no-network"

[environment]
workdir = "/app"

[[environment.mcp_servers]]
name = "time"
transport = "stdio"
command = "python3"
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
"""

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/tokyo.txt 2>/dev/null)" = "21:00" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def _wheels() -> Path:
    """The server package and its dependencies as wheels (fetched once, like scripts/test.sh does)."""
    if not any(WHEELS.glob("mcp_server_time-*.whl")):
        WHEELS.mkdir(parents=True, exist_ok=True)
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "mcp-server-time==2026.10.19", "-d", str(WHEELS)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if got.returncode != 0:
            reason = f"cannot fetch mcp-server-time wheels: {got.stderr[-300:]}"
            if os.environ.get("ACX_REQUIRE_AGENTS") == "1":  # scripts/test.sh: a missing package fails
                pytest.fail(reason)
            pytest.skip(f"!!! {reason} !!!")
    return WHEELS


def _task(root: Path) -> Path:
    task = root / "tasks" / "tokyo-time"
    (task / "environment" / "site").mkdir(parents=True)
    for wheel in _wheels().glob("*.whl"):  # no pip in the image: a wheel unpacked is installed
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(task / "environment" / "site")
    (task / "environment" / "Dockerfile").write_text(
        "FROM acx-test/bookworm:latest\nCOPY site /opt/mcp-site\nENV PYTHONPATH=/opt/mcp-site\nWORKDIR /app\n"
    )
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text(
        "It is 12:00 in UTC. Write the time in Asia/Tokyo (HH:MM) to /app/tokyo.txt. Use the time tools.\n"
    )
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho 21:00 > /app/tokyo.txt\n")
    return task.parent


def _run(tmp_path: Path, srv: FakeModelServer, tasks: Path, harness: str) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: m
task_concurrency: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: m
    benchmark: {{id: harbor, path: "{tasks}"}}
    harness: {harness}
    model: {{id: m1, base_url: "{srv.base_url}", api_key: "${{MKEY}}"}}
    environment: {{id: docker}}
"""
    )
    return subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--progress", "plain"],
        cwd=tmp_path,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_react_solves_a_harbor_task_through_its_mcp_server(tmp_path: Path) -> None:  # contracts H1, M4, P6
    tasks = _task(tmp_path)
    args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    script = [
        tool_call("time__convert_time", args, call_id="t1"),
        tool_call("bash", {"command": "echo 21:00 > /app/tokyo.txt"}, call_id="t2"),
        tool_call("submit", {"answer": "done"}, call_id="t3"),
    ]
    with FakeModelServer(script, default=None) as srv:
        proc = _run(tmp_path, srv, tasks, "{id: react}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mcp_servers" not in proc.stderr and "ignored" not in proc.stderr, proc.stderr
    (path,) = (tmp_path / "results" / "m").glob("*/details/*/*/attempt-1/result.json")
    result = json.loads(path.read_text())
    assert result["metrics"]["score"] == 1.0, result["issues"]
    assert not [i for i in result["issues"] if i["code"] in ("task_declaration_ignored", "mcp_server_failed")]
    offered = {t["function"]["name"] for t in srv.requests[0].body["tools"]}
    assert {"time__get_current_time", "time__convert_time"} <= offered
    obs = result["trajectory"]["steps"][0]["observation"][0]
    assert obs["mcp_server"] == "time" and "T21:00:00+09:00" in obs["content"], obs
    assert "network access is restricted (no-network" in srv.requests[0].body["messages"][1]["content"]


def test_a_harness_without_mcp_support_says_the_servers_were_not_given(tmp_path: Path) -> None:  # contract H6
    tasks = _task(tmp_path)
    with FakeModelServer([], default=None) as srv:
        proc = _run(tmp_path, srv, tasks, '{id: command, command: "echo 21:00 > /app/tokyo.txt"}')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = (tmp_path / "results" / "m").glob("*/details/*/*/attempt-1/result.json")
    result = json.loads(path.read_text())
    assert result["metrics"]["score"] == 1.0, result["issues"]
    (warning,) = [i for i in result["issues"] if i["code"] == "task_declaration_ignored"]
    assert warning["severity"] == "warning" and "MCP servers (time)" in warning["message"], warning
    assert "command harness has no MCP support" in warning["message"], warning
