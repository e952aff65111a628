"""Golden tests: the exact rendered diagnostics (text with code frames, and JSON) of bad inputs.

Each ``golden/<case>.yaml`` is compiled with ``acx compile --dry-run`` (plus
``golden/<case>.config.yaml`` as ``--config`` when present) in an isolated project; stderr and the
exit code must match ``<case>.txt``, the ``--format json`` output ``<case>.json``.
Regenerate after an intended change with ``ACX_UPDATE_GOLDEN=1 pytest tests/compiler/test_cfg_golden.py``
and review the diff.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from acx.cli import main

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.yaml") if not p.stem.endswith(".config"))
UPDATE = os.environ.get("ACX_UPDATE_GOLDEN") == "1"


def _run(case: str, project: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> tuple[int, str]:
    shutil.copy(GOLDEN / f"{case}.yaml", project / f"{case}.yaml")
    argv = ["compile", f"{case}.yaml", "--dry-run", "--format", fmt]
    config = GOLDEN / f"{case}.config.yaml"
    if config.exists():
        shutil.copy(config, project / "layer.yaml")
        argv += ["--config", "layer.yaml"]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (out if fmt == "json" else err)


def _check(path: Path, actual: str) -> None:
    if UPDATE:
        path.write_text(actual, encoding="utf-8")
    assert path.exists(), f"missing golden {path.name}; run with ACX_UPDATE_GOLDEN=1"
    assert actual == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", CASES)
def test_golden_diagnostics(case: str, project: Path, capsys, monkeypatch) -> None:
    # contracts R6, R7, R12, R2; reference §3: every bad input → one clear error, exit 2, no traceback
    monkeypatch.delenv("ACX_GOLDEN_UNSET_URL", raising=False)
    monkeypatch.setenv("MODEL_HOST", "localhost")
    code, text = _run(case, project, capsys, "text")
    assert code == 2
    assert "Traceback" not in text
    _check(GOLDEN / f"{case}.txt", f"exit {code}\n{text}")
    code, payload = _run(case, project, capsys, "json")
    assert code == 2
    _check(GOLDEN / f"{case}.json", payload)


def test_every_listed_bad_input_has_a_golden() -> None:
    required = {
        "unknown_key",
        "wrong_type",
        "models_section",
        "embedded_var",
        "missing_env_var",
        "unknown_component",
        "duplicate_request",
        "task_concurrency_in_request",
        "malformed_yaml",
    }
    assert required <= set(CASES)
