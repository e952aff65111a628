"""`output.export` (issue 25 item 5): `acx run` writes the configured exports when the run ends,
inside the run directory by default, the same files `acx results export` writes; a bad entry is
refused when the spec is validated, with its location."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def acx(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_run_writes_the_configured_exports(acx_run: Path, tmp_path: Path) -> None:
    inspect_dir, harbor_dir = acx_run / "exports" / "inspect", acx_run / "exports" / "hb"
    (log,) = inspect_dir.glob("2*.eval")
    assert (inspect_dir / f"acx-export-{acx_run.name}-inspect-eval.manifest.json").is_file()
    (job,) = [p for p in harbor_dir.iterdir() if p.is_dir()]
    assert len([p for p in job.iterdir() if p.is_dir()]) == 6
    # The same bytes as the command writes (the export is a pure function of the run directory).
    res = acx("results", "export", str(acx_run), "--format", "inspect", "-o", str(tmp_path / "again"))
    assert res.returncode == 0, res.stderr
    import zipfile

    ours, again = zipfile.ZipFile(log), zipfile.ZipFile(tmp_path / "again" / log.name)
    assert ours.namelist() == again.namelist()
    assert all(ours.read(n) == again.read(n) for n in ours.namelist())


@pytest.mark.parametrize(
    ("entry", "needle"),
    [("{format: csv}", "csv"), ("{format: inspect, inspect_format: zip}", "zip"), ("{dir: x}", "format")],
)
def test_a_bad_export_entry_is_refused_with_its_location(tmp_path: Path, entry: str, needle: str) -> None:
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "a", "question": "q", "answer": "a"}) + "\n")
    (tmp_path / "spec.yaml").write_text(
        f"""version: 1
name: bad
requests:
  - name: bad
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: none}}
    model: {{id: m}}
    environment: {{id: host_process}}
    output: {{export: [{entry}]}}
"""
    )
    res = acx("validate", "spec.yaml", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    text = res.stdout + res.stderr
    assert "spec.yaml:9" in text and "E0204" in text and needle in text and "Traceback" not in text, text
