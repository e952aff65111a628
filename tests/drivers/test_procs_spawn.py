"""acx.drivers._procs.spawn through the C helper ``_cspawn`` (vfork + execve, optionally straight
into a cgroup): the same process contract as subprocess.Popen(start_new_session=True) — own
session, only stdin/stdout/stderr inherited, default signal dispositions, Popen's errors — and a
command that cannot join its cgroup never runs.
# contract E2, T3
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from acx.drivers import _procs
from acx.drivers.host_process import cgroup_parent

needs_cspawn = pytest.mark.skipif(
    not _procs.FAST_SPAWN, reason="acx.drivers._cspawn is not built (no C compiler at install time)"
)
ENV = {b"PATH": b"/usr/bin:/bin"}


def _run(argv: list[str], cwd: str = "/", env: dict[bytes, bytes] = ENV, procs: str | None = None) -> tuple[int, str]:
    r, w = os.pipe()
    try:
        proc = _procs.spawn(argv, subprocess.DEVNULL, w, w, cwd, env, procs)
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = fh.read().decode()
    return proc.wait(), out


def test_the_build_has_the_c_helper_when_required() -> None:
    # scripts/test.sh installs a compiler, builds the helper and sets ACX_REQUIRE_CSPAWN=1: a
    # silently missing helper would hide the slow path (and skip this file) in CI.
    if os.environ.get("ACX_REQUIRE_CSPAWN") == "1":
        assert _procs.FAST_SPAWN


@needs_cspawn
def test_a_command_runs_in_its_own_session_with_its_cwd_and_env(tmp_path: Path) -> None:
    code, out = _run(["sh", "-c", 'echo "$$ $(ps -o sid= -p $$) $PWD $X"'], str(tmp_path), {**ENV, b"X": b"y"})
    pid, sid, cwd, x = out.split()
    assert code == 0 and pid == sid and cwd == str(tmp_path) and x == "y"


@needs_cspawn
def test_only_stdin_stdout_stderr_are_inherited() -> None:
    leak = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leak, True)  # even an inheritable descriptor is closed in the child
    try:
        code, out = _run(["sh", "-c", "ls /proc/$$/fd"])
    finally:
        os.close(leak)
    assert code == 0 and sorted(int(fd) for fd in out.split()) == [0, 1, 2]


@needs_cspawn
def test_signal_dispositions_and_mask_are_the_defaults() -> None:
    # Python ignores SIGPIPE (and handlers cannot survive exec); nothing ignored or blocked remains.
    old = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        code, out = _run(["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"])
    finally:
        signal.signal(signal.SIGUSR1, old)
    fields = dict(line.split(":\t") for line in out.splitlines())
    assert code == 0 and {int(v, 16) for v in fields.values()} == {0}, out


@needs_cspawn
def test_exit_codes_and_signals_as_subprocess_reports_them() -> None:
    assert _run(["sh", "-c", "exit 3"])[0] == 3
    assert _run(["sh", "-c", "kill -TERM $$"])[0] == -signal.SIGTERM


@needs_cspawn
def test_errors_are_popens(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(FileNotFoundError) as missing_cwd:
        _run(["true"], cwd=str(tmp_path / "nope"))
    assert missing_cwd.value.filename == str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        _run(["no-such-program-acx"])
    with pytest.raises(PermissionError):
        _run([str(script)])
    with pytest.raises(PermissionError):  # found on PATH, not executable: EACCES as execvp says
        _run(["not-executable"], env={b"PATH": os.fsencode(tmp_path)})
    with pytest.raises(ValueError):
        _run(["echo", "a\0b"])
    with pytest.raises(ValueError):
        _run(["true"], env={**ENV, b"A=B": b"c"})


@needs_cspawn
def test_a_relative_program_path_resolves_against_the_cwd(tmp_path: Path) -> None:
    (tmp_path / "prog").write_text("#!/bin/sh\necho ran\n")
    (tmp_path / "prog").chmod(0o755)
    assert _run(["./prog"], cwd=str(tmp_path)) == (0, "ran\n")


@pytest.mark.skipif(cgroup_parent() is None, reason="this process cannot create and join a cgroup v2 here")
@needs_cspawn
def test_a_command_starts_inside_the_cgroup() -> None:
    parent = cgroup_parent()
    assert parent is not None
    cg = os.path.join(parent, f"acx-spawntest-{os.getpid()}")
    os.mkdir(cg)
    try:
        code, out = _run(["cat", "/proc/self/cgroup"], procs=os.path.join(cg, "cgroup.procs"))
    finally:
        os.rmdir(cg)
    unified = [line for line in out.splitlines() if line.startswith("0::")]
    assert code == 0 and unified and unified[0].endswith(f"/acx-spawntest-{os.getpid()}"), out


@needs_cspawn
def test_a_command_that_cannot_join_its_cgroup_never_runs(tmp_path: Path) -> None:
    procs = str(tmp_path / "no-cgroup" / "cgroup.procs")
    marker = tmp_path / "ran"
    with pytest.raises(OSError) as exc:
        _run(["touch", str(marker)], procs=procs)
    assert exc.value.filename == procs and not marker.exists()


def test_offload_runs_quick_calls_inline_and_slow_ones_in_a_worker_thread() -> None:
    # contract E2: the choice follows how long the calls take inline; a slow period still runs
    # one call in PROBE inline, so a machine that became quiet again is noticed.
    import threading
    import time

    import trio

    where: list[bool] = []

    def call(seconds: float) -> None:
        where.append(threading.current_thread() is threading.main_thread())
        time.sleep(seconds)

    async def go() -> None:
        # A threshold far above what a quick call costs on a loaded machine (a 2 ms one was
        # crossed by a preempted sleep(0) under CI load): the slow call lifts the average to
        # 0.05 s, five quick probes bring it back under 0.02 s, and ten are made.
        offload = _procs.Offload(threshold=0.02)
        await offload.run(call, 0)
        await offload.run(call, 0.25)  # inline (the average was 0): now it is slow
        assert not offload.inline
        for _ in range(10 * offload.PROBE):
            await offload.run(call, 0)
        assert offload.inline  # the inline probes measured quick calls again

    trio.run(go)
    probe = _procs.Offload.PROBE
    assert where[:2] == [True, True]
    assert where[2 : 2 + probe - 1] == [False] * (probe - 1) and where[2 + probe - 1]
    assert where[-1]
