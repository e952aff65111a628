"""`acx regrade` of a Harbor run on Docker after the verifier changed (contract A9, A6, A7).

The fresh-verifier task runs once with the oracle; its verifier is then made stricter and the run
regraded: the new run has the new score, opened no sandbox for an agent (journal roles) and ran no
harness phase; a corrupted artifact makes the attempt unrecoverable instead.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "harbor" / "fizzbuzz-fresh-verifier"


def _acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _score(run_dir: Path) -> object:
    (path,) = run_dir.glob("details/*/*/attempt-1/result.json")
    return json.loads(path.read_text())["metrics"].get("score")


def _roles(run_dir: Path) -> list[str]:
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    return [r["role"] for r in map(json.loads, lines) if r.get("kind") == "session_opened"]


def _phases(run_dir: Path) -> set[str]:
    return {json.loads(line).get("phase") for line in (run_dir / "progress.jsonl").read_text().splitlines()}


def test_regrade_harbor_with_a_changed_verifier_runs_no_agent(tmp_path: Path) -> None:
    # contract A9, A6, A7: new scores from the changed verifier; zero agent sessions or phases
    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / TASK.name)
    spec = tmp_path / "h.acx"
    spec.write_text(
        f'run h {{\n  benchmark harbor {{ path = "{tasks}" }}\n  harness oracle\n  environment docker\n}}\n'
    )
    proc = _acx("run", str(spec), "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (src,) = (tmp_path / "r" / "h").iterdir()
    assert _score(src) == 1.0 and _roles(src) == ["run", "evaluate"]
    assert list(src.glob("details/normal/*/attempt-1/checkpoint.json"))

    test_sh = tasks / TASK.name / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("passed / len(cases)", "passed / (2 * len(cases))"))
    new = tmp_path / "regraded"
    proc = _acx("regrade", str(src), "-o", str(new), "--progress", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _score(new) == 0.5
    assert _roles(new) == ["evaluate"]  # the fresh verifier's sandbox only: no agent sandbox
    assert {"start_harness", "run_harness", "prepare_task"}.isdisjoint(_phases(new))
    assert {"recover_evaluation", "restore_artifacts", "evaluate"} <= _phases(new)
    (res,) = new.glob("details/*/*/attempt-1/result.json")
    recovered = json.loads(res.read_text())["telemetry"]["recovered_from"]
    assert recovered["kind"] == "regrade" and recovered["changed_evaluation_inputs"] == ["tests changed: test.sh"]

    # a corrupted artifact: not regraded, and said why
    (art,) = src.glob("details/normal/*/attempt-1/artifacts/app/fizzbuzz.py")
    art.write_text("print('tampered')\n")
    proc = _acx("regrade", str(src), "--format", "json", "--progress", "none", cwd=tmp_path)
    payload = json.loads(proc.stdout)
    (item,) = payload["not_recovered"]
    assert "app/fizzbuzz.py does not match its checksum" in item["reason"]
    assert _roles(Path(payload["run_dir"])) == []
