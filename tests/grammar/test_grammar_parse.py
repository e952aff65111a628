"""Parser: AST shapes, spans, typed literals, the syntax-error catalog, parser construction."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from acx.errors import AcxSyntaxError
from acx.grammar import _ast as A
from acx.grammar import parse
from acx.grammar._errors import CATALOG
from acx.grammar._parser import _GRAMMAR, _lark, _plain_parse, parser_cache_path

SRC = Path(__file__).resolve().parents[2] / "src" / "acx"


def _codes(text: str) -> list[str]:
    with pytest.raises(AcxSyntaxError) as info:
        parse(text, "t.acx")
    return [d.code for d in info.value.diagnostics]


def test_blocks_labels_and_values() -> None:
    m = parse('run "r-${x}" { harness none; model { id = "m" } }\nlet a = [1, 2.5, true, null]', "t.acx")
    run, let = m.body
    assert isinstance(run, A.Block) and run.kind.value == "run"
    assert run.label == A.Str(("r-", A.Interp("x")))
    assert run.body is not None
    short, model = run.body
    assert isinstance(short, A.Block) and short.label == A.Name("none") and short.body is None
    assert isinstance(model, A.Block) and model.label is None
    assert isinstance(let, A.Let)
    assert let.value == A.ListV((A.Num(1), A.Num(2.5), A.Bool(True), A.Null()))


def test_spans_point_into_the_file() -> None:
    m = parse("run r {\n  execution { max_retries = 2 }\n}\n", "spec.acx")
    run = m.body[0]
    assert isinstance(run, A.Block) and run.body is not None
    execution = run.body[0]
    assert isinstance(execution, A.Block) and execution.body is not None
    assign = execution.body[0]
    assert isinstance(assign, A.Assign)
    assert (assign.key.span.file, assign.key.span.line, assign.key.span.col) == ("spec.acx", 2, 15)
    assert (assign.value.span.line, assign.value.span.col, assign.value.span.end_col) == (2, 29, 30)
    assert (run.span.line, run.span.end_line) == (1, 3)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("500ms", 0.5), ("1.5h", 5400), ("2d", 172800)],
)
def test_durations(text: str, seconds: float) -> None:
    value = parse(f"a = {text}").body[0].value  # type: ignore[union-attr]
    assert value == A.Duration(text, float(seconds))


@pytest.mark.parametrize(
    ("text", "mib"),
    [("512MiB", 512), ("16GiB", 16384), ("1TiB", 1024**2), ("2048KiB", 2), ("1GB", 1e9 / 2**20)],
)
def test_sizes(text: str, mib: float) -> None:
    value = parse(f"a = {text}").body[0].value  # type: ignore[union-attr]
    assert isinstance(value, A.Size) and value.mib == pytest.approx(mib)


def test_keywords_double_as_field_names_where_no_keyword_fits() -> None:
    # contextual lexer: `in`, `true`, `null` are names in key/label positions
    m = parse("a { in = 1 }\nharness true\nb = { null = 2 }")
    assert [type(s).__name__ for s in m.body] == ["Block", "Block", "Assign"]


def test_string_escapes_and_interpolation() -> None:
    s = parse(r'a = "q\"\\\n\t\u00e9 $${lit} ${name} $ x"').body[0].value  # type: ignore[union-attr]
    assert s == A.Str(('q"\\\n\té ${lit} ', A.Interp("name"), " $ x"))


def test_comments_are_collected_with_positions() -> None:
    m = parse("# one\na = 1 // two\n")
    assert [(c.text, c.line, c.col) for c in m.comments] == [("# one", 1, 1), ("// two", 2, 7)]


def test_one_error_per_mistake_and_recovery_continues() -> None:
    # two independent missing values and a missing comma: three errors, no cascade
    assert _codes("a { x = }\nb = [1 2]\nc { d = ; e = 1 }\n") == ["E0106", "E0109", "E0106"]


def test_unrecoverable_error_stops_the_file_with_one_error() -> None:
    assert _codes("a = 1 }\nb = ]\n") == ["E0110"]


def test_eof_reports_the_unclosed_opener() -> None:
    with pytest.raises(AcxSyntaxError) as info:
        parse("a {\n  b = [1,\n", "t.acx")
    d = info.value.diagnostics[0]
    assert d.code == "E0103" and d.related[0].span.line == 2 and d.related[0].span.col == 7


@pytest.mark.parametrize(("label", "entry"), sorted(CATALOG.items()))
def test_catalog_examples_map_to_their_own_entry(label: str, entry: object) -> None:
    from lark.exceptions import UnexpectedInput

    from acx.grammar._errors import _catalog_label

    for example in CATALOG[label].examples:
        with pytest.raises(UnexpectedInput) as info:
            _plain_parse(example)
        assert _catalog_label(info.value, _plain_parse) == label, example


def test_grammar_is_conflict_free_in_strict_mode() -> None:
    from lark import Lark

    Lark(_GRAMMAR.read_text(), parser="lalr", lexer="contextual", strict=True)


def test_parser_is_built_once_per_process() -> None:
    assert _lark() is _lark()


def test_cache_dir_unwritable_falls_back_to_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert parser_cache_path() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = parser_cache_path()
    assert path is not None and path.startswith(str(tmp_path))


def test_cold_parser_build_writes_and_reuses_the_disk_cache(tmp_path: Path) -> None:
    code = "from acx.grammar import parse; parse('a = 1'); print('ok')"
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "ok"
    assert list((tmp_path / "acx").iterdir()), "the built parser is cached on disk"


def test_importing_acx_grammar_does_not_import_lark() -> None:
    code = "import sys, acx.grammar, acx.cli; print('lark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_lark_is_imported_only_inside_acx_grammar() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "grammar" not in path.parts
        and any(
            line.lstrip().startswith(("import lark", "from lark"))
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert offenders == []
