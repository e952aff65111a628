"""QA hardening of the `.acx` front end: messages speak of keys as the user wrote them."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acx.cli._lang import check_file
from acx.compiler import compile_orchestration, dry_run_payload
from acx.grammar import _ast as A
from acx.grammar import format_source, parse, print_module


def _check(tmp_path: Path, text: str) -> list[tuple[str, str, str | None]]:
    path = tmp_path / "t.acx"
    path.write_text(text, encoding="utf-8")
    return [(d.code, d.message, d.help) for d in check_file(str(path))]


def test_misspelt_duration_and_size_keys_are_reported_as_written(tmp_path: Path) -> None:  # contract R12
    found = _check(
        tmp_path,
        "orchestration o {\n"
        '  defaults { harness none {} model { id = "m" } execution { run_timout = 5m } }\n'
        '  run "r" { benchmark exact_match { dataset = "d" }\n'
        "    environment docker { resources { memroy = 2GiB } } }\n"
        "}\n",
    )
    assert [(c, m.split(" in ")[0], h) for c, m, h in found] == [
        ("E0203", "unknown key `run_timout`", "did you mean `run_timeout`?"),
        ("E0203", "unknown key `memroy`", "did you mean `memory`?"),
    ]


_BLOCK_ALPHABET = ' \n\t"\\${}#/ab'


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=_BLOCK_ALPHABET, max_size=30), st.integers(0, 3))
def test_multiline_strings_print_parse_and_fmt_round_trip(body: str, depth: int) -> None:
    """Strings with newlines print as a \"\"\" block that parses back to the same text (fmt stable)."""
    value = A.Str((body + "x\n",))
    printed = print_module(A.Module("<gen>", (A.Let(A.Name("p"), value),)))
    for _ in range(depth):  # nest it: the closing delimiter's indentation sets the dedent
        printed = "b {\n" + printed + "}\n"
    source = format_source(printed)
    assert format_source(source) == source
    node = parse(source).body[0]
    while isinstance(node, A.Block):
        assert node.body is not None
        node = node.body[0]
    assert isinstance(node, A.Let) and node.value == value, source
    assert '"""' in source, source  # ends with a newline and holds no control characters


def test_multiline_string_lowers_like_a_yaml_block_scalar(tmp_path: Path) -> None:  # contract R1
    (tmp_path / "qa.jsonl").write_text('{"id": "1", "question": "q", "answer": "a"}\n', encoding="utf-8")
    acx = tmp_path / "o.acx"
    acx.write_text(
        'let who = "acx"\n'
        "orchestration o {\n"
        '  defaults { model { id = "m" } harness openai_chat { system_prompt = """\n'
        "      You are ${who}.\n"
        "        Keep $${this} literal.\n"
        "\n"
        "      Bye.\n"
        '      """ } }\n'
        '  run "r" { benchmark exact_match { dataset = "qa.jsonl" } }\n'
        "}\n",
        encoding="utf-8",
    )
    yaml = tmp_path / "o.yaml"
    yaml.write_text(
        "version: 1\nname: o\ndefaults:\n  model: {id: m}\n  harness:\n    id: openai_chat\n"
        "    system_prompt: |\n      You are acx.\n        Keep LITERAL literal.\n\n      Bye.\n"
        "requests:\n  - name: r\n    benchmark: {id: exact_match, dataset: qa.jsonl}\n",
        encoding="utf-8",
    )
    a = compile_orchestration(str(acx)).orchestration.requests[0].request
    b = compile_orchestration(str(yaml)).orchestration.requests[0].request
    assert a.harness.params["system_prompt"] == "You are acx.\n  Keep ${this} literal.\n\nBye.\n"
    assert a.harness == msgspec.structs.replace(
        b.harness, params={**b.harness.params, "system_prompt": a.harness.params["system_prompt"]}
    )
    assert b.harness.params["system_prompt"] == a.harness.params["system_prompt"].replace("${this}", "LITERAL")


def test_escaped_interpolation_is_literal_text_never_an_env_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # contract R6: env()/secret() are the only way to read the environment
    monkeypatch.setenv("ACX_QA_SECRET", "leaked-value")
    (tmp_path / "qa.jsonl").write_text('{"id": "1", "question": "q", "answer": "a"}\n', encoding="utf-8")
    acx = tmp_path / "o.acx"
    acx.write_text(
        "orchestration o {\n"
        '  defaults { model { id = "m" } harness openai_chat { system_prompt = "$${ACX_QA_SECRET}" } }\n'
        '  run "r" { benchmark exact_match { dataset = "qa.jsonl" } }\n'
        "}\n",
        encoding="utf-8",
    )
    assert check_file(str(acx)) == []
    compiled = compile_orchestration(str(acx))
    assert compiled.orchestration.requests[0].request.harness.params["system_prompt"] == "${ACX_QA_SECRET}"
    assert "leaked-value" not in json.dumps(dry_run_payload(compiled, provenance=True))


def test_help_lines_use_acx_syntax_in_acx_files(tmp_path: Path) -> None:  # contract R12
    found = _check(tmp_path, 'orchestration o {\n  run "r" { benchmark exact_match { dataset = "d" } model = 5 }\n}\n')
    assert [m for _, m, _ in found] == [
        "run `r` selects no harness",
        '`run "r".model`: expected a mapping (ModelSpec), got an integer',
    ]
    assert [(c, h) for c, _, h in found] == [
        (
            "E0305",
            "add `harness ID { ... }` to the run or to `defaults`; use `harness none {}` for a harness-free benchmark",
        ),
        ("E0204", "write `model { key = value }`"),
    ]


def test_duplicate_names_from_one_loop_say_so(tmp_path: Path) -> None:  # contract R12
    found = _check(
        tmp_path,
        "orchestration o {\n"
        '  defaults { harness none {} model { id = "m" } }\n'
        '  for m in ["a", "a"] { run "x-${m}" { benchmark exact_match { dataset = "d" } } }\n'
        "}\n",
    )
    assert [(c, m) for c, m, _ in found] == [
        ("E0303", "duplicate request name `x-a`: two iterations of this loop produce it")
    ]


def test_multiline_strings_in_crlf_files_hold_plain_newlines() -> None:
    module = parse('let p = """\r\n  a\r\n  b\r\n  """\r\n', "w.acx")
    (let,) = module.body
    assert isinstance(let, A.Let) and let.value == A.Str(("a\nb\n",))


def test_duration_or_size_on_a_plain_field_is_a_type_error(tmp_path: Path) -> None:  # contract R12
    found = _check(
        tmp_path,
        'run "r" {\n  model { id = "m" }\n  benchmark exact_match { dataset = "d" }\n  harness none {}\n'
        "  execution { max_retries = 5m, artifact_limits { max_files = 1GiB } }\n}\n",
    )
    assert [(c, m) for c, m, _ in found] == [
        ("E0204", '`run "r".execution.max_retries` takes a plain value, not a duration'),
        ("E0204", '`run "r".execution.artifact_limits.max_files` takes a plain value, not a size'),
    ]
