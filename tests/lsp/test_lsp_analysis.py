"""The language server's analysis as pure functions (acx.lsp), without the protocol (issue 27)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from acx.errors import AcxUserError
from acx.lsp import check_buffer, complete, definition, document_symbols, format_buffer, hover, rename_let
from acx.lsp._analysis import offset_of, position_of
from acx.lsp._outline import outline

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NIGHTLY = (EXAMPLES / "nightly.acx").read_text()


def _at(text: str, marker: str) -> tuple[int, int]:
    return position_of(text, text.index(marker) + len(marker))


def _labels(text: str, marker: str, path: str = str(EXAMPLES / "nightly.acx")) -> list[str]:
    return [c.label for c in complete(path, text, *_at(text, marker))]


def test_outline_tracks_blocks_loops_and_values() -> None:
    cut = NIGHTLY.index("id = model_id") + len("id = ")
    o = outline(NIGHTLY[:cut])
    assert [(f.what, f.kind, f.label) for f in o.frames] == [
        ("root", None, None),
        ("block", "orchestration", "nightly"),
        ("for", None, None),
        ("block", "run", "qa-${model_id}"),
        ("block", "model", None),
    ]
    assert (o.expect, o.key) == ("value", "id")
    assert o.loop_vars == ["model_id"]


def test_key_completion_follows_the_schema_path() -> None:
    labels = _labels(NIGHTLY, "      attempts {\n        ")
    assert {"k", "strategy"} <= set(labels) and "run_timeout" not in labels
    # a duration field is offered as written in .acx and as its schema name
    assert {"run_timeout", "run_timeout_seconds"} <= set(_labels(NIGHTLY, "    execution {\n      "))
    # component params: the branch of the benchmark's id
    labels = _labels(NIGHTLY, "      benchmark exact_match {\n        ")
    assert "normalize_whitespace" in labels and "max_tokens" not in labels


def test_value_completion_offers_enum_values_and_lets() -> None:
    assert {"plain", "auto"} <= set(_labels(NIGHTLY, "    progress = "))
    labels = _labels(NIGHTLY, "        dataset = ")
    assert "qa_dataset" in labels and "models" in labels  # lets of the imported common.acx


def test_component_ids_come_from_the_registry_with_descriptions() -> None:
    items = complete(str(EXAMPLES / "nightly.acx"), NIGHTLY, *_at(NIGHTLY, "    environment "))
    by = {c.label: c for c in items}
    assert {"docker", "host_process"} <= set(by)
    assert all(c.kind == "component" for c in items) and by["docker"].documentation


def test_completion_in_a_half_typed_buffer() -> None:
    text = "orchestration x {\n  defaults {\n    execution {\n      attempts { strategy = "
    assert {"avg", "pass"} <= set(_labels(text, "strategy = ", path="/tmp/x.acx"))
    text = 'import "'
    assert any(label.endswith(".acx") for label in _labels(text, 'import "', path=str(EXAMPLES / "new.acx")))


def test_key_hover_is_config_docs() -> None:
    shown = hover(str(EXAMPLES / "nightly.acx"), NIGHTLY, *_at(NIGHTLY, "max_tok")) or ""
    assert "max_tokens" in shown and "completion token cap" in shown and "acx config docs harness openai_chat" in shown
    shown = hover(str(EXAMPLES / "nightly.acx"), NIGHTLY, *_at(NIGHTLY, "retry_min_de")) or ""
    assert "retry_min_delay_seconds" in shown and "default" in shown


def test_value_hover_is_acx_explain(tmp_path: Path) -> None:
    spec = tmp_path / "nightly.acx"
    shutil.copy(EXAMPLES / "nightly.acx", spec)
    shutil.copy(EXAMPLES / "common.acx", tmp_path / "common.acx")
    # The unsaved buffer is what is explained, not the file on disk.
    text = NIGHTLY.replace("run_timeout = 10m", "run_timeout = 20m")
    shown = hover(str(spec), text, *_at(text, "run_timeout = 2"), cwd=str(tmp_path)) or ""
    assert "execution.run_timeout_seconds = 1200" in shown and "winner" in shown and "shadowed" in shown


def test_definition_of_lets_imports_and_recipes(tmp_path: Path) -> None:
    lib = tmp_path / "lib.acx"
    lib.write_text('recipe my_fix {\n  description = "x"\n}\nlet budget = 30m\n')
    text = 'import "lib.acx"\nrun r {\n  execution { run_timeout = budget; enabled_recipes = ["my_fix"] }\n}\n'
    spec = str(tmp_path / "spec.acx")
    [loc] = definition(spec, text, *_at(text, "= budg"))
    assert (Path(loc.path).name, loc.line, loc.col) == ("lib.acx", 3, 4)
    [loc] = definition(spec, text, *_at(text, '["my_f'))
    assert (Path(loc.path).name, loc.line, loc.col) == ("lib.acx", 0, 7)
    [loc] = definition(spec, text, *_at(text, 'import "li'))
    assert Path(loc.path).name == "lib.acx"
    assert definition(spec, text, *_at(text, "execu")) == []


def test_symbols_list_orchestrations_runs_recipes_and_lets() -> None:
    names = [(s.kind, s.name) for s in document_symbols("c.acx", (EXAMPLES / "common.acx").read_text())]
    assert names == [("let", "models"), ("let", "qa_dataset")]
    names = [s.name for s in document_symbols("n.acx", NIGHTLY)]
    assert names == ["orchestration nightly", "run qa-${model_id}"]


def test_rename_a_let_edits_its_definition_and_uses(tmp_path: Path) -> None:
    text = 'let m = "a"\nrun "r-${m}" {\n  model { id = m }\n}\n'
    edits = rename_let(str(tmp_path / "s.acx"), text, *_at(text, "id = "), "model_name")
    spans = sorted((e.location.line, e.location.col, e.location.end_col) for e in edits[str(tmp_path / "s.acx")])
    assert spans == [(0, 4, 5), (1, 9, 10), (2, 15, 16)]
    with pytest.raises(AcxUserError) as err:
        rename_let(str(tmp_path / "s.acx"), text, *_at(text, "id = "), "9bad")
    assert err.value.diagnostics[0].code == "E0671"
    with pytest.raises(AcxUserError):
        rename_let(str(tmp_path / "s.acx"), text, *_at(text, "  mod"), "x")  # a block kind, not a let


def test_formatting_is_acx_fmt() -> None:
    from acx.grammar import format_source

    messy = NIGHTLY.replace("  task_concurrency = 8", "task_concurrency=8")
    assert format_buffer("n.acx", messy) == format_source(messy, "n.acx") != messy


def test_diagnostics_are_acx_checks(tmp_path: Path) -> None:
    from acx.cli._lang import check_file

    spec = tmp_path / "s.acx"
    text = NIGHTLY.replace("max_retries = 1", "max_retrys = 1")
    shutil.copy(EXAMPLES / "common.acx", tmp_path / "common.acx")
    spec.write_text(text)
    assert [d.to_json() for d in check_buffer(str(spec), text)] == [d.to_json() for d in check_file(str(spec))]
    # the buffer, not the disk
    assert check_buffer(str(spec), NIGHTLY) == []


def test_positions_round_trip() -> None:
    for offset in (0, 5, 100, len(NIGHTLY)):
        assert offset_of(NIGHTLY, *position_of(NIGHTLY, offset)) == offset


_EDIT = st.tuples(
    st.integers(0, len(NIGHTLY)), st.integers(0, 12), st.text(alphabet='{}[]()="#\n ab_=-${1m', max_size=12)
)


#: Found by this test in CI: a stray `}` in a list inside a value made the outline loop forever.
_STRAY_BRACE_IN_LIST = [(426, 9, "-$\n "), (562, 4, '[[{"m]}'), (9, 9, "b"), (562, 4, '[[{"m]}')]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_EDIT, min_size=1, max_size=4), cursor=st.integers(0, 10_000))
@example(edits=_STRAY_BRACE_IN_LIST, cursor=4614)
def test_any_edit_any_cursor_no_crash_and_bounded(edits: list[tuple[int, int, str]], cursor: int) -> None:
    """Arbitrary text edits: every request answers (never raises) and in bounded time."""
    text = NIGHTLY
    for at, cut, insert in edits:
        at = min(at, len(text))
        text = text[:at] + insert + text[at + cut :]
    line, col = position_of(text, min(cursor, len(text)))
    path = str(EXAMPLES / "nightly.acx")
    start = time.perf_counter()
    complete(path, text, line, col)
    hover(path, text, line, col)
    definition(path, text, line, col)
    document_symbols(path, text)
    for d in check_buffer(path, text):
        assert d.span is not None and Path(d.span.file) == Path(path)
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("value", ["[}", "[[{}]}", '[[{"m]}\n[[{"m]}  a {', "[)", "[=]", "[;"])
def test_a_stray_close_in_a_list_is_skipped_not_looped_on(value: str) -> None:
    """The outline reads past a stray `}`/`)`/`=`/`;` in a list (the parser reports it) and still
    knows what the text's end expects; it does not give up ("none") nor loop."""
    text = f"run r {{\n  x = {value}\n  "
    for k in range(len(text) + 1):
        outline(text[:k])
    assert outline(text).expect != "none"


