"""Golden files of the exports of a fixed synthetic run (acx.testing.results): the Inspect log
(`.json` form) and one ATIF trajectory, byte for byte after the acx version is normalised. A
change to a mapping shows up here as a diff to review (ACX_UPDATE_GOLDEN=1 to accept)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from acx import __version__
from acx.results import export_run
from acx.testing.results import synthetic_tasks, write_run

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ACX_UPDATE_GOLDEN") == "1"


def _normalise(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False).replace(__version__, "VERSION") + "\n"


def check_golden(name: str, obj: Any) -> None:
    path = GOLDEN / name
    got = _normalise(obj)
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert path.exists(), f"missing golden {path.name}; run with ACX_UPDATE_GOLDEN=1"
    assert got == path.read_text(encoding="utf-8"), f"export differs from {path.name} (ACX_UPDATE_GOLDEN=1 to accept)"


@pytest.fixture()
def synthetic_run(tmp_path: Path) -> Path:
    tasks = synthetic_tasks(3, seed=7)
    tasks[1]["attempts"][0]["retries"] = [{"reason": "overloaded", "stage": "run", "status": "run_error"}]
    return write_run(tmp_path / "run", tasks)


def test_inspect_json_export_matches_its_golden_file(synthetic_run: Path, tmp_path: Path) -> None:
    done = export_run(synthetic_run, "inspect", tmp_path / "out", inspect_format="json")
    (name,) = done.files
    check_golden("inspect_synthetic.json", json.loads((tmp_path / "out" / name).read_text()))
    manifest = json.loads((tmp_path / "out" / done.manifest).read_text())
    manifest["source"]["path"] = "RUN"
    check_golden("inspect_synthetic.manifest.json", manifest)


def test_atif_export_matches_its_golden_file(synthetic_run: Path, tmp_path: Path) -> None:
    done = export_run(synthetic_run, "atif", tmp_path / "out")
    assert len(done.files) == 3
    first = sorted(done.files)[0]
    check_golden("atif_synthetic_first.json", json.loads((tmp_path / "out" / first).read_text()))
