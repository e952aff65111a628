"""`acx regrade` respects the source run's lock (the one `acx run`/`--resume` holds, E0617): a run
still going is refused before anything is planned or written, and a run being regraded cannot be
resumed until the regrade ends (contracts A9, R12)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks

from acx.errors import AcxResultsError
from acx.interpreter._store import RunStore
from acx.ir import PreparedTask, RunResult, TaskSpec


def _acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=120
    )


def _cli_run(tmp: Path) -> Path:
    (tmp / "data.jsonl").write_text('{"id": "a", "input": "What is 2 + 3?", "target": "5"}\n')
    (tmp / "qa.yaml").write_text(
        "version: 1\nrequests:\n  - name: qa\n"
        "    benchmark: {id: dataset, path: data.jsonl, scorers: [exact]}\n"
        '    harness: {id: command, command: "echo 5"}\n'
        "    environment: {id: host_process, evaluation_environment_mode: none}\n"
    )
    proc = _acx("run", "qa.yaml", "--results-dir", "r", "--progress", "none", "--no-report", cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (src,) = (tmp / "r" / "qa").iterdir()
    return src


def test_regrade_of_a_running_run_is_refused(tmp_path: Path) -> None:  # contracts A9, R12
    src = _cli_run(tmp_path)
    holder = RunStore.open_existing(str(src))
    holder.lock()  # as `acx run --resume` holds it while it runs (this process: alive)
    try:
        proc = _acx("regrade", str(src), "--progress", "none", cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "error[E0617]" in proc.stderr and "still running" in proc.stderr
        assert f"acx process {os.getpid()}" in proc.stderr and "Traceback" not in proc.stderr
        assert len(list(src.parent.iterdir())) == 1  # no regrade run directory was made
    finally:
        holder.close()
    proc = _acx("regrade", str(src), "--progress", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # released: the regrade goes ahead
    assert len(list(src.parent.iterdir())) == 2


def test_resume_of_a_run_being_regraded_is_refused(tmp_path: Path) -> None:  # contracts A9, R12
    src = _cli_run(tmp_path)
    reader = RunStore.open_existing(str(src))
    reader.hold_for_reading(src)  # as a regrade holds its source while it runs
    try:
        proc = _acx("run", "--resume", str(src), "--progress", "none", cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "error[E0617]" in proc.stderr
        # The lock file still names the source's own process, long gone: no stale pid is shown.
        assert "an `acx regrade` reading it" in proc.stderr and "pid" not in proc.stderr
    finally:
        reader.close()


class _Probe(FakeBench):
    """An evaluation that tries to take the source run's lock, as a `--resume` of it would."""

    def __init__(self, source: Path | None) -> None:
        super().__init__()
        self.source = source
        self.refusals: list[str] = []

    async def evaluate(self, task: TaskSpec, prepared: PreparedTask, result: RunResult, *a: Any, **k: Any) -> RunResult:
        if self.source is not None:
            other = RunStore.open_existing(str(self.source))
            try:
                other.lock()
            except AcxResultsError as exc:
                self.refusals.append(f"{exc.code}: {exc}")
            finally:
                other.close()
        return msgspec.structs.replace(result, metrics={"correct": result.final_answer == task.ground_truth})


def test_a_run_being_regraded_cannot_be_resumed(tmp_path: Path) -> None:  # contract A9
    src = run_dir(run([program(_Probe(None), PyHarness(), tasks(1))], tmp_path))
    probe = _Probe(src)
    regraded = run([program(probe, PyHarness(), tasks(1))], tmp_path, regrade={"req": str(src)})
    assert read_results(run_dir(regraded))["t0"][0]["telemetry"]["recovered_from"]
    (refusal,) = probe.refusals
    assert refusal.startswith("E0617") and "in use by another acx process" in refusal
    # Once the regrade has finished, the source can be taken again.
    again = RunStore.open_existing(str(src))
    again.lock()
    again.close()


def test_two_regrades_of_one_run_may_share_it(tmp_path: Path) -> None:  # contract A9
    src = run_dir(run([program(FakeBench(), PyHarness(), tasks(1))], tmp_path))
    first = RunStore.open_existing(str(src))
    first.hold_for_reading(src)
    try:
        second = RunStore.open_existing(str(src))
        second.hold_for_reading(src)  # no error: readers share the hold
        second.close()
        with pytest.raises(AcxResultsError) as e:
            RunStore.open_existing(str(src)).lock()
        assert e.value.code == "E0617"
    finally:
        first.close()
