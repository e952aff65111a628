"""The end of `acx run` writes report.html and provenance.json, links the report from summary.md
and prints its path (issue 16 item 4); `--no-report` skips the report; `acx view` on the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acx.cli import main
from acx.report import load_run

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=os.environ
    )


def test_run_writes_report_provenance_and_summary_link(tmp_path: Path) -> None:
    res = _run(
        "run", str(REPO / "examples" / "quickstart.acx"), "--results-dir", "out", "--progress", "none", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    run_dir = next((tmp_path / "out" / "quickstart").iterdir())
    printed = [line.split("report: ", 1)[1] for line in res.stdout.splitlines() if line.startswith("  report: ")]
    assert [(tmp_path / p).resolve() for p in printed] == [(run_dir / "report.html").resolve()]
    assert (run_dir / "report.html").is_file()
    assert "Report: [report.html](report.html)" in (run_dir / "summary.md").read_text(encoding="utf-8")
    prov = json.loads((run_dir / "provenance.json").read_text(encoding="utf-8"))
    assert prov["schema_version"] == "acx.provenance.v1" and prov["tasks_complete"] is True
    assert prov["request"]["execution.run_timeout_seconds"][-1]["source"].endswith("quickstart.acx:19:19")
    chain = prov["chains"][prov["tasks"]["div-2"]["evaluation_timeout_seconds"]]
    assert chain[-1]["layer"] == "recipe:exact_match_default_budgets" and chain[-1]["value"] == 60.0
    task = json.loads(next((run_dir / "details" / "normal").glob("div-2--*/task.json")).read_text())
    assert task["instruction"] == "What is 7 / 2?"
    assert load_run(str(run_dir)).details  # the report's reader accepts what the run wrote


def test_no_report_flag_and_json_output(tmp_path: Path) -> None:
    res = _run(
        "run", str(REPO / "examples" / "quickstart.acx"), "--results-dir", "out", "--progress", "none",
        "--no-report", "--format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    payload = json.loads(res.stdout)
    assert payload["requests"][0]["report"] is None
    run_dir = Path(payload["requests"][0]["run_dir"])
    assert not (run_dir / "report.html").exists() and (run_dir / "provenance.json").is_file()
    assert "report.html" not in (run_dir / "summary.md").read_text(encoding="utf-8")


def test_view_cli_serves_on_loopback_and_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path / "missing")]) == 2
    assert "E0641" in capsys.readouterr().err
    assert main(["view", str(tmp_path), "--port", "70000"]) == 2
    assert "E0642" in capsys.readouterr().err
    proc = subprocess.Popen(
        [sys.executable, "-m", "acx", "view", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "acx view: serving" in line and "at http://127.0.0.1:" in line
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        import urllib.request

        deadline = time.monotonic() + 10
        while True:
            try:
                body = urllib.request.urlopen(url, timeout=5).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert "0 run(s)" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)
