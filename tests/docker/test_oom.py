"""An OOM kill inside a Docker sandbox is reported as one, not as a bare exit 137 (issue 11.14)."""

from __future__ import annotations

import os
from typing import Any

import trio

from acx.drivers._base import OpenRequest
from acx.drivers.docker import list_objects
from acx.ir import EnvironmentSetup, ResourceRequirements
from conftest import BOOKWORM

_NOTE = "a process was OOM-killed"


def test_oom_kill_in_a_running_sandbox_is_noted(run_label: str, docker_driver: Any) -> None:
    # contract E2 (issue 11.14): the engine's OOMKilled flag stays false while the container keeps
    # running; the cgroup's oom_kill counter says what happened. A plain SIGKILL gets no note.
    async def main() -> None:
        session = await docker_driver().open(
            OpenRequest(
                session_id=f"oom-{run_label}-{os.urandom(3).hex()}",
                setup=EnvironmentSetup(image=BOOKWORM, workdir="/work"),
                resources=ResourceRequirements(memory_mb=64),
                labels={"acx.test": run_label},
            )
        )
        try:
            hog = ["python3", "-c", "x = bytearray(400 * 1024 * 1024); print('survived')"]
            res = await session.exec(hog)
            assert res.returncode == 137 and "survived" not in res.stdout
            assert _NOTE in res.stderr, res.stderr
            # Killed, but not for memory: no note (the counter has not moved).
            res = await session.exec("kill -9 $$", shell=True)
            assert res.returncode == 137 and _NOTE not in res.stderr, res.stderr
            # The sandbox survives and notes the next OOM kill too.
            res = await session.exec(hog)
            assert res.returncode == 137 and _NOTE in res.stderr, res.stderr
            assert (await session.exec(["true"])).ok
        finally:
            await session.close()

    trio.run(main)
    assert list_objects(labels={"acx.test": run_label}) == []
