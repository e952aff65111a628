"""Exports of runs unlike the react run: a Harbor-benchmark-like run (scalar `score` primary,
`correct`, the verifier's output tail, collected artifacts, a grader's model calls in the
trajectory) exported to Harbor — validated by Harbor's models — and imported back with equal
scores; what Harbor cannot hold is in the manifest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from acx.testing.results import actf_trajectory, write_run

HERE = Path(__file__).parent


def acx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], capture_output=True, text=True, timeout=300)


def _tasks() -> list[dict[str, Any]]:
    tasks = []
    for i, score in enumerate([1.0, 0.25, 0.0]):
        traj = actf_trajectory(f"fix bug {i}", "done", steps=2)
        traj["steps"].append({**traj["steps"][-1], "step_id": 3, "role": "grader"})
        tasks.append(
            {
                "task_id": f"bug-{i}",
                "instruction": f"fix bug {i}",
                "ground_truth": None,
                "attempts": [
                    {
                        "status": "completed",
                        "metrics": {"score": score, "correct": score >= 1},
                        "final_answer": "done",
                        "trajectory": traj,
                        "extra": {"verifier_output_tail": f"{int(score * 4)} of 4 tests passed\n"},
                        "artifacts": {"files": 1} if i == 0 else {},
                    }
                ],
            }
        )
    return tasks


METRICS = {
    "schema_version": "acx.metrics.v1",
    "series": [
        {"series_id": "score.avg@1", "metric_id": "score", "kind": "scalar", "reducer": "avg", "role": "headline",
         "k": 1, "value": 1.25 / 3, "counts": {"total": 3, "evaluated": 3}},
        {"series_id": "correct.avg@1", "metric_id": "correct", "kind": "binary_success", "reducer": "avg",
         "role": "auxiliary", "k": 1, "value": 1 / 3, "counts": {"total": 3, "evaluated": 3}},
    ],
    "metrics": {"score.avg@1": 1.25 / 3, "correct.avg@1": 1 / 3},
}  # fmt: skip


def test_harbor_export_of_a_scored_run_round_trips(harbor_py: list[str], tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", _tasks(), metrics=METRICS)
    res = acx("results", "export", str(run), "--format", "harbor", "-o", str(tmp_path / "x"))
    assert res.returncode == 0, res.stderr
    check = subprocess.run(
        [*harbor_py, str(HERE / "harbor_validate.py"), str(tmp_path / "x")],
        env={**os.environ, "PYENV_VERSION": "3.12.1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr
    read = json.loads(check.stdout)
    rewards = {t["task_name"]: t["rewards"] for t in read["trials"]}
    assert rewards == {
        "bug-0": {"reward": 1.0, "correct": 1},
        "bug-1": {"reward": 0.25, "correct": 0},
        "bug-2": {"reward": 0.0, "correct": 0},
    }
    (job,) = [p for p in (tmp_path / "x").iterdir() if p.is_dir()]
    stdout = sorted(p.read_text() for p in job.glob("*/verifier/test-stdout.txt"))
    assert stdout == ["0 of 4 tests passed\n", "1 of 4 tests passed\n", "4 of 4 tests passed\n"]
    # The grader's step is not in the agent's ATIF trajectory: 2 agent steps each, and the manifest says so.
    assert all(sum(s["source"] == "agent" for s in t["steps"]) == 2 for t in read["trajectories"])
    manifest = json.loads(next((tmp_path / "x").glob("*-harbor.manifest.json")).read_text())
    whats = [(i["what"], i.get("task_id")) for i in manifest["not_represented"]]
    assert ("collected artifacts", "bug-0") in whats
    assert sum("role 'grader'" in w for w, _ in whats) == 3
    assert sum(w == "the verifier's full output" for w, _ in whats) == 3
    # Back to acx: the same scores, task by task.
    back = acx("results", "import", str(job), "-o", str(tmp_path / "back"))
    assert back.returncode == 0, back.stderr
    cmp = json.loads(acx("results", "compare", str(run), str(tmp_path / "back"), "--format", "json").stdout)
    by_metric = {m["metric"]: m for m in cmp["metrics"]}
    for name in ("score", "correct"):
        assert by_metric[name]["n"] == 3 and by_metric[name]["diff"] == 0, by_metric[name]
