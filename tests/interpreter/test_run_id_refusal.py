"""A run id that is not a plain directory name is refused (E0601, exit 2), not silently renamed (QA).

`--run-id ../../x` used to run into `.._.._x`; `a/b` into `a_b`. contract R12: bad input is a
located error with a code; docs/results.md: the run directory is the run id.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acx.errors import AcxUserError
from acx.interpreter._store import RunStore


@pytest.mark.parametrize("run_id", ["../../escaped", "a/b", "a b", "..", ".", "x" * 81])
def test_unsafe_run_ids_are_refused(tmp_path: Path, run_id: str) -> None:
    # contract R12
    with pytest.raises(AcxUserError) as info:
        RunStore.create(tmp_path, "req", run_id=run_id)
    assert info.value.code == "E0601"
    assert not any(tmp_path.iterdir())  # refused before any directory is made


def test_plain_run_id_is_the_directory(tmp_path: Path) -> None:
    # contract R12: a plain id is used exactly
    store = RunStore.create(tmp_path, "req", run_id="baseline-1.2_x=y")
    assert store.run_dir.name == "baseline-1.2_x=y"


def test_cli_refuses_with_exit_2(tmp_path: Path) -> None:
    # contract R12
    (tmp_path / "data.jsonl").write_text('{"id": "a", "input": "q", "target": "5"}\n')
    (tmp_path / "qa.acx").write_text(
        'run qa {\n  benchmark dataset {\n    path = "data.jsonl"\n  }\n'
        '  harness command {\n    command = "echo 5"\n  }\n'
        "  environment host_process {\n    evaluation_environment_mode = none\n  }\n}\n"
    )
    args = ["run", "qa.acx", "--results-dir", "r", "--run-id", "../escaped", "--progress", "none"]
    proc = subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "output.run_id: error[E0601]" in out and "Traceback" not in out
    assert not (tmp_path / "r" / "escaped").exists()
    assert not (tmp_path / "r" / "qa" / ".._escaped").exists()
