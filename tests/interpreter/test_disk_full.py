"""Issue 11 item 11: a full results disk stops the run cleanly — sandboxes released, a clear error
naming the path, exit code 74, status `disk_full`, no task recorded FATAL — and a resume after
freeing space gives the same results as an uninterrupted run.

Two ways to fill the disk: a real tmpfs of 2 MiB (needs root to mount; the machine running the
test command is root), and a fault-injection seam at the store's write edge (any machine).
# contract R13, S2
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks

from acx.interpreter import _fs
from acx.ir import RunResult

N = 40


def _spec(tmp_path: Path) -> Path:
    with (tmp_path / "d.jsonl").open("w") as fh:
        for i in range(N):
            fh.write(json.dumps({"id": f"t{i}", "question": f"q{i}", "answer": f"a{i}"}) + "\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "version: 1\nname: fd\nrequests:\n  - name: fd\n    benchmark: {id: exact_match, dataset: d.jsonl}\n"
        "    harness: {id: command, command: \"python3 -c 'import sys; q = sys.stdin.read(); "
        'print(q.strip().replace(\\"q\\", \\"a\\") + \\" \\" + \\"x\\" * 30000)\'"}\n'
        f"    environment: {{id: host_process, evaluation_environment_mode: none, workdir_root: {tmp_path / 'wd'}}}\n"
    )
    (tmp_path / "wd").mkdir()
    return spec


def _acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args, "--progress", "none"], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _answers(run_dir: Path) -> dict[str, Any]:
    out = {}
    for p in sorted(run_dir.glob("details/*/*/attempt-*/result.json")):
        data = json.loads(p.read_text())
        out[data["task_id"]] = (p.parts[-4], data["final_answer"], data["metrics"], data["status"])
    return out


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root; the fault-injection test covers this machine")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_tmpfs_stops_the_run_cleanly_and_resume_matches_an_uninterrupted_run(
    tmp_path: Path, small_disk: Path
) -> None:
    spec = _spec(tmp_path)
    res = _acx("run", str(spec), "--results-dir", str(small_disk / "r"), cwd=tmp_path)
    assert res.returncode == 74, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert "the results disk is full: cannot write " + str(small_disk) in res.stdout
    (d,) = (small_disk / "r" / "fd").iterdir()
    info = json.loads((d / "run_info.json").read_text())
    assert info["status"] == "disk_full" and str(small_disk) in info["error"] and "--resume" in info["error"]
    assert list((tmp_path / "wd").iterdir()) == []  # every session released
    assert not list((d / "details" / "fatal").iterdir())  # nothing recorded FATAL
    partial = _answers(d)
    assert len(partial) < N  # it did stop early

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = _acx("run", "--resume", str(d), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    whole = _acx("run", str(spec), "--results-dir", str(tmp_path / "big"), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    (w,) = (tmp_path / "big" / "fd").iterdir()
    assert _answers(d) == _answers(w) and len(_answers(w)) == N
    # What was recorded before the disk filled is kept as it was (an attempt finished before the
    # stop may still sit in details/running/ until the resume commits its task).
    assert {k: v[1:] for k, v in partial.items()} == {k: _answers(d)[k][1:] for k in partial}
    assert (
        json.loads((d / "metrics.json").read_text())["counts"] == json.loads((w / "metrics.json").read_text())["counts"]
    )


def test_a_write_edge_that_reports_enospc_stops_the_run_and_resume_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The seam: the store's atomic write edge refuses with ENOSPC after a number of writes.
    real = _fs.atomic_write_bytes
    budget = {"left": 12, "full": True}

    def write(path: Any, data: bytes, **kw: Any) -> None:
        if budget["full"] and str(path).endswith("result.json"):
            budget["left"] -= 1
            if budget["left"] < 0:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data, **kw)

    import acx.interpreter._store as store_mod

    monkeypatch.setattr(store_mod, "atomic_write_bytes", write)

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        return RunResult(task_id=prepared.task_id, final_answer=prepared.input.prompt.upper())

    prog = program(FakeBench(), PyHarness(execute), tasks(30))
    result = run([prog], tmp_path)
    assert result.status == "disk_full" and result.exit_code == 74
    d = run_dir(result)
    info = json.loads((d / "run_info.json").read_text())
    assert info["status"] == "disk_full" and "result.json" in info["error"]
    assert prog.driver.live_sessions() == []  # every sandbox released
    assert not list((d / "details" / "fatal").iterdir())
    budget["full"] = False
    again = program(FakeBench(), PyHarness(execute), tasks(30))
    resumed = run([again], tmp_path, resume_dirs={again.name: str(d)})
    assert resumed.status == "completed"
    results = read_results(d)
    assert len(results) == 30 and all(r[0]["metrics"] == {"correct": True} for r in results.values())
