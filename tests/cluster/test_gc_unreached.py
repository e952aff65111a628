"""`acx gc --cluster` and `acx env list --cluster` with a node whose acx worker does not answer: the
node is named and gc exits 1 (its sandboxes were not looked at), never a silent "nothing to
remove". Issue 18 item 3."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _worker_pids(cluster_dir: str, node: str) -> list[int]:
    """The acx worker actor process(es) of ``node``: children of its raylet named AcxWorker."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    marks = (b"raylet", cluster_dir.encode(), f"acx_node_{node}".encode())
    raylets = {pid for pid in pids if all(m in _cmdline(pid) for m in marks)}
    out = []
    for pid in pids:
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in raylets and b"AcxWorker" in _cmdline(pid):
            out.append(pid)
    return out


def _w1_worker(cluster: Any, cwd: Path) -> list[int]:
    """w1's acx worker process(es), once a listing has made them. On a loaded machine a node may
    join the cluster (or its worker take its process title) only after the script returned: a listing
    then succeeds without w1, so ask again, within a bound."""
    deadline = time.monotonic() + 90
    while True:
        first = _acx("env", "list", "--env", "host_process", "--cluster", cluster.url, cwd=cwd)
        assert first.returncode == 0, first.stderr[-2000:]
        found = _worker_pids(cluster.dir, "w1")
        if found or time.monotonic() > deadline:
            assert found, "no acx worker process found for w1 within 90 s"
            return found
        time.sleep(2)


def test_gc_names_a_node_whose_worker_does_not_answer(two_workers: Any, tmp_path: Path) -> None:
    frozen = _w1_worker(two_workers, tmp_path)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)  # w1's node stays up; its worker answers nothing
    try:
        gc = _acx("gc", "--env", "host_process", "--cluster", two_workers.url, cwd=tmp_path)
        listed = _acx("env", "list", "--env", "host_process", "--cluster", two_workers.url, cwd=tmp_path)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    assert gc.returncode == 1, gc.stderr[-2000:]
    assert "error: cluster node w1 was not reached" in gc.stderr and "run this again" in gc.stderr, gc.stderr
    assert "w2 was not reached" not in gc.stderr and "Traceback" not in gc.stderr
    assert listed.returncode == 0 and "warning: cluster node w1 was not reached" in listed.stderr, listed.stderr
