"""``storage_mb`` reaches the engine as a storage limit; dropped only when the engine refuses,
and then said when the session opens (issue 11.17)."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers.docker import docker_client, list_objects
from acx.ir import EnvironmentSetup, ResourceRequirements
from conftest import BOOKWORM


def test_storage_limit_is_passed_to_the_engine_or_said_at_open(
    run_label: str, docker_driver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # contract P7 (issue 11.17): the reference passes the limit and drops it only on refusal
    api = docker_client().api
    asked: list[Any] = []
    real = api.create_host_config

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("storage_opt"))
        return real(*args, **kwargs)

    async def main() -> None:
        driver = docker_driver()
        sessions = []
        try:
            for _ in range(2):
                sessions.append(
                    await driver.open(
                        OpenRequest(
                            session_id=f"sto-{run_label}-{os.urandom(3).hex()}",
                            setup=EnvironmentSetup(image=BOOKWORM, workdir="/work"),
                            resources=ResourceRequirements(memory_mb=256, storage_mb=512),
                            labels={"acx.test": run_label},
                        )
                    )
                )
            first, second = sessions
            assert asked[0] == {"size": "512M"}  # the engine was asked for the limit
            opts = api.inspect_container(first.container_id)["HostConfig"].get("StorageOpt")
            if opts:  # an engine that can limit disk size (overlay2 on xfs with pquota, …)
                assert opts == {"size": "512M"} and first.open_notes == []
            else:  # refused: dropped, and said when the session opened — for every session
                assert asked[-1] is None  # not asked again once it refused
                for session in (first, second):
                    (note,) = session.open_notes
                    assert "storage_mb = 512 is not enforced" in note and "refused" in note
                warned = [r for r in caplog.records if r.levelno == logging.WARNING and "storage_mb" in r.message]
                assert len(warned) == 1  # once per driver in the run log; every session has its note
                assert (await first.exec(["true"])).ok  # the session itself is fine
        finally:
            for session in sessions:
                await session.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "create_host_config", spy)
        caplog.set_level(logging.INFO, logger="acx.drivers.docker")
        trio.run(main)
    assert list_objects(labels={"acx.test": run_label}) == []
