"""bwrap tests run real bubblewrap sandboxes, never a mock.

Without a working ``bwrap`` (Debian package ``bubblewrap``; scripts/test.sh installs it) the tests
are skipped with a loud reason — unless ``ACX_REQUIRE_BWRAP=1`` (set by ``.ci/run``), which turns
the skip into a failure.
"""

from __future__ import annotations

import os

import pytest

#: The bookworm root filesystem scripts/setup-docker.sh debootstraps (the acx-test/bookworm image).
BOOKWORM_ROOTFS = os.environ.get("ACX_BOOKWORM_ROOTFS", "/var/cache/acx/bookworm-rootfs")


def bwrap_problem() -> str | None:
    from acx.drivers.bwrap import probe_bwrap

    caps = probe_bwrap()
    if caps.network_modes:
        return None
    return caps.unsupported_reasons.get("public", "bwrap cannot run here")


def require_bwrap() -> None:
    problem = bwrap_problem()
    if problem is None:
        return
    message = f"!!! BWRAP TESTS NOT RUN: {problem}"
    if os.environ.get("ACX_REQUIRE_BWRAP") == "1":
        pytest.fail(message + " (ACX_REQUIRE_BWRAP=1)", pytrace=False)
    pytest.skip(message)


def require_bookworm_rootfs() -> str:
    if os.path.isfile(os.path.join(BOOKWORM_ROOTFS, "usr/bin/python3")):
        return BOOKWORM_ROOTFS
    message = f"!!! no bookworm root filesystem at {BOOKWORM_ROOTFS} (run: bash scripts/setup-docker.sh)"
    if os.environ.get("ACX_REQUIRE_BWRAP") == "1":
        pytest.fail(message + " (ACX_REQUIRE_BWRAP=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _require_bwrap() -> None:
    require_bwrap()


@pytest.fixture()
def bookworm() -> str:
    return require_bookworm_rootfs()
