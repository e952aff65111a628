"""The ``terminus`` harness (Terminus 2, Harbor's reference agent) on Docker, offline, against a
scripted model server on loopback: replies in Terminus's JSON format type keystrokes into a tmux
terminal in the task's container and solve the Harbor example task (reward 1); a script that
declares the task complete without doing it scores 0 cleanly; a model error is a clean
``model_failed``; a sandbox without tmux is a FATAL ``harness_setup_failed`` saying why. The model
is called from the host through the run's gateway: the task stays ``no-network``.

The task is examples/harbor/hello-workdir with an image that has tmux (Debian's package, built
from the local test image; Harbor's Terminus installs tmux the same way)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from acx.testing.fake_models import FakeModelServer, Step, error, text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "harbor" / "hello-workdir"
KEY = "sk-terminus-docker-7731"
TMUX_DOCKERFILE = """FROM acx-test/bookworm:latest
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tmux \\
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
"""


def reply(commands: list[tuple[str, float]], complete: bool = False, analysis: str = "a", plan: str = "p") -> Step:
    body = {
        "analysis": analysis,
        "plan": plan,
        "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
        "task_complete": complete,
    }
    return text(json.dumps(body), usage=(50, 20))


def _task(tmp_path: Path, tmux: bool = True) -> Path:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLE, tasks / EXAMPLE.name)
    if tmux:
        (tasks / EXAMPLE.name / "environment" / "Dockerfile").write_text(TMUX_DOCKERFILE)
    return tasks


def _run(tmp_path: Path, srv: FakeModelServer, tasks: Path, exit_code: int = 0) -> dict[str, Any]:
    spec = tmp_path / "t2.yaml"
    spec.write_text(
        f"""version: 1
name: t2
runtime: {{results_dir: results, progress: none}}
requests:
  - name: t2
    benchmark: {{id: harbor, path: "{tasks}"}}
    harness: {{id: terminus, max_turns: 8}}
    model: {{id: m1, base_url: "{srv.base_url}", api_key: "${{MKEY}}"}}
    environment: {{id: docker}}
    execution: {{max_retries: 0}}
"""
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--progress", "plain"],
        cwd=tmp_path,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    (path,) = (tmp_path / "results" / "t2").glob("*/details/*/*/attempt-1/result.json")
    for f in (tmp_path / "results").rglob("*"):
        if f.is_file():
            assert KEY not in f.read_bytes().decode("utf-8", "replace"), f
    return json.loads(path.read_text())


def test_terminus_solves_the_harbor_task(tmp_path: Path) -> None:  # contracts H1, M4
    script = [
        # A typo first: the model sees the shell's complaint as new output.
        reply([("pwd; ech0 probe\n", 0.5)]),
        reply([("printf '%s, world!\\n' \"$GREETING\" > hello.txt\n", 0.3), ("cat hello.txt\n", 0.3)]),
        reply([], complete=True),
        reply([], complete=True),  # confirmed
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, srv, _task(tmp_path))
    assert result["metrics"]["score"] == 1.0, result["issues"]
    assert [i for i in result["issues"] if i["severity"] != "warning"] == [], result["issues"]
    t2 = result["telemetry"]["terminus"]
    assert t2 == {
        "turns": 4,
        "commands": 3,
        "parse_errors": 0,
        "stop_reason": "completed",
        "summarization_count": 0,
        "summarizations": [],
    }, t2
    assert len(srv.requests) == 4 and all(r.path == "/v1/chat/completions" for r in srv.requests)
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in srv.requests)
    msgs = [r.body["messages"] for r in srv.requests]
    first = msgs[0][0]["content"]
    assert msgs[0][0]["role"] == "user" and "Create the file `hello.txt`" in first and '"keystrokes"' in first
    assert "network access is restricted (no-network" in first
    # Observations are what the terminal printed: the workdir, the typo's error, the file.
    assert "/app" in msgs[1][-1]["content"] and "ech0: command not found" in msgs[1][-1]["content"]
    assert "Hello, world!" in msgs[2][-1]["content"]
    assert "reply again with" in msgs[3][-1]["content"]  # the completion is asked to be confirmed
    assert "Hello, world!" in result["telemetry"]["agent_logs"]["terminal"]
    assert len(result["trajectory"]["steps"]) == 4
    # The agent compatibility suite's cases (a) and (d) for Terminus (issue 23): the loop runs on
    # the host, so the sandbox stays no-network with no gateway inside it; every call the fake
    # server saw is one the gateway recorded, with its usage.
    (calls_file,) = (tmp_path / "results" / "t2").glob("*/details/*/*/attempt-1/model_calls.json")
    calls = json.loads(calls_file.read_text())
    calls = calls["calls"] if isinstance(calls, dict) else calls
    assert len(calls) == len(srv.requests) and all(c["status"] == 200 for c in calls), calls
    usage = result["telemetry"]["model_usage"]
    assert usage["model_calls"] == 4 and usage["prompt_tokens"] == 200 and usage["completion_tokens"] == 80, usage
    plans = subprocess.run(
        [sys.executable, "-m", "acx", "compile", "--plans", str(tmp_path / "t2.yaml")],
        cwd=tmp_path,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "run no-network" in plans.stdout and "allowlist" not in plans.stdout, plans.stdout


def test_terminus_gives_up_cleanly(tmp_path: Path) -> None:
    """Complete twice without doing anything: reward 0, no error (a valid 0). Then a reply that is
    not JSON is answered with what is wrong, not run."""
    script = [
        text("I am not sure what to do."),
        reply([], complete=True),
        reply([], complete=True),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, srv, _task(tmp_path))
    assert result["metrics"]["score"] == 0.0
    assert [i for i in result["issues"] if i["severity"] != "warning"] == [], result["issues"]
    assert result["telemetry"]["terminus"]["parse_errors"] == 1
    assert result["telemetry"]["terminus"]["stop_reason"] == "completed"
    assert "no JSON object found" in srv.requests[1].body["messages"][-1]["content"]


def test_terminus_model_error_and_missing_tmux(tmp_path: Path) -> None:
    with FakeModelServer([error(400, "scripted refusal")], default=None) as srv:
        result = _run(tmp_path / "err", srv, _task(tmp_path / "err"))
    codes = {i["code"]: i for i in result["issues"]}
    assert codes["model_failed"]["severity"] == "error" and "scripted refusal" in codes["model_failed"]["message"]
    assert result["telemetry"]["terminus"]["stop_reason"] == "model_failed"
    # The plain test image has no tmux: the attempt stops before any model call, saying why.
    with FakeModelServer([], default=None) as srv:
        # A FATAL issue invalidates the run's score: exit 1.
        result = _run(tmp_path / "bare", srv, _task(tmp_path / "bare", tmux=False), exit_code=1)
    codes = {i["code"]: i for i in result["issues"]}
    assert codes["harness_setup_failed"]["severity"] == "fatal", result["issues"]
    assert "no tmux" in codes["harness_setup_failed"]["message"]
    assert srv.requests == []
