"""``DockerDriver.missing_images``: what cluster placement asks a node's engine (issue 18 item 2,
node labels: the images present)."""

from __future__ import annotations

import trio

from acx.drivers import create_driver

BUSYBOX = "acx-test/busybox:latest"


def test_missing_images_with_pull_never_are_the_absent_ones() -> None:
    driver = create_driver("docker", {"pull": "never"})
    absent = "acx-test/not-there-ever:0"
    assert trio.run(driver.missing_images, [BUSYBOX, absent]) == [absent]
    assert trio.run(driver.missing_images, []) == []


def test_with_pull_missing_nothing_is_missing() -> None:
    # the engine would fetch it: not a reason to keep a sandbox off the node
    driver = create_driver("docker", {"pull": "missing"})
    assert trio.run(driver.missing_images, ["acx-test/not-there-ever:0"]) == []
