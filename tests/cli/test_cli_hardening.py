"""QA hardening through the CLI: libraries in `acx validate`, warnings in `acx check --format json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acx.cli import main


def test_validate_accepts_an_acx_library_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `acx validate` takes .acx files exactly as `acx check` does, including files made for `import`.
    lib = tmp_path / "common.acx"
    lib.write_text('let models = ["a", "b"]\n', encoding="utf-8")
    assert main(["validate", str(lib), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["valid"] is True
    assert payload["files"] == [{"path": str(lib), "kind": "library", "valid": True, "error_count": 0}]
    broken = tmp_path / "broken.acx"
    broken.write_text("let models = [\n", encoding="utf-8")
    assert main(["validate", str(broken)]) == 2
    assert "error[E0103]" in capsys.readouterr().err


def test_check_json_lists_warnings_without_failing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # contract R10
    spec = tmp_path / "o.acx"
    spec.write_text(
        "orchestration o {\n"
        '  defaults { model { id = "m" } harness openai_chat { max_tokens = 9 } }\n'
        '  run "a" { benchmark exact_match { dataset = "qa.jsonl" } }\n'
        '  run "b" { benchmark exact_match { dataset = "qa.jsonl" } harness oracle {} }\n'
        "}\n",
        encoding="utf-8",
    )
    assert main(["check", str(spec), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["valid"] is True and payload["warning_count"] == 1
    (warning,) = payload["diagnostics"]
    assert warning["severity"] == "warning" and warning["code"] == "W0301"
    assert warning["span"]["line"] == 2 and warning["related"][0]["span"]["line"] == 4


def test_fmt_rewrites_in_place_keeping_the_file_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.acx"
    spec.write_text("let  x =  1\n", encoding="utf-8")
    spec.chmod(0o640)
    assert main(["fmt", str(spec)]) == 0
    assert spec.read_text(encoding="utf-8") == "let x = 1\n"
    assert spec.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["s.acx"]  # no temp file left behind
    assert main(["fmt", "--check", str(spec)]) == 0


def test_fmt_refuses_non_acx_files_and_names_missing_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "orch.yaml"
    spec.write_text("version: 1\n", encoding="utf-8")
    missing = tmp_path / "gone.acx"
    assert main(["fmt", str(spec), str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{spec}: error[E0210]: acx fmt formats .acx files" in err
    assert f"{missing}: error[E0120]: file not found" in err
    assert spec.read_text(encoding="utf-8") == "version: 1\n"
