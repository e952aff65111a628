"""`acx run --no-checkpoint-resume` on a new run (no --resume/--reuse) is refused, not ignored (QA).

contract A9: checkpoint recovery only applies to resumed or reused runs; the flag that turns it off
has nothing to act on in a fresh run, so it is a located E0616 error (exit 2) and no run starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=120
    )


def _spec(tmp: Path) -> None:
    (tmp / "data.jsonl").write_text('{"id": "a", "input": "What is 2 + 3?", "target": "5"}\n')
    (tmp / "qa.acx").write_text(
        "run qa {\n"
        '  benchmark dataset {\n    path = "data.jsonl"\n  }\n'
        '  harness command {\n    command = "echo 5"\n  }\n'
        "  environment host_process {\n    evaluation_environment_mode = none\n  }\n}\n"
    )


def test_no_checkpoint_resume_on_a_new_run_is_refused(tmp_path: Path) -> None:
    # contract A9
    _spec(tmp_path)
    proc = acx("run", "qa.acx", "--results-dir", "r", "--no-checkpoint-resume", "--progress", "none", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "--no-checkpoint-resume: error[E0616]" in out
    assert "Traceback" not in out
    assert not (tmp_path / "r" / "qa").exists() or not any((tmp_path / "r" / "qa").iterdir())


def test_no_checkpoint_resume_with_reuse_is_accepted(tmp_path: Path) -> None:
    # contract A9: with --reuse the flag acts, so it is accepted
    _spec(tmp_path)
    first = acx("run", "qa.acx", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    args = ("run", "qa.acx", "--results-dir", "r", "--reuse", "--no-checkpoint-resume", "--progress", "none")
    proc = acx(*args, "--no-report", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_recovery_flag_on_a_new_run_is_refused(tmp_path: Path) -> None:
    # contract A9 (issue 24 item 15): --recovery acts only on recovered attempts
    _spec(tmp_path)
    proc = acx("run", "qa.acx", "--results-dir", "r", "--recovery", "strict", "--progress", "none", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "--recovery: error[E0616]" in out and "Traceback" not in out


def test_recovery_strict_with_no_checkpoint_resume_is_refused(tmp_path: Path) -> None:
    _spec(tmp_path)
    first = acx("run", "qa.acx", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    args = ("run", "qa.acx", "--results-dir", "r", "--reuse", "--no-checkpoint-resume", "--recovery", "strict")
    proc = acx(*args, "--progress", "none", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "contradicts --no-checkpoint-resume" in out, out


def test_recovery_bad_value_is_a_usage_error(tmp_path: Path) -> None:
    _spec(tmp_path)
    proc = acx("run", "qa.acx", "--results-dir", "r", "--reuse", "--recovery", "lenient", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice: 'lenient'" in proc.stderr and "Traceback" not in proc.stderr


def test_recovery_strict_with_reuse_runs(tmp_path: Path) -> None:
    _spec(tmp_path)
    first = acx("run", "qa.acx", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    args = ("run", "qa.acx", "--results-dir", "r", "--reuse", "--recovery", "strict", "--progress", "none")
    proc = acx(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
