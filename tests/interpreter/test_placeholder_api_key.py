"""A placeholder API key (``api_key: none``, what local OpenAI-compatible servers take) is not a
secret: the word is not masked in result files, and a checkpoint's ``evaluation_mode: none`` stays
readable, so ``--resume`` recovers the evaluation from it instead of rerunning the agent
(contracts V1, A9).

Real processes (``python -m acx``) and fake model servers on loopback: one plays the agent's
model (openai_chat), one the model_graded scorer's grader (down, or hanging until a SIGKILL, on
the first run)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from acx.testing.fake_models import FakeModelServer, error, text

DATA = '{"id": "a", "input": "What is 2 + 3?", "target": "5"}\n{"id": "b", "input": "What is 1 + 4?", "target": "5"}\n'
_RUN = ("--results-dir", "r", "--progress", "none", "--no-report")


def _spec(tmp: Path, agent_url: str, judge_url: str) -> None:
    (tmp / "data.jsonl").write_text(DATA)
    (tmp / "qa.yaml").write_text(
        "version: 1\nrequests:\n  - name: qa\n    benchmark:\n      id: dataset\n      path: data.jsonl\n"
        f"      scorers: [{{id: model_graded, max_retries: 0, model: {{id: judge, base_url: '{judge_url}', "
        "api_key: none}}]\n"
        "    harness: {id: openai_chat}\n"
        f"    model: {{id: agent, base_url: '{agent_url}', api_key: none}}\n"
        "    environment: {id: host_process, evaluation_environment_mode: none}\n"
    )


def _acx(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], cwd=tmp, capture_output=True, text=True, timeout=180)


def test_api_key_none_keeps_the_word_and_resume_reuses_the_checkpoint(tmp_path: Path) -> None:  # contract V1, A9
    answer = text("none other than 5")
    with (
        FakeModelServer([], default=answer) as agent,
        FakeModelServer([error(500, "down"), error(500, "down")], default=text("GRADE: C")) as judge,
    ):
        _spec(tmp_path, agent.base_url, judge.base_url)
        first = _acx(tmp_path, "run", "qa.yaml", *_RUN)
        assert first.returncode in (0, 1), first.stdout + first.stderr
        (run_dir,) = (tmp_path / "r" / "qa").iterdir()
        resumed = _acx(tmp_path, "run", "--resume", str(run_dir.resolve()), "--progress", "none", "--no-report")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert len(agent.requests) == 2  # the agent ran once per task: both checkpoints were reused
        assert all(r.headers.get("authorization") == "Bearer none" for r in agent.requests)
    results = [json.loads(p.read_text()) for p in run_dir.glob("details/*/*/attempt-1/result.json")]
    assert len(results) == 2
    assert all("recovered_from" in r["telemetry"] for r in results)
    assert all(r["final_answer"] == "none other than 5" for r in results)
    for path in run_dir.glob("details/*/*/attempt-1/checkpoint.json"):
        assert json.loads(path.read_text())["evaluation_mode"] == "none"
    # Fields named like a secret are still redacted by their key (the plan's `api_key`), and only them.
    files = [p for p in run_dir.rglob("*.json") if p.name != "provenance.json"]
    masked = [line for p in files for line in p.read_text().splitlines() if "********" in line]
    assert masked and all('"api_key": "********"' in line for line in masked), masked
    provenance = (run_dir / "provenance.json").read_text()
    # two masked provenance values, the two api_keys (by key); `evaluation_environment_mode: none` is kept
    assert provenance.count("********") == 2 and '"none"' in provenance


def test_api_key_none_run_killed_after_the_agent_phase_resumes_from_its_checkpoints(
    tmp_path: Path,
) -> None:  # contract V1, A9
    slow = text("GRADE: C", delay=120)  # the grader hangs: the kill lands in evaluation
    with (
        FakeModelServer([], default=text("none other than 5")) as agent,
        FakeModelServer([slow, slow], default=text("GRADE: C")) as judge,
    ):
        _spec(tmp_path, agent.base_url, judge.base_url)
        proc = subprocess.Popen([sys.executable, "-m", "acx", "run", "qa.yaml", *_RUN], cwd=tmp_path)
        try:
            deadline = time.monotonic() + 90
            checkpoints = "r/qa/*/details/running/*/*/checkpoint.json"
            while len(judge.requests) < 2 or len(list(tmp_path.glob(checkpoints))) < 2:
                assert proc.poll() is None and time.monotonic() < deadline, "never reached evaluation"
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        (run_dir,) = (tmp_path / "r" / "qa").iterdir()
        resumed = _acx(tmp_path, "run", "--resume", str(run_dir.resolve()), "--progress", "none", "--no-report")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert len(agent.requests) == 2  # both evaluations recovered from their checkpoints
    results = [json.loads(p.read_text()) for p in run_dir.glob("details/*/*/attempt-1/result.json")]
    assert len(results) == 2
    assert all(r["telemetry"]["recovered_from"]["kind"] == "resume" for r in results)
    assert all(r["final_answer"] == "none other than 5" and r["metrics"] for r in results), results