def test_hover_on_a_let_never_shows_a_literal_secret(tmp_path: Path) -> None:
    text = (
        'let token = "sk-proj-abcdefghijklmnop1234"\nlet key_ref = secret("MODEL_API_KEY")\n'
        'run r {\n  model { id = "m"; api_key = token }\n  harness none {}\n'
        '  benchmark exact_match { dataset = "d.jsonl" }\n}\n'
    )
    spec = str(tmp_path / "s.acx")
    shown = hover(spec, text, *_at(text, "api_key = tok"), cwd=str(tmp_path)) or ""
    assert "sk-proj-abcdefghijklmnop1234" not in shown and "let token = <secret value hidden>" in shown
    plain = text.replace("api_key = token", "api_key = key_ref")
    shown = hover(spec, plain, *_at(plain, "api_key = key_"), cwd=str(tmp_path)) or ""
    assert 'secret("MODEL_API_KEY")' in shown


def test_nothing_is_completed_inside_a_string_value() -> None:
    text = 'run r {\n  benchmark exact_match { dataset = "da'
    assert complete("/tmp/s.acx", text, *_at(text, '"da')) == []


def test_definition_of_a_built_in_recipe() -> None:
    text = 'run r {\n  execution { enabled_recipes = ["exact_match_default_budgets"] }\n}\n'
    [loc] = definition("/tmp/s.acx", text, *_at(text, '["exact_match_def'))
    assert Path(loc.path).name == "exact_match.acx" and Path(loc.path).parent.name == "stdlib_recipes"
    assert loc.line == 2
