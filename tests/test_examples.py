"""Every shipped example is canonical (`acx fmt --check`) and valid (`acx check`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.cli import main

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").rglob("*.acx"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_fmt_clean_and_valid(path: Path) -> None:
    assert main(["fmt", "--check", str(path)]) == 0
    assert main(["check", str(path)]) == 0
