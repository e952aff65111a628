"""The shipped dataset examples run offline against the fake model server their own script starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "datasets"


def _run(script: Path, results: Path) -> Path:
    proc = subprocess.run(
        [sys.executable, str(script), "--results-dir", str(results)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in results.glob("*/*") if p.is_dir()]
    return run_dir


def test_csv_multiple_choice_example(tmp_path: Path) -> None:
    run_dir = _run(EXAMPLES / "mc-csv" / "run.py", tmp_path)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    ids = {s["series_id"] for s in metrics["series"]}
    assert {"correct.avg@2", "correct.pass@2", "correct.pass_at_1@2", "correct.median@2"} <= ids
    head = next(s for s in metrics["series"] if s["role"] == "headline")
    assert head["counts"]["evaluated"] == 6 and head["stderr"] is not None and len(head["ci95"]) == 2
    results = [json.loads(p.read_text()) for p in run_dir.glob("details/*/*/attempt-*/result.json")]
    assert len(results) == 12
    for r in results:  # each attempt records the order it saw and which letter was right there
        shown, correct = r["extra"]["choices"]["shown"], r["extra"]["choices"]["correct"]
        assert sorted(r["extra"]["choices"]["order"]) == [0, 1, 2, 3] and len(shown) == 4 and len(correct) == 1
    assert "± SE" in (run_dir / "summary.md").read_text()


def test_model_graded_example(tmp_path: Path) -> None:
    run_dir = _run(EXAMPLES / "model-graded" / "run.py", tmp_path)
    by_task = {
        json.loads(p.read_text())["task_id"]: json.loads(p.read_text())
        for p in run_dir.glob("details/*/*/attempt-1/result.json")
    }
    assert by_task["q1"]["metrics"]["correct"] is True
    assert by_task["q2"]["metrics"]["correct"] is False
    assert "correct" not in by_task["q3"]["metrics"]  # unparseable verdict: unscored, never 0
    assert [i["code"] for i in by_task["q3"]["issues"]] == ["judge_invalid_output"]
    judge = by_task["q1"]["extra"]["scores"]["correct"]["judge"]
    assert judge["model"] == "fake-grader" and judge["grade"] == "C"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["extra"]["judge_usage"]["prompt_tokens"] == 180 + 175 + 170
    assert "## Grader usage" in (run_dir / "summary.md").read_text()
    blob = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())
    assert "not-a-real-grader-key" not in blob and "not-a-real-key" not in blob
