"""`acx check` and `acx fmt` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acx.cli import main

GOOD = 'run r {\n  harness none\n  benchmark exact_match {\n    dataset = "qa.jsonl"\n  }\n}\n'
UGLY = 'run r { harness none ; benchmark exact_match { dataset = "qa.jsonl" } }  # keep me\n'


def test_check_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.acx").write_text(GOOD)
    assert main(["check", str(tmp_path / "a.acx")]) == 0
    assert "ok" in capsys.readouterr().out


def test_check_reports_every_file_and_json_is_the_editor_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.acx").write_text("run r { x = }\n")
    (tmp_path / "b.acx").write_text("run r { model { id = nope } }\n")
    (tmp_path / "c.acx").write_text(GOOD)
    files = [str(tmp_path / n) for n in ("a.acx", "b.acx", "c.acx")]
    assert main(["check", *files, "--format", "json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["valid"] is False
    assert [(Path(d["span"]["file"]).name, d["code"]) for d in payload["diagnostics"]] == [
        ("a.acx", "E0106"),
        ("b.acx", "E0125"),
    ]


def test_check_text_has_code_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.acx").write_text("run r {\n  execution { run_timeout = 30min }\n}\n")
    assert main(["check", str(tmp_path / "a.acx")]) == 2
    err = capsys.readouterr().err
    assert "error[E0108]" in err and "^^^^^" in err and "help:" in err and "Traceback" not in err


def test_check_runs_schema_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("acx.compiler._validate")
    text = 'run r { benchmark exact_match { dataset = "d"; case_sensitve = true } }\n'
    (tmp_path / "a.acx").write_text(text)
    assert main(["check", str(tmp_path / "a.acx"), "--format", "json"]) == 2
    diagnostics = json.loads(capsys.readouterr().out)["diagnostics"]
    (diag,) = [d for d in diagnostics if "case_sensitve" in d["message"]]
    assert "case_sensitive" in diag.get("help", "")
    assert (diag["span"]["line"], diag["span"]["col"]) == (1, 48)  # the key as written in the .acx


def test_check_accepts_yaml_and_recipe_libraries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text("runtime: {progress: plain}\n")
    (tmp_path / "lib.acx").write_text('let x = 1\nrecipe r { match { benchmark = "b" } }\n')
    assert main(["check", str(tmp_path / "c.yaml"), str(tmp_path / "lib.acx")]) == 0


def test_check_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nope.acx"), "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["diagnostics"][0]["code"] == "E0120"


def test_fmt_check_diff_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.acx"
    path.write_text(UGLY)
    assert main(["fmt", "--check", str(path)]) == 1
    assert path.read_text() == UGLY
    assert main(["fmt", "--diff", str(path)]) == 1
    assert "+  harness none" in capsys.readouterr().out
    assert path.read_text() == UGLY
    assert main(["fmt", str(path)]) == 0
    formatted = path.read_text()
    assert formatted == GOOD.replace("\n}\n", "\n}  # keep me\n", 1) or "# keep me" in formatted
    assert main(["fmt", "--check", str(path)]) == 0


def test_fmt_syntax_error_exits_2_and_leaves_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.acx"
    path.write_text("run r {\n")
    assert main(["fmt", str(path)]) == 2
    assert "E0103" in capsys.readouterr().err
    assert path.read_text() == "run r {\n"


def test_fmt_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("a=1;b=2"))
    assert main(["fmt", "-"]) == 0
    assert capsys.readouterr().out == "a = 1\nb = 2\n"


def test_shipped_examples_are_fmt_clean(capsys: pytest.CaptureFixture[str]) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    mine = [examples / n for n in ("common.acx", "nightly.acx", "docker-smoke.acx", "run-config.acx")]
    assert main(["fmt", "--check", *map(str, mine)]) == 0
    assert main(["check", *map(str, mine)]) == 0


def test_check_recipe_value_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("acx.compiler._recipes")
    (tmp_path / "r.acx").write_text('recipe r {\n  set { run_timer_compensation_seconds = "soon" }\n}\n')
    assert main(["check", str(tmp_path / "r.acx"), "--format", "json"]) == 2
    (diag,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert "float" in diag["message"]
