"""The public driver conformance suite against the docker driver on a real engine.

# contract E1 E2 H5 T3 V2
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acx.testing import driver_conformance as dc

IMAGES = ["acx-test/bookworm:latest", "acx-test/busybox:latest"]


@pytest.mark.parametrize("image", IMAGES, ids=["bookworm", "busybox"])
@pytest.mark.parametrize("check", dc.CHECKS, ids=dc.check_id)
def test_docker_conformance(check: dc.Check, image: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract E1, E2, H5, T3, V2 — also on a FROM-scratch busybox image (POSIX sh only)
    dc.run_check(check, lambda: docker_driver(image), scratch=tmp_path)
