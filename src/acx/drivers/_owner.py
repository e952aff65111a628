"""Which acx process owns a sandbox: pid, process start time and host (for ``acx gc``).

A driver records the creating process (pid, ``proc_start_time``, ``host_name``) when it opens a
session (docker: labels) and judges a leftover with :func:`owner_alive`: a sandbox whose creating
process no longer runs on this host is an orphan. The start time guards against a recycled pid.
A driver whose sandboxes are directories can instead keep each session's directory open (a
close-on-exec descriptor) while the session lives: :func:`held_dirs` then tells live sessions
from a crashed run's, with nothing written and no pid to recycle (host_process does). Stdlib
only; shared by the drivers.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["held_dirs", "host_name", "owner_alive", "pid_alive", "proc_start_time"]


def host_name() -> str:
    return socket.gethostname()


def proc_start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks), or None when unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int, start: str | None) -> bool:
    """``pid`` runs and, when ``start`` is known, is the same process (not a recycled pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return start is None or proc_start_time(pid) in (None, start)


def owner_alive(stamp: dict[str, str], *, host: str | None = None) -> bool | None:
    """True/False when the stamped process is known to run / not to run on this host; None when
    it cannot be told (another host, no pid)."""
    if stamp.get("host") != (host or host_name()):
        return None
    pid = stamp.get("pid", "")
    if not pid.isdigit():
        return None
    return pid_alive(int(pid), stamp.get("pid_start") or None)


def held_dirs(paths: set[str]) -> set[str]:
    """Which of ``paths`` a process of this user holds open (a live session's owner)."""
    uid, held = os.getuid(), set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            if target in paths:
                held.add(target)
    return held
