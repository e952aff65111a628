"""`acx regrade` and `acx run --no-checkpoint-resume` end to end on host_process (contract A9).

The agent appends a line to a log file each time it runs: "no agent command" is proved by it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from acx.testing.fake_models import FakeModelServer, error, text


def acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=120
    )


def _setup(tmp: Path) -> Path:
    (tmp / "data.jsonl").write_text(
        '{"id": "a", "input": "What is 2 + 3?", "target": "5"}\n{"id": "b", "input": "What is 1 + 1?", "target": "2"}\n'
    )
    (tmp / "qa.acx").write_text(
        "run qa {\n"
        '  benchmark dataset {\n    path = "data.jsonl"\n    scorers = ["exact"]\n  }\n'
        f"  harness command {{\n    command = \"echo ran >> {tmp}/agent.log; echo 'The answer is 5'\"\n  }}\n"
        "  environment host_process {\n    evaluation_environment_mode = none\n  }\n}\n"
    )
    proc = acx("run", "qa.acx", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp / "r" / "qa").iterdir()
    return run_dir


def _runs(tmp: Path) -> int:
    return len((tmp / "agent.log").read_text().splitlines())


def _metrics(run_dir: Path) -> dict[str, object]:
    out = {}
    for p in run_dir.glob("details/*/*/attempt-1/result.json"):
        data = json.loads(p.read_text())
        out[data["task_id"]] = data["metrics"].get("correct")
    return out


def test_regrade_with_another_scorer_runs_no_agent(tmp_path: Path) -> None:
    # contract A9, S1: new scores from the checkpoints, the agent log unchanged, provenance
    src = _setup(tmp_path)
    assert _runs(tmp_path) == 2 and _metrics(src) == {"a": False, "b": False}
    new = tmp_path / "regraded"
    proc = acx("regrade", str(src), "--scorer", "includes", "-o", str(new), "--progress", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _runs(tmp_path) == 2
    assert _metrics(new) == {"a": True, "b": False}
    assert "every attempt was regraded" in proc.stdout and str(new) in proc.stdout
    info = json.loads((new / "run_info.json").read_text())
    assert info["regraded_from"] == {"run_id": src.name, "path": str(src)}
    phases = {json.loads(line).get("phase") for line in (new / "progress.jsonl").read_text().splitlines()}
    assert "recover_evaluation" in phases and "run_harness" not in phases and "open_environment" not in phases


def test_regrade_lists_attempts_it_cannot_recover(tmp_path: Path) -> None:
    # contract A9: a corrupted checkpoint input (the task's content changed) is listed with its reason
    src = _setup(tmp_path)
    (tmp_path / "data.jsonl").write_text(
        '{"id": "a", "input": "What is 2 + 4?", "target": "6"}\n{"id": "b", "input": "What is 1 + 1?", "target": "2"}\n'
    )
    proc = acx("regrade", str(src), "--format", "json", "--progress", "none", cwd=tmp_path)
    assert _runs(tmp_path) == 2
    payload = json.loads(proc.stdout)
    assert payload["not_recovered"] == [{"task_id": "a", "attempt": 1, "reason": "task content changed"}]
    assert Path(payload["run_dir"]).parent == src.parent  # next to the source run


def test_regrade_refuses_bad_input(tmp_path: Path) -> None:
    # contract A9: unknown params and a directory that is no run are located errors (exit 2)
    src = _setup(tmp_path)
    bad = acx("regrade", str(src), "--benchmark-params", '{"nope": 1}', "--progress", "none", cwd=tmp_path)
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr
    none = acx("regrade", str(tmp_path), cwd=tmp_path)
    assert none.returncode == 2 and "E0603" in none.stderr
    taken = acx("regrade", str(src), "-o", str(src), cwd=tmp_path)
    assert taken.returncode == 2 and "E0601" in taken.stderr
    assert len(list((tmp_path / "r" / "qa").iterdir())) == 1  # nothing half-made left behind


def test_grader_fails_once_then_resume_grades_without_the_agent(tmp_path: Path) -> None:
    # contract A9, S2: the model grader is down during the run (judge_failed → eval_error); after
    # `acx run --resume` the attempts are graded, and the agent's own log shows no second run
    (tmp_path / "data.jsonl").write_text(
        '{"id": "a", "input": "What is 2 + 3?", "target": "5"}\n{"id": "b", "input": "What is 1 + 1?", "target": "2"}\n'
    )
    with FakeModelServer([error(500, "overloaded"), error(500, "overloaded")], default=text("GRADE: C")) as srv:
        (tmp_path / "qa.acx").write_text(
            'run qa {\n  benchmark dataset {\n    path = "data.jsonl"\n'
            f'    scorers = [{{ id = "model_graded", max_retries = 0, model = {{ id = "judge", base_url = '
            f'"{srv.base_url}", api_key = "k-not-secret" }} }}]\n  }}\n'
            f'  harness command {{\n    command = "echo ran >> {tmp_path}/agent.log; echo 5"\n  }}\n'
            "  environment host_process {\n    evaluation_environment_mode = none\n  }\n}\n"
        )
        first = acx("run", "qa.acx", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp_path)
        assert first.returncode in (0, 1), first.stdout + first.stderr
        (run_dir,) = (tmp_path / "r" / "qa").iterdir()
        statuses = {json.loads(p.read_text())["status"] for p in run_dir.glob("details/*/*/attempt-1/result.json")}
        assert statuses == {"eval_error"} and _runs(tmp_path) == 2
        off = ("run", "--resume", str(run_dir), "--no-checkpoint-resume", "--progress", "none", "--no-report")
        kept = acx(*off, cwd=tmp_path)  # recovery disabled: the finished tasks stay as they were
        assert kept.returncode in (0, 1), kept.stdout + kept.stderr
        assert len(srv.requests) == 2 and _runs(tmp_path) == 2
        resumed = acx("run", "--resume", str(run_dir), "--progress", "none", "--no-report", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _runs(tmp_path) == 2
    assert _metrics(run_dir) == {"a": True, "b": True}
    assert len(srv.requests) == 4  # two failed gradings, two successful ones
