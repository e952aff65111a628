"""The ``terminus`` harness on ``host_process`` (the host's tmux) with scripted replies through the
run's gateway: keystrokes longer than one tmux send-keys command (a paste buffer), a tmux key
name (C-c interrupting a running command), the turn limit, the run budget and the shell exiting
(issue 23 item 3). The Harbor end to end is tests/docker/test_terminus_harbor.py."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from acx.cli import main
from acx.testing.fake_models import FakeModelServer, Step, text

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="!!! no tmux on this host !!!")


def reply(*commands: tuple[str, float], complete: bool = False) -> Step:
    body = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": k, "duration": d} for k, d in commands]}
    return text(json.dumps({**body, "task_complete": complete}))


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, harness: dict[str, Any], budget: float = 60) -> dict:
    (tmp_path / "data.jsonl").write_text(
        json.dumps({"id": "q0", "question": "Work in the terminal.", "answer": "x"}) + "\n"
    )
    # The terminal runs `bash --login` as you on host_process: a HOME of its own keeps the host's
    # shell start-up files (which may be slow) out of it.
    (tmp_path / "home").mkdir(exist_ok=True)
    env = {"HOME": str(tmp_path / "home")}
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: t
runtime: {{results_dir: results, progress: none}}
requests:
  - name: t
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps({"id": "terminus", "cwd": str(tmp_path), **harness})}
    model: {{id: m, base_url: "{srv.base_url}"}}
    environment: {{id: host_process, run_env_variables: {json.dumps(env)}}}
    execution: {{run_timeout_seconds: {budget}, max_retries: 0}}
"""
    )
    monkeypatch.chdir(tmp_path)
    main(["run", str(spec)])
    return json.loads(next((tmp_path / "results").rglob("attempt-1/result.json")).read_text())


def test_long_keystrokes_special_keys_and_the_turn_limit(tmp_path: Path, monkeypatch, capsys) -> None:
    started = time.time()
    long = "y" * 9000  # over the send-keys size: typed through a paste buffer
    script = [
        reply(("sleep 100\n", 0.3), ("C-c", 0.3), ("echo interrupted > int.txt\n", 0.3)),
        reply((f"echo {long} > long.txt\n", 1.0)),
        reply(("wc -c long.txt\n", 0.3)),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, {"max_turns": 3})
    capsys.readouterr()
    assert (tmp_path / "int.txt").read_text().strip() == "interrupted"  # C-c stopped the sleep
    assert (tmp_path / "long.txt").read_text().strip() == long
    assert "9001 long.txt" in result["telemetry"]["agent_logs"]["terminal"]  # the last command's output
    codes = {i["code"]: i for i in result["issues"]}
    assert "max_turns = 3" in codes["limit_exceeded"]["message"]
    assert result["telemetry"]["terminus"]["stop_reason"] == "max_turns"
    assert result["final_answer"] is None
    # The terminal's tmux server is gone, its socket file too.
    assert not list(Path(f"/tmp/tmux-{os.getuid()}").glob("acx-terminus-*")) or all(
        p.stat().st_mtime < started for p in Path(f"/tmp/tmux-{os.getuid()}").glob("acx-terminus-*")
    )


def test_the_run_budget_stops_a_long_wait(tmp_path: Path, monkeypatch, capsys) -> None:
    started = time.monotonic()
    with FakeModelServer([reply(("sleep 600\n", 60))], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, {}, budget=3)
    capsys.readouterr()
    assert time.monotonic() - started < 60  # bounded by the 3 s budget, not the 60 s wait (10x room)
    codes = {i["code"] for i in result["issues"]}
    assert "run_timeout" in codes, result["issues"]
    assert len(srv.requests) == 1


def test_the_shell_exiting_ends_the_episode(tmp_path: Path, monkeypatch, capsys) -> None:
    with FakeModelServer([reply(("exit\n", 0.5))], default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, {"max_turns": 5})
    capsys.readouterr()
    assert result["telemetry"]["terminus"]["stop_reason"] == "session_ended"
    # No error of the loop's own (the QA scorer notes the missing answer, as for any harness).
    assert not {i["code"] for i in result["issues"]} & {"limit_exceeded", "run_timeout", "model_failed"}
    assert len(srv.requests) == 1
