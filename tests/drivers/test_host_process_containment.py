"""Issue 11 item 12: everything a host_process session starts is found and killed at its end,
whatever the process does to its environment, session or directory.

Two paths: a cgroup v2 per session where this process can create and join one (``containment =
auto | cgroup``), and where it cannot (``process_group``, or ``auto`` without cgroups) process groups
plus a sweep at the end of the run by ``ACX_SESSION_ID`` marker and by working directory — which
still finds an ``env -i setsid`` daemon that stays in its session directory, but not one that also
leaves it (the documented limit of that path).
# contract T3, E1
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver, cgroup_parent
from acx.errors import EnvironmentSetupError

CGROUPS = cgroup_parent() is not None
needs_cgroups = pytest.mark.skipif(not CGROUPS, reason="this process cannot create and join a cgroup v2 here")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_dead(pid: int) -> bool:
    for _ in range(100):
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def _daemon(pidfile: Path, *, leave: bool) -> list[str]:
    """A daemon as an agent may start one: no marker (env -i), its own session (setsid), outliving
    the command, optionally in another directory."""
    cd = "cd /; " if leave else ""
    return [
        "sh",
        "-c",
        f"env -i /usr/bin/setsid /bin/sh -c '{cd}echo $$ > {pidfile}; exec sleep 300' "
        "</dev/null >/dev/null 2>&1 & sleep 0.3",
    ]


async def _start_daemon(tmp_path: Path, containment: str, *, leave: bool, close: bool = True) -> int:
    driver = HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path / "s"), containment=containment))  # type: ignore[arg-type]
    prefix = f"run-{os.getpid()}-"  # test workers run in parallel: one run each
    session = await driver.open(OpenRequest(session_id=f"{prefix}t1"))
    pidfile = tmp_path / "daemon.pid"
    assert (await session.exec(_daemon(pidfile, leave=leave))).returncode == 0
    pid = int(pidfile.read_text())
    assert _alive(pid)
    if close:
        await session.close()
    await driver.end_run(prefix)
    return pid


@needs_cgroups
@pytest.mark.parametrize("spawner", ["cspawn", "shell"])
@pytest.mark.parametrize("containment", ["auto", "cgroup"])
def test_a_daemon_that_drops_its_marker_and_leaves_is_killed_with_its_session(
    tmp_path: Path, containment: str, spawner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both ways of starting a command in its cgroup: the C helper (vfork, join, exec) and, where
    # it is not built, the joining /bin/sh wrapper.
    from acx.drivers import _procs

    if spawner == "shell":
        monkeypatch.setattr(_procs, "_cspawn", None)
        monkeypatch.setattr(_procs, "FAST_SPAWN", False)
    elif not _procs.FAST_SPAWN:
        pytest.skip("acx.drivers._cspawn is not built")
    pid = trio.run(lambda: _start_daemon(tmp_path, containment, leave=True))
    assert _wait_dead(pid)
    parent = cgroup_parent()
    assert parent is not None and not [n for n in os.listdir(parent) if n.startswith(f"acx-run-{os.getpid()}-")]


@needs_cgroups
def test_the_cgroup_of_a_session_never_closed_is_killed_at_the_end_of_the_run(tmp_path: Path) -> None:
    pid = trio.run(lambda: _start_daemon(tmp_path, "cgroup", leave=True, close=False))
    assert _wait_dead(pid)


def test_without_cgroups_a_daemon_in_its_session_directory_is_killed_at_the_end_of_the_run(tmp_path: Path) -> None:
    pid = trio.run(lambda: _start_daemon(tmp_path, "process_group", leave=False))
    assert _wait_dead(pid)


def test_without_cgroups_a_daemon_that_also_leaves_its_directory_is_out_of_reach(tmp_path: Path) -> None:
    # The documented limit of the fallback path: no marker, no cwd, no cgroup to find it by.
    pid = trio.run(lambda: _start_daemon(tmp_path, "process_group", leave=True))
    try:
        assert _alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_containment_cgroup_where_unavailable_is_a_clear_setup_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import acx.drivers.host_process as hp

    monkeypatch.setattr(hp, "cgroup_parent", lambda: None)

    async def go() -> None:
        driver = HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path), containment="cgroup"))
        await driver.open(OpenRequest(session_id="x"))

    with pytest.raises(EnvironmentSetupError, match="cgroup v2"):
        trio.run(go)


@needs_cgroups
def test_commands_in_a_cgroup_keep_the_exec_contract(tmp_path: Path) -> None:
    async def go() -> list[tuple[int, str]]:
        driver = HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path), containment="cgroup"))
        s = await driver.open(OpenRequest(session_id="contract"))
        try:
            assert s.cgroup is not None  # type: ignore[attr-defined]
            out = []
            for argv in (["sh", "-c", "cat /proc/self/cgroup | grep '^0::'"], ["no-such-cmd"], [str(tmp_path)]):
                r = await s.exec(argv)
                out.append((r.returncode, r.stdout + r.stderr))
            r = await s.exec(["cat"], stdin=b"in")
            out.append((r.returncode, r.stdout))
            return out
        finally:
            await s.close()

    inside, missing, notexec, stdin = trio.run(go)
    assert inside[0] == 0 and "/acx-contract-" in inside[1]
    assert missing == (127, "no-such-cmd: No such file or directory\n")
    assert notexec[0] == 126 and stdin == (0, "in")


def test_a_whole_run_leaves_no_daemon_behind(tmp_path: Path) -> None:
    # End to end: the agent of every task starts an `env -i setsid` daemon that leaves its
    # directory (cgroups here) or stays in it (the fallback); after `acx run` none is alive.
    pids = tmp_path / "pids"
    pids.mkdir()
    with (tmp_path / "d.jsonl").open("w") as fh:
        for i in range(3):
            fh.write(f'{{"id": "t{i}", "question": "q", "answer": "a"}}\n')
    cd = "cd /; " if CGROUPS else ""
    agent = (
        f"env -i /usr/bin/setsid /bin/sh -c '{cd}echo $$ > {pids}/$$; exec sleep 300' "
        "</dev/null >/dev/null 2>&1 & sleep 0.2; echo a"
    )
    (tmp_path / "s.yaml").write_text(
        "version: 1\nname: dm\nrequests:\n  - name: dm\n    benchmark: {id: exact_match, dataset: d.jsonl}\n"
        f'    harness: {{id: command, command: "{agent}"}}\n'
        "    environment: {id: host_process, evaluation_environment_mode: none}\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "acx", "run", "s.yaml", "--results-dir", "r", "--progress", "none"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) == 3
    survivors = [pid for pid in started if not _wait_dead(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


@needs_cgroups
def test_orphaned_empty_session_cgroups_are_swept_live_ones_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A session never closed (a crash, a dropped driver) leaves its cgroup; once its processes are
    # gone, the next acx process's probe removes it. A live session's empty cgroup is held open,
    # and a young one is spared (another acx may be between its mkdir and holding it open).
    from acx.drivers import host_process as hp

    async def go() -> tuple[str, str, object]:
        driver = HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path), containment="cgroup"))
        live = await driver.open(OpenRequest(session_id=f"live-{os.getpid()}"))
        dropped = await driver.open(OpenRequest(session_id=f"dropped-{os.getpid()}"))
        assert (await dropped.exec(["true"])).returncode == 0
        os.close(dropped._cgroup_fd)  # type: ignore[attr-defined]  # what the process's end does
        return live.cgroup, dropped.cgroup, live  # type: ignore[attr-defined]

    live_cg, dropped_cg, live = trio.run(go)
    parent = cgroup_parent()
    assert parent is not None
    hp._sweep_orphan_cgroups(parent)
    assert os.path.isdir(dropped_cg) and os.path.isdir(live_cg)  # both young
    monkeypatch.setattr(hp, "_SWEEP_MIN_AGE", 0.0)
    hp._sweep_orphan_cgroups(parent)
    assert not os.path.exists(dropped_cg) and os.path.isdir(live_cg)
    trio.run(live.close)  # type: ignore[attr-defined]
    assert not os.path.exists(live_cg)
