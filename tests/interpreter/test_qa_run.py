"""`acx run` findings of the run-time QA pass: output streams, locking, resume safety, corrupt files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "examples" / "quickstart.acx")


def _status(results: Path) -> str:
    (run_dir,) = (results / "quickstart").iterdir()
    return str(json.loads((run_dir / "run_info.json").read_text())["status"])


def test_a_reader_that_goes_away_does_not_fail_the_run(tmp_path: Path) -> None:
    # `acx run ... 2>&1 | head -1`: the progress display and the final report hit a closed pipe.
    results = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "acx", "run", QUICKSTART, "--results-dir", str(results), "--progress", "plain"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert _status(results) == "completed"
    (run_dir,) = (results / "quickstart").iterdir()
    assert len(list((run_dir / "details").glob("*/*/task.json"))) == 10
    assert "Traceback" not in (run_dir / "run.log").read_text()


def test_a_closed_stderr_does_not_fail_the_run(tmp_path: Path) -> None:
    # `acx run ... 2>&-`: no stderr at all (sys.stderr is None; descriptor 2 is free).
    results = tmp_path / "r"
    cmd = f"'{sys.executable}' -m acx run '{QUICKSTART}' --results-dir '{results}' --progress plain 2>&-"
    res = subprocess.run(["sh", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout
    assert "quickstart: completed" in res.stdout
    assert _status(results) == "completed"
