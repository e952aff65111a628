"""Model usage of attempts recovered from evaluation checkpoints (A9) is counted once: a run killed
after its agent phase and resumed reports the same agent usage and cost (metrics.json
``model_usage``, summary.md) as the same run uninterrupted — the agent's calls are neither lost
with the interrupted attempt nor added again when its evaluation is recovered (contracts A9, M5).

Real processes (``python -m acx``), a real SIGKILL, and fake model servers on loopback: one plays
the agent's model (openai_chat), one the model_graded scorer's grader."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acx.testing.fake_models import FakeModelServer, error, text

DATA = '{"id": "a", "input": "What is 2 + 3?", "target": "5"}\n{"id": "b", "input": "What is 1 + 1?", "target": "2"}\n'
_RUN = ("--results-dir", "r", "--progress", "none", "--no-report")


def _spec(tmp: Path, agent_url: str, judge_url: str) -> None:
    (tmp / "data.jsonl").write_text(DATA)
    (tmp / "qa.yaml").write_text(
        "version: 1\nrequests:\n  - name: qa\n    benchmark:\n      id: dataset\n      path: data.jsonl\n"
        f"      scorers: [{{id: model_graded, max_retries: 0, model: {{id: judge, base_url: '{judge_url}', "
        "api_key: k}}]\n"
        "    harness: {id: openai_chat}\n"
        f"    model: {{id: agent, base_url: '{agent_url}', api_key: k, "
        "price: {input_per_mtok: 1.0, output_per_mtok: 2.0}}\n"
        "    environment: {id: host_process, evaluation_environment_mode: none}\n"
    )


@contextlib.contextmanager
def _servers(judge_script: list[Any]) -> Iterator[tuple[FakeModelServer, FakeModelServer]]:
    """The agent's model (answers 5) and the grader (``judge_script`` first, then grade C)."""
    with FakeModelServer([], default=text("5", usage=(100, 7))) as agent:  # noqa: SIM117 (two servers)
        with FakeModelServer(judge_script, default=text("GRADE: C", usage=(50, 3))) as judge:
            yield agent, judge


def _acx(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], cwd=tmp, capture_output=True, text=True, timeout=180)


def _totals(run_dir: Path) -> dict[str, Any]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    usage_line = next(
        line for line in (run_dir / "summary.md").read_text().splitlines() if line.startswith("| ") and "$" in line
    )
    return {
        "run": metrics["model_usage"]["run"],
        "tasks": metrics["model_usage"]["tasks"],
        "judge": metrics["extra"].get("judge_usage"),
        "summary": usage_line,
    }


def _recovered(run_dir: Path) -> int:
    results = [json.loads(p.read_text()) for p in run_dir.glob("details/*/*/attempt-1/result.json")]
    return sum(1 for r in results if "recovered_from" in r["telemetry"])


def _baseline(tmp: Path) -> dict[str, Any]:
    tmp.mkdir()
    with _servers([]) as (agent, judge):
        _spec(tmp, agent.base_url, judge.base_url)
        proc = _acx(tmp, "run", "qa.yaml", *_RUN)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp / "r" / "qa").iterdir()
    return _totals(run_dir)


def test_killed_after_the_agent_phase_then_resumed_counts_usage_once(tmp_path: Path) -> None:  # contract A9
    expected = _baseline(tmp_path / "straight")
    assert expected["run"]["model_calls"] == 2 and expected["run"]["cost_usd"] is not None
    tmp = tmp_path / "killed"
    tmp.mkdir()
    slow = text("GRADE: C", usage=(50, 3), delay=120)  # the grader hangs: the kill lands in evaluation
    with _servers([slow, slow]) as (agent, judge):
        _spec(tmp, agent.base_url, judge.base_url)
        proc = subprocess.Popen([sys.executable, "-m", "acx", "run", "qa.yaml", *_RUN], cwd=tmp)
        try:
            deadline = time.monotonic() + 90
            while len(judge.requests) < 2 or len(list(tmp.glob("r/qa/*/details/running/*/*/checkpoint.json"))) < 2:
                assert proc.poll() is None and time.monotonic() < deadline, "never reached evaluation"
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        (run_dir,) = (tmp / "r" / "qa").iterdir()
        resumed = _acx(tmp, "run", "--resume", str(run_dir.resolve()), "--progress", "none", "--no-report")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert len(agent.requests) == 2  # the agent ran once per task: both evaluations were recovered
    assert _recovered(run_dir) == 2
    assert _totals(run_dir) == expected


def test_grader_down_then_resumed_counts_usage_once(tmp_path: Path) -> None:  # contract A9
    expected = _baseline(tmp_path / "straight")
    tmp = tmp_path / "down"
    tmp.mkdir()
    with _servers([error(500, "down"), error(500, "down")]) as (agent, judge):
        _spec(tmp, agent.base_url, judge.base_url)
        first = _acx(tmp, "run", "qa.yaml", *_RUN)
        assert first.returncode in (0, 1), first.stdout + first.stderr
        (run_dir,) = (tmp / "r" / "qa").iterdir()
        resumed = _acx(tmp, "run", "--resume", str(run_dir.resolve()), "--progress", "none", "--no-report")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert len(agent.requests) == 2
    # The failed evaluations' results are kept under retries/ (A8), not counted.
    assert len(list(run_dir.glob("details/*/*/attempt-1/retries/*/result.json"))) == 2
    assert _recovered(run_dir) == 2
    assert _totals(run_dir) == expected
