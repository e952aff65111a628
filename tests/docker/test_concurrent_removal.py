"""Two removers of one object (a gc and a sweep at the start of another run) both succeed."""

from __future__ import annotations

import threading

from acx.drivers.docker import docker_client, list_objects
from acx.drivers.docker._engine import _remove_container
from conftest import BUSYBOX


def test_concurrent_removals_of_one_container_both_succeed(run_label: str) -> None:
    # contract E1: "removal of container … is already in progress" (409) is not a failure
    client = docker_client()
    for _ in range(4):
        cid = client.api.create_container(
            BUSYBOX, ["sleep", "300"], labels={"acx.managed": "docker", "acx.test": run_label}
        )["Id"]
        client.api.start(cid)
        errors: list[BaseException] = []

        def remove(cid: str = cid, errors: list[BaseException] = errors) -> None:
            try:
                _remove_container(client, cid)
            except BaseException as exc:  # collected: the assertion below reports it
                errors.append(exc)

        threads = [threading.Thread(target=remove) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    assert list_objects(labels={"acx.test": run_label}) == []
