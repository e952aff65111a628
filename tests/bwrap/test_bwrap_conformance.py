"""The public conformance suite against the bwrap driver.  # contract E1 E2 H5 T3 V2

Twice: on the host's system directories (no image; read-only root, writable /app…) and on the
acx-test/bookworm root filesystem (an overlay: a writable root, like a container's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.drivers.bwrap import BwrapConfig, BwrapDriver
from acx.testing import driver_conformance as dc


@pytest.mark.parametrize("check", dc.CHECKS, ids=dc.check_id)
def test_bwrap_conformance_host_root(check: dc.Check, tmp_path: Path) -> None:
    dc.run_check(
        check, lambda: BwrapDriver(BwrapConfig(workdir_root=str(tmp_path / "s"), allow_root=True)), scratch=tmp_path
    )


@pytest.mark.parametrize("check", dc.CHECKS, ids=dc.check_id)
def test_bwrap_conformance_bookworm_rootfs(check: dc.Check, tmp_path: Path, bookworm: str) -> None:
    config = BwrapConfig(rootfs=bookworm, workdir_root=str(tmp_path / "s"), allow_root=True)
    dc.run_check(check, lambda: BwrapDriver(config), scratch=tmp_path)
