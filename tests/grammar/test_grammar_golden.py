"""Golden tests: every .acx error path renders to the committed text and JSON.

Each ``golden/<case>.acx`` (files under ``golden/_lib`` are only imported) is checked with
``acx check``'s engine; the text rendering (code frames) must equal ``<case>.txt`` and the JSON
rendering ``<case>.json``. Regenerate after a deliberate message change with
``ACX_UPDATE_GOLDEN=1 pytest tests/grammar/test_grammar_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from acx.cli._lang import check_file
from acx.compiler._acx_lower import LOWERING_CODES
from acx.diagnostics import render_json, render_text
from acx.grammar._errors import SYNTAX_CODES

GOLDEN = Path(__file__).with_name("golden")
CASES = sorted(p.name for p in GOLDEN.glob("*.acx"))
UPDATE = os.environ.get("ACX_UPDATE_GOLDEN") == "1"


def _render(case: str) -> tuple[str, str, list[str]]:
    diagnostics = check_file(case)
    return render_text(diagnostics) + "\n", render_json(diagnostics) + "\n", [d.code for d in diagnostics]


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(GOLDEN)  # spans carry paths relative to the golden directory
    text, js, codes = _render(case)
    assert codes, f"{case} must produce at least one diagnostic"
    # The file name states the code its first diagnostic must have.
    assert codes[0] == case.split("_", 1)[0].upper(), codes
    txt_path, json_path = GOLDEN / (case[:-4] + ".txt"), GOLDEN / (case[:-4] + ".json")
    if UPDATE:
        txt_path.write_text(text, encoding="utf-8")
        json_path.write_text(js, encoding="utf-8")
    assert text == txt_path.read_text(encoding="utf-8")
    assert js == json_path.read_text(encoding="utf-8")
    payload = json.loads(js)
    assert payload["valid"] is False and payload["error_count"] == len(codes)
    for diag in payload["diagnostics"]:  # the editor contract: code, message, span, help
        # E0218/E0219: a non-regular input file / an input limit, the same codes as YAML inputs.
        assert diag["code"].startswith(("E01", "E0218", "E0219")) and diag["message"] and diag["help"]
        assert diag["span"]["line"] >= 1


def test_every_code_has_a_golden() -> None:
    """Every E01xx code the grammar and the lowering can emit is exercised by a golden case."""
    covered = {case.split("_", 1)[0].upper() for case in CASES}
    assert set(SYNTAX_CODES) | set(LOWERING_CODES) <= covered, sorted(
        (set(SYNTAX_CODES) | set(LOWERING_CODES)) - covered
    )
