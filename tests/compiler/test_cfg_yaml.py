"""The YAML/JSON front end: spans for keys and values, syntax errors and duplicates with locations."""

from __future__ import annotations

import pytest

from acx.compiler._yaml import load_yaml_document, parse_yaml_text
from acx.errors import AcxConfigError


def test_values_and_keys_keep_line_and_column() -> None:
    doc = parse_yaml_text("execution:\n  max_retries: 2\n  artifacts: [/a, {source: /b}]\n", "c.yaml")
    assert doc.kind == "run_config"
    assert doc.data == {"execution": {"max_retries": 2, "artifacts": ["/a", {"source": "/b"}]}}
    assert str(doc.span_of(("execution", "max_retries"))) == "c.yaml:2:16"
    assert str(doc.key_span_of(("execution", "max_retries"))) == "c.yaml:2:3"
    assert str(doc.span_of(("execution", "artifacts", 1, "source"))) == "c.yaml:3:28"
    # unknown paths fall back to the nearest ancestor
    assert str(doc.span_of(("execution", "nope"))) == "c.yaml:2:3"


def test_scalars_are_plain_python_values() -> None:
    doc = parse_yaml_text("a: 1\nb: 2.5\nc: true\nd: null\ne: '5'\nf: 2020-01-01\n", "x.yaml")
    assert doc.data == {"a": 1, "b": 2.5, "c": True, "d": None, "e": "5", "f": "2020-01-01"}
    assert type(doc.data["a"]) is int and type(doc.data["c"]) is bool


def test_duplicate_key_reports_both_locations() -> None:
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text("execution:\n  max_retries: 1\n  max_retries: 2\n", "d.yaml")
    diag = info.value.diagnostics[0]
    assert diag.code == "E0202"
    assert str(diag.span) == "d.yaml:3:3"
    assert [str(r.span) for r in diag.related] == ["d.yaml:2:3"]


def test_syntax_error_has_file_line_col_and_help() -> None:
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text("runtime:\n  results_dir: a: b\n", "s.yaml")
    diag = info.value.diagnostics[0]
    assert diag.code == "E0201"
    assert (diag.span.file, diag.span.line) == ("s.yaml", 2)
    assert diag.help


def test_json_syntax_error_is_reported_by_json_position() -> None:
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text('{"version": 1,\n "requests": [],\n}', "o.json")
    diag = info.value.diagnostics[0]
    assert diag.code == "E0201" and diag.span.line == 3


def test_json_goes_through_the_same_span_path() -> None:
    doc = parse_yaml_text('{"version": 1,\n "requests": [{"name": "a"}]}', "o.json")
    assert doc.kind == "orchestration"
    assert str(doc.span_of(("requests", 0, "name"))) == "o.json:2:24"


def test_merge_keys_fill_missing_keys_only() -> None:
    doc = parse_yaml_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n", "m.yaml")
    assert doc.data["other"] == {"x": 1, "y": 3}
    assert doc.span_of(("other", "y")).line == 4


def test_top_level_must_be_a_mapping_and_empty_is_an_empty_config() -> None:
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text("- a\n- b\n", "l.yaml")
    assert info.value.code == "E0210"
    assert parse_yaml_text("# nothing\n", "e.yaml").data == {}


def test_multiple_documents_are_rejected() -> None:
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text("a: 1\n---\nb: 2\n", "m.yaml")
    assert "---" in (info.value.help or "")


def test_kind_detection_and_expected_kind(tmp_path) -> None:
    orch = tmp_path / "o.yaml"
    orch.write_text("version: 1\nrequests: []\n")
    assert load_yaml_document(str(orch)).kind == "orchestration"
    with pytest.raises(AcxConfigError) as info:
        load_yaml_document(str(orch), expected="run_config")
    assert info.value.code == "E0210" and "--config" in (info.value.help or "")


def test_missing_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(AcxConfigError) as info:
        load_yaml_document(str(tmp_path / "nope.yaml"))
    assert info.value.code == "E0209"


def test_unsupported_tags_are_rejected() -> None:
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text("a: !!binary aGVsbG8=\n", "t.yaml")
    assert info.value.code == "E0201" and "tag" in info.value.diagnostics[0].message
