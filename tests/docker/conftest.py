"""Docker tests run against a real engine, never a mock.

Every test under ``tests/docker/`` is marked ``docker``. Without a reachable engine and the local
test images (``bash scripts/setup-docker.sh`` provides both) the tests are skipped with a loud
reason — unless ``ACX_REQUIRE_DOCKER=1`` (set by ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

BUSYBOX = "acx-test/busybox:latest"
BOOKWORM = "acx-test/bookworm:latest"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here) and not item.get_closest_marker("no_engine"):
            item.add_marker(pytest.mark.docker)


@functools.lru_cache(maxsize=1)
def _engine_problem() -> str | None:
    try:
        from acx.drivers.docker import docker_client

        client = docker_client()
        client.ping()
        for image in (BUSYBOX, BOOKWORM):
            try:
                client.images.get(image)
            except Exception:
                return f"test image {image} is missing (run: bash scripts/setup-docker.sh)"
    except Exception as exc:
        return f"no Docker engine reachable ({type(exc).__name__}: {exc}); run: bash scripts/setup-docker.sh"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_engine: a tests/docker test that needs no Docker engine")


@pytest.fixture(autouse=True)
def _require_engine(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("no_engine"):
        return
    problem = _engine_problem()
    if problem is None:
        return
    message = f"!!! DOCKER TESTS NOT RUN: {problem}"
    if os.environ.get("ACX_REQUIRE_DOCKER") == "1":
        pytest.fail(message + " (ACX_REQUIRE_DOCKER=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture
def run_label() -> Iterator[str]:
    """A unique label value; everything a test creates carries it and is removed afterwards."""
    value = uuid.uuid4().hex[:12]
    yield value
    if _engine_problem() is None:
        from acx.drivers.docker import close_objects

        close_objects(predicate=lambda lab: lab.get("acx.test") == value)


def make_driver(image: str = BOOKWORM, workdir: str | None = "/work", **config: Any) -> Any:
    """A DockerDriver whose sessions default to a local test image (tests only: the planner
    normally fills ``setup.image``)."""
    from acx.drivers._base import OpenRequest
    from acx.drivers._specs import DockerConfig
    from acx.drivers.docker import DockerDriver
    from acx.ir import EnvironmentSetup

    class _TestDockerDriver(DockerDriver):
        async def open(self, request: OpenRequest) -> Any:
            setup = request.setup
            if setup.image is None and request.build_context is None:
                setup = EnvironmentSetup(
                    image=image,
                    workdir=setup.workdir or workdir,
                    build_timeout_seconds=setup.build_timeout_seconds,
                )
            return await super().open(msgspec.structs.replace(request, setup=setup))

    return _TestDockerDriver(DockerConfig(**config))


@pytest.fixture
def docker_driver() -> Any:
    """``docker_driver(image=BOOKWORM, workdir="/work", **DockerConfig fields)`` → a test driver."""
    return make_driver
