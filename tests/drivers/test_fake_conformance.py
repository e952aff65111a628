"""The public conformance suite against the in-memory fake driver.  # contract E1 E2 H5 T3 V2"""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.drivers.fake import FakeDriver
from acx.testing import driver_conformance as dc


@pytest.mark.parametrize("check", dc.CHECKS, ids=dc.check_id)
def test_fake_conformance(check: dc.Check, tmp_path: Path) -> None:
    # contract E1, E2, H5, T3, V2
    driver = FakeDriver()
    dc.run_check(check, lambda: driver, scratch=tmp_path)
    assert driver.live_sessions() == []
