"""host_process: acx creates directories only inside a session's own directory (QA run #7)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver
from acx.errors import DriverError


def test_writes_create_parents_only_inside_the_session(tmp_path: Path) -> None:
    # contract E1
    async def main() -> None:
        driver = HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path / "sessions")))
        session = await driver.open(OpenRequest(session_id="s1"))
        try:
            await session.write_text("a/b/c.txt", "inside")
            assert (Path(session.root) / "a" / "b" / "c.txt").read_text() == "inside"
            outside = tmp_path / "nowhere" / "deeper" / "prompt.txt"
            with pytest.raises(DriverError, match="does not exist on the host"):
                await session.write_text(str(outside), "x")
            assert not (tmp_path / "nowhere").exists()
            (tmp_path / "exists").mkdir()
            await session.write_text(str(tmp_path / "exists" / "f.txt"), "ok")  # an existing host dir is fine
        finally:
            await session.close()

    trio.run(main)


def test_reading_a_fifo_or_a_directory_fails_at_once_instead_of_hanging(tmp_path: Path) -> None:
    # contract E1
    # A FIFO with no writer would block the worker thread forever (trio cannot cancel it).
    import os

    async def main() -> None:
        driver = HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path / "sessions")))
        session = await driver.open(OpenRequest(session_id="s2"))
        try:
            os.mkfifo(Path(session.root) / "ans.txt")
            (Path(session.root) / "adir").mkdir()
            with trio.fail_after(5):
                with pytest.raises(DriverError, match="not a regular file"):
                    await session.read_text("ans.txt")
                with pytest.raises(IsADirectoryError):
                    await session.read_text("adir")
        finally:
            await session.close()

    trio.run(main)


def test_end_run_kills_what_left_the_process_group_but_not_kept_sessions(tmp_path: Path) -> None:
    # contract E1
    # A `setsid` daemon escapes the group kill at the end of its exec; the run's end finds it by
    # its ACX_SESSION_ID marker. A kept session's daemon is left alone; so is another run's.
    # (The process-group path; with cgroups, closing a session kills its daemons at once:
    # tests/drivers/test_host_process_containment.py.)
    import os
    import signal
    import time

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().split(") ", 1)[1][0] != "Z"
        except OSError:
            return False

    async def main() -> dict[str, int]:
        driver = HostProcessDriver(
            HostProcessConfig(workdir_root=str(tmp_path / "sessions"), containment="process_group")
        )
        pids = {}
        for sid in ("run1-abc123-p1", "run1-abc123-p2", "run2-def456-p1"):
            s = await driver.open(OpenRequest(session_id=sid))
            daemon = "setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &"
            await s.exec(["sh", "-c", daemon + " while [ ! -s daemon.pid ]; do sleep 0.01; done"])
            pids[sid] = int((await s.read_text("daemon.pid")).strip())
            await s.close()
        await driver.end_run("run1-abc123-", keep=frozenset({"run1-abc123-p2"}))
        return pids

    pids = trio.run(main)
    try:
        deadline = time.monotonic() + 5
        while alive(pids["run1-abc123-p1"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pids["run1-abc123-p1"])
        assert alive(pids["run1-abc123-p2"]) and alive(pids["run2-def456-p1"])
    finally:
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
