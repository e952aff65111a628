"""The shipped ``codex`` definition with the REAL Codex CLI (npm ``@openai/codex``, pinned) on
``host_process``, against acx's scripted fake model server through the run's gateway (issue 23).

The CLI is installed once per session into ``.pytest_cache/acx-npm/`` (scripts/test.sh does it
beforehand and sets ``ACX_REQUIRE_CODEX=1``: then a failed install fails the tests; without it
they are skipped loudly). ``ACX_CODEX_BIN`` names an installed ``codex`` instead.

The definition's command runs unchanged except that ``/logs/agent`` (where a sandbox keeps the
agent's logs) is a directory of the test's own: host_process runs on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from acx.cli import main
from acx.components.harnesses._agents import AGENTS, LOG_DIR
from acx.testing.fake_models import FakeModelServer, error, text, tool_call

pytestmark = pytest.mark.slow

CODEX_VERSION = "0.171.0"
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".pytest_cache" / "acx-npm" / f"codex-{CODEX_VERSION}"


def _require(reason: str) -> None:
    if os.environ.get("ACX_REQUIRE_CODEX") == "1":
        pytest.fail(f"{reason} (ACX_REQUIRE_CODEX=1)")
    pytest.skip(f"!!! real Codex CLI tests SKIPPED: {reason} !!!")


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    given = os.environ.get("ACX_CODEX_BIN")
    if given:
        return Path(given)
    binary = CACHE / "node_modules" / ".bin" / "codex"
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            _require("npm is not installed")
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            res = subprocess.run(
                [
                    str(npm),
                    "install",
                    "--prefix",
                    str(CACHE),
                    "--no-audit",
                    "--no-fund",
                    f"@openai/codex@{CODEX_VERSION}",
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            _require("npm install @openai/codex timed out after 600 s")
        if res.returncode != 0 or not binary.exists():
            _require(f"npm install @openai/codex@{CODEX_VERSION} failed: {res.stderr[-2000:]}")
    try:
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _require(f"{binary} --version failed: {exc}")
    if version.returncode != 0 or CODEX_VERSION not in version.stdout:
        # e.g. the platform binary (the optional dependency @openai/codex-linux-x64) did not come down
        _require(f"{binary} --version: {version.stdout} {version.stderr[-1000:]}")
    return binary


def _spec(tmp_path: Path, base_url: str, codex: Path) -> Path:
    logs = tmp_path / "agent-logs"
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "What is 6*7?", "answer": "42"}) + "\n")
    # The shipped command, with the logs directory moved and codex on PATH.
    command = f"export PATH={codex.parent}:$PATH CODEX_HOME={logs}/codex-home; " + AGENTS["codex"].command.replace(
        LOG_DIR, str(logs)
    )
    harness = {
        "id": "installed_agent",
        "agent": "codex",
        "install": f"{codex} --version",
        "command": command,
        "logs": [str(logs / "codex.jsonl"), str(logs / "codex-last-message.txt")],
        "answer_file": str(logs / "codex-last-message.txt"),
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
    execution: {{run_timeout_seconds: 120, max_retries: 0}}
"""
    )
    return spec


def _run(spec: Path, monkeypatch) -> dict:
    monkeypatch.chdir(spec.parent)
    main(["run", str(spec)])
    return json.loads(next((spec.parent / "results").rglob("attempt-1/result.json")).read_text())


def _calls(tmp_path: Path) -> list[dict]:
    data = json.loads(next((tmp_path / "results").rglob("attempt-1/model_calls.json")).read_text())
    return data["calls"] if isinstance(data, dict) else data


def test_codex_answers_through_the_gateway(codex_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """(a) codex runs a tool call the script asks for, then answers; the answer is its -o file.
    (c) Its only way to the model was the gateway: the fake server saw exactly the two calls (no
    WebSocket attempt, no retries), both POST /v1/responses, streamed, with the real key."""
    marker = tmp_path / "ran.txt"
    script = [
        tool_call("exec_command", {"cmd": f"echo tool-ran > {marker}"}, call_id="call_1"),
        text("42", usage=(30, 2)),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(_spec(tmp_path, srv.base_url, codex_bin), monkeypatch)
    out = capsys.readouterr().out
    assert result["issues"] == [], result["issues"]
    assert result["final_answer"] == "42"
    assert "correct.avg@1 = 1.000" in out, out
    assert marker.read_text().strip() == "tool-ran"  # codex assembled the streamed function call
    logs = result["telemetry"]["agent_logs"]
    assert logs[str(tmp_path / "agent-logs" / "codex-last-message.txt")].strip() == "42"
    events = [json.loads(line) for line in logs[str(tmp_path / "agent-logs" / "codex.jsonl")].splitlines()]
    assert events[-1]["type"] == "turn.completed", events
    assert not any("WebSocket" in json.dumps(e) or "Reconnecting" in json.dumps(e) for e in events), events
    # The fake server saw two POSTs to /v1/responses and nothing else (no GET/upgrade is recorded as
    # a request there, so also check the gateway's records below).
    assert [(r.method, r.path) for r in srv.requests] == [("POST", "/v1/responses")] * 2
    assert all(r.body["stream"] is True for r in srv.requests)
    second_input = json.dumps(srv.requests[1].body["input"])
    assert "call_1" in second_input and "function_call_output" in second_input
    calls = _calls(tmp_path)
    assert len(calls) == 2 and all(c["via"] == "http" and c["status"] == 200 for c in calls), calls
    assert result["telemetry"]["model_usage"]["model_calls"] == 2


def test_codex_failure_is_an_error_not_completed(codex_bin: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """(b) The model refuses (a 400 the gateway passes through): codex exits non-zero, and that
    exit status survives the tee into the log — the attempt has an agent_exit_nonzero error."""
    with FakeModelServer([error(400, "scripted refusal")], default=None) as srv:
        result = _run(_spec(tmp_path, srv.base_url, codex_bin), monkeypatch)
    capsys.readouterr()
    codes = [(i["severity"], i["code"]) for i in result["issues"]]
    assert ("error", "agent_exit_nonzero") in codes, result["issues"]
    assert result["telemetry"]["returncode"] != 0
    assert 1 <= len(srv.requests) <= 5 and all(r.path == "/v1/responses" for r in srv.requests)
