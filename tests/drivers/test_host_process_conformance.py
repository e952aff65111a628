"""The public conformance suite against host_process.  # contract E1 E2 H5 T3 V2"""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver
from acx.testing import driver_conformance as dc


@pytest.mark.parametrize("check", dc.CHECKS, ids=dc.check_id)
def test_host_process_conformance(check: dc.Check, tmp_path: Path) -> None:
    # contract E1, E2, H5, T3, V2
    root = tmp_path / "sessions"
    dc.run_check(check, lambda: HostProcessDriver(HostProcessConfig(workdir_root=str(root))), scratch=tmp_path)
    # every session directory is removed on close
    assert not any(root.iterdir())
