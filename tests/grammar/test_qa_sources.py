"""QA: `.acx` string escapes (lone surrogates) and read errors of top-level files (E0105, E0120)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acx.cli import main
from acx.errors import AcxSyntaxError
from acx.grammar._parser import parse, read_source

SPEC = 'run x {{\n  benchmark exact_match {{ dataset = "{ds}" }}\n  harness command {{ command = "echo" }}\n}}\n'


def _string_value(text: str) -> str:
    module = parse(f'let s = "{text}"\n', "s.acx")
    (part,) = module.body[0].value.parts  # type: ignore[attr-defined]
    assert isinstance(part, str)
    return part


def test_lone_surrogate_escape_is_an_e0105_at_the_escape() -> None:
    # contract R12
    with pytest.raises(AcxSyntaxError) as info:
        parse('let s = "a\\uD800b"\n', "s.acx")
    (diag,) = info.value.diagnostics
    assert diag.code == "E0105" and "surrogate" in diag.message
    assert diag.span is not None and (diag.span.line, diag.span.col, diag.span.end_col) == (1, 11, 17)
    with pytest.raises(AcxSyntaxError):
        parse('let s = "\\uDC00"\n', "s.acx")  # a low surrogate alone


def test_surrogate_pair_escape_is_one_character() -> None:
    # contract R12
    assert _string_value("\\uD83D\\uDE00") == "\U0001f600"
    assert _string_value("\\u00e9") == "é"


@pytest.mark.parametrize("command", [["check"], ["validate"], ["compile", "--dry-run"], ["compile", "--plans"]])
def test_surrogate_in_a_spec_is_a_user_error_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # contract R12
    spec = tmp_path / "s.acx"
    spec.write_text(SPEC.format(ds="\\uD800"), encoding="utf-8")
    assert main([*command, str(spec)]) == 2
    err = capsys.readouterr().err
    assert "error[E0105]" in err and "internal error" not in err


def test_missing_and_directory_spec_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # contract R12
    missing = tmp_path / "nonexist.acx"
    assert main(["compile", "--dry-run", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{missing}: error[E0120]: file not found") and "<input>" not in err
    directory = tmp_path / "dir.acx"
    directory.mkdir()
    assert main(["check", str(directory), "--format", "json"]) == 2
    (diag,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert diag["code"] == "E0218" and diag["path"] == str(directory)  # issue 11 item 9: its own code
    assert "directory" in diag["message"] and "UTF-8" not in diag["help"]


def test_undecodable_bytes_give_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # contract R12
    spec = tmp_path / "bad.acx"
    spec.write_bytes(b'run x {\n  harness command { command = "\xc3\xa9\xff" }\n}\n')
    assert main(["check", str(spec), "--format", "json"]) == 2
    (diag,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert diag["code"] == "E0120" and diag["path"] == str(spec)
    assert diag["span"]["file"] == str(spec)
    assert (diag["span"]["line"], diag["span"]["col"]) == (2, 33)  # after `"é`: columns count characters
    bom = tmp_path / "bom.acx"
    bom.write_bytes(b'\xef\xbb\xbflet x = "\xff"\n')
    with pytest.raises(AcxSyntaxError) as info:
        read_source(str(bom))
    assert info.value.span is not None and (info.value.span.line, info.value.span.col) == (1, 10)
    assert main(["fmt", "--check", str(spec)]) == 2
    assert f"{spec}:2:33: error[E0120]" in capsys.readouterr().err
