"""Every diagnostic code acx can emit is documented (docs/errors.md, or the planning table it
points to), so a user who meets a code can look it up; the `.acx` catalogue
(``LOWERING_CODES`` / ``SYNTAX_CODES``) is a subset of the documented codes."""

from __future__ import annotations

import re
from pathlib import Path

from acx.compiler._acx_lower import LOWERING_CODES
from acx.grammar._errors import SYNTAX_CODES

ROOT = Path(__file__).resolve().parents[1]
CODE = re.compile(r'"([EW]0\d{3})"')
RANGE = re.compile(r"([EW])0(\d{3})[–-][EW]?0(\d{3})")


def _documented() -> set[str]:
    text = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))
    found = set(re.findall(r"[EW]0\d{3}", text))
    for letter, lo, hi in RANGE.findall(text):  # "E0451–E0457"
        found |= {f"{letter}0{n:03d}" for n in range(int(lo), int(hi) + 1)}
    return found


def test_every_emitted_code_is_documented() -> None:
    # contract R12 (every error has a code a user can look up); issue 11: new codes are registered
    emitted: set[str] = set()
    for path in (ROOT / "src" / "acx").rglob("*.py"):
        emitted |= set(CODE.findall(path.read_text(encoding="utf-8")))
    defaults = {c for c in emitted if c.endswith("00")}  # class defaults (E0200, ...), never shown alone
    missing = sorted(emitted - defaults - _documented())
    assert not missing, f"codes used in src/acx but not in docs/*.md: {missing}"


def test_the_acx_catalogue_is_documented() -> None:
    assert set(SYNTAX_CODES) | set(LOWERING_CODES) <= _documented()
