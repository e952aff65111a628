"""Every contract id the code and tests cite is defined in docs/contracts.md, once."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ID = r"(?:RC|[RPESBHTVAM])\d{1,2}"
#: `# contract T2`, `contracts E1, E2 and V2`, `(contract E1: no debris)`
CITED = re.compile(rf"\bcontracts?\s+({ID}(?:(?:\s*[,/]\s*|\s+and\s+|\s+){ID})*)\b")
#: parenthesised citations in prose: `(P7)`, `(E2, H5, V2: ...)`, `(RC1 …)`
PAREN = re.compile(rf"\(({ID}(?:\s*[,/]\s*{ID})*)(?=[\s),:;])")
DEFINED = re.compile(rf"^- \*\*({ID})\*\* ", re.M)


def _cited() -> dict[str, str]:
    where: dict[str, str] = {}
    for base in ("src", "tests", "bench"):
        for path in sorted((ROOT / base).rglob("*.py")):
            if path.name == Path(__file__).name:
                continue
            text = path.read_text(encoding="utf-8")
            for pattern in (CITED, PAREN):
                for match in pattern.finditer(text):
                    for cid in re.findall(ID, match.group(1)):
                        where.setdefault(cid, f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}")
    return where


def _defined() -> list[str]:
    return DEFINED.findall((ROOT / "docs" / "contracts.md").read_text(encoding="utf-8"))


def test_every_cited_contract_is_defined() -> None:
    defined = set(_defined())
    missing = {cid: at for cid, at in _cited().items() if cid not in defined}
    assert not missing, f"cited but not defined in docs/contracts.md: {missing}"


def test_definitions_are_unique_and_the_scan_finds_citations() -> None:
    ids = _defined()
    assert len(ids) == len(set(ids)), "an id is defined twice"
    cited = _cited()
    # The scan itself works: both citation forms are found (a broken pattern would pass vacuously).
    assert len(cited) > 50 and {"P7", "T3", "RC1", "M4"} <= set(cited)


def test_every_defined_contract_is_cited_by_a_test() -> None:
    # Each contract has at least one test that says it checks it (`# contract A9`); the scan is of
    # tests/ only, so a citation in src/ does not count as a test.
    tested: set[str] = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text(encoding="utf-8")
        for pattern in (CITED, PAREN):
            for match in pattern.finditer(text):
                tested.update(re.findall(ID, match.group(1)))
    untested = [cid for cid in _defined() if cid not in tested]
    assert "A9" in _defined()
    assert not untested, f"contracts in docs/contracts.md no test cites: {untested}"
