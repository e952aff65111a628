"""Issue 11 item 15: a low open-files limit neither makes every task FATAL nor goes unnoticed: the
soft limit is raised to the hard one, and a concurrency the hard limit cannot carry is lowered with
a warning (or the run is refused up front when not even one task fits).
# contract E1
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from acx.interpreter._limits import OPEN_FILES_BASE, OPEN_FILES_PER_TASK, fit_open_files


def _spec(tmp_path: Path, n: int = 24) -> Path:
    with (tmp_path / "d.jsonl").open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"t{i}", "question": "q", "answer": "a"}) + "\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "version: 1\nname: ul\nrequests:\n  - name: ul\n    benchmark: {id: exact_match, dataset: d.jsonl}\n"
        '    harness: {id: command, command: "sleep 0.3; echo a"}\n'
        "    environment: {id: host_process, evaluation_environment_mode: none}\n"
    )
    return spec


def _run(tmp_path: Path, soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "acx",
            "run",
            str(_spec(tmp_path)),
            "--task-concurrency",
            "64",
            "--results-dir",
            "r",
            "--progress",
            "none",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=limit,
    )


def _states(tmp_path: Path) -> set[str]:
    return {p.parent.parent.name for p in (tmp_path / "r").rglob("task.json")}


def test_the_soft_limit_is_raised_to_the_hard_limit(tmp_path: Path) -> None:
    res = _run(tmp_path, 64, 4096)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _states(tmp_path) == {"normal"} and "warning" not in res.stderr


def test_a_hard_limit_too_low_for_the_concurrency_lowers_it_with_a_warning(tmp_path: Path) -> None:
    res = _run(tmp_path, 64, 64)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _states(tmp_path) == {"normal"}  # before: every task FATAL (EMFILE)
    assert "open-files limit (64, hard limit 64)" in res.stderr and "lowered to 4" in res.stderr
    (log,) = (tmp_path / "r").rglob("run.log")
    assert "lowered to 4" in log.read_text()


def test_a_limit_too_low_for_one_task_is_refused_up_front(tmp_path: Path) -> None:
    res = _run(tmp_path, 36, 36)
    assert res.returncode == 2 and "E0635" in res.stderr and "ulimit -n" in res.stderr
    assert not (tmp_path / "r").exists()


def test_fit_open_files_counts_only_the_slots_that_can_be_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {"v": (100, 100)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["v"])
    monkeypatch.setattr(resource, "setrlimit", lambda which, v: limits.__setitem__("v", v))
    assert fit_open_files(64, tasks=3) == (64, None)  # 3 tasks fit in 100
    fits, warning = fit_open_files(64, tasks=100)
    assert fits == (100 - OPEN_FILES_BASE) // OPEN_FILES_PER_TASK and warning is not None
    limits["v"] = (64, resource.RLIM_INFINITY)
    assert fit_open_files(64) == (64, None) and limits["v"][0] >= OPEN_FILES_BASE + 64 * OPEN_FILES_PER_TASK
