"""scripts/ray-local-cluster.sh start that fails stops what it started (issue 24 item 13).

A worker node whose `ray start` fails after the head is up (a raylet that missed Ray's 30 s
registration wait on a loaded machine) used to leave the head's gcs_server, monitor and
log_monitor running. Each try now stops its own processes before the next, and a start that
gives up leaves nothing behind.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import SCRIPT, _require_ray

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _processes_naming(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if text.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_start_that_fails_after_the_head_leaves_nothing_running(tmp_path: Path) -> None:
    # contract E1 (no debris): the real head starts, every worker's `ray start` fails
    _require_ray()
    real_ray = Path(sys.executable).parent / "ray"
    wrapper = tmp_path / "ray"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --head "*) exec ' + str(real_ray) + ' "$@" ;; esac\n'
        'echo "The current node timed out during startup." >&2\nexit 1\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    cluster_dir = f"/tmp/acxr-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RAY": str(wrapper), "ACX_RAY_START_TRIES": "2"}
    try:
        proc = subprocess.run(
            ["bash", str(SCRIPT), "start", cluster_dir, "--workers", "1", "--engine", "shared"],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "start failed (try 1 of 2)" in proc.stderr and "start failed (try 2 of 2)" in proc.stderr
        assert _processes_naming(cluster_dir) == [], proc.stderr[-2000:]
        assert not Path(cluster_dir).exists()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", cluster_dir], env=env, timeout=120)
