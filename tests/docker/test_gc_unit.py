"""Orphan detection for `acx gc` (pure; no engine).  # contract E1 (no debris)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from acx.drivers._owner import proc_start_time as _proc_start_time
from acx.drivers.docker import is_orphan

pytestmark = pytest.mark.no_engine

HOST = socket.gethostname()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_live_process_is_not_orphan() -> None:
    labels = {
        "acx.pid": str(os.getpid()),
        "acx.host": HOST,
        "acx.pid_start": _proc_start_time(os.getpid()) or "",
    }
    assert not is_orphan(labels)


def test_dead_process_is_orphan() -> None:
    assert is_orphan({"acx.pid": str(_dead_pid()), "acx.host": HOST})


def test_recycled_pid_is_orphan() -> None:
    # the pid exists, but it is a different process than the one that created the object
    assert is_orphan({"acx.pid": str(os.getpid()), "acx.host": HOST, "acx.pid_start": "1"})


def test_other_host_and_unlabelled_objects_are_left_alone() -> None:
    assert not is_orphan({"acx.pid": str(_dead_pid()), "acx.host": HOST + "-elsewhere"})
    assert not is_orphan({"acx.host": HOST})


def test_kept_sessions_survive_unless_asked() -> None:
    labels = {"acx.pid": str(_dead_pid()), "acx.host": HOST, "acx.keep": "true"}
    assert not is_orphan(labels)
    assert is_orphan(labels, include_kept=True)
