"""Every shipped example is canonical (`acx fmt --check`) and valid (`acx check`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.cli import main

ROOT = Path(__file__).parent.parent / "examples"
#: examples/plugin needs its package installed: tests/test_plugin_example.py checks it that way.
EXAMPLES = sorted(p for p in ROOT.rglob("*.acx") if "plugin" not in p.relative_to(ROOT).parts)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_fmt_clean_and_valid(path: Path) -> None:
    assert main(["fmt", "--check", str(path)]) == 0
    assert main(["check", str(path)]) == 0
