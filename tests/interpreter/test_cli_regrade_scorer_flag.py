"""`acx regrade --scorer` on a benchmark without a `scorers` param says so in terms of the flag (QA).

It used to print "invalid benchmark params: Object contains unknown field `scorers`" although the
user never wrote `scorers`. contract A9 (regrade re-evaluates from checkpoints), R12 (located error).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=120
    )


def test_scorer_flag_on_exact_match_is_a_flag_error(tmp_path: Path) -> None:
    # contract A9, R12
    for part in ("quickstart.acx", "data", "agents"):
        src = ROOT / "examples" / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / part)
    run = acx("run", "quickstart.acx", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (run_dir,) = (tmp_path / "r" / "quickstart").iterdir()
    proc = acx("regrade", str(run_dir), "--scorer", "exact", "-o", "out", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "--scorer: error[E0200]: --scorer exact: the run's benchmark takes no `scorers` param" in out
    assert "unknown field" not in out and "Traceback" not in out
    assert not (tmp_path / "out").exists()


def test_reuse_mode_attempt_is_listed_with_the_real_reason(tmp_path: Path) -> None:
    # contract A9: reuse-mode attempts have no checkpoint because their mode is not recoverable —
    # the listing used to say "the agent phase did not complete", which was false
    (tmp_path / "data.jsonl").write_text('{"id": "a", "input": "q", "target": "5"}\n')
    (tmp_path / "qa.acx").write_text(
        'run qa {\n  benchmark dataset {\n    path = "data.jsonl"\n  }\n'
        '  harness command {\n    command = "echo 5"\n  }\n'
        "  environment host_process {\n    evaluation_environment_mode = reuse\n  }\n}\n"
    )
    run = acx("run", "qa.acx", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (run_dir,) = (tmp_path / "r" / "qa").iterdir()
    proc = acx("regrade", str(run_dir), "-o", "out", "--progress", "none", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "a attempt 1: no evaluation checkpoint: evaluation mode 'reuse' evaluates in the run sandbox" in out
    assert "agent phase did not complete" not in out
