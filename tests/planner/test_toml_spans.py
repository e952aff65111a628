"""Positions of task.toml keys for load errors (contract H6: invalid values name file and line)."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.components._toml_spans import TomlLocator
from acx.components.harbor_task import load_harbor_task
from acx.errors import AcxPlanError

TRICKY = '''\
description = """
[verifier]
timeout_sec = 5
"""
note = \'\'\'[agent] = 1\'\'\'
"quoted.key" = 1
artifacts = [
  "/app/a",   # [not a table]
  { source = "/app/b", destination = "b" },
]
[verifier]
env = { A = "x", B = "y" }
timeout_sec = -5
collect = [
  { command = "true" },
  { command = "x", user = "root" },
]
[environment.env]
X = "a#b"
[[steps]]
name = "one"
[[steps]]
name = "two"
[steps.agent]
timeout_sec = 3
'''


def test_locator_is_a_tokenizer_not_a_line_scanner() -> None:  # contract H6
    tomllib.loads(TRICKY)  # the locator runs on valid TOML only
    loc = TomlLocator(TRICKY)
    assert loc.line_of("description") == 1
    assert loc.line_of("verifier") == 11  # the header, not the text inside the multi-line string
    assert loc.line_of("verifier.timeout_sec") == 13
    assert loc.line_of("verifier.env.B") == 12
    assert loc.line_of("artifacts.0") == 8
    assert loc.line_of("artifacts.1.destination") == 9
    assert loc.line_of("verifier.collect.1.user") == 16
    assert loc.line_of("environment.env.X") == 19
    assert loc.line_of("steps.1.name") == 23
    assert loc.line_of("steps.1.agent.timeout_sec") == 25
    assert loc.line_of("quoted.key") == 6
    assert loc.line_of("agent") == 1  # never declared: line 1, not the string on line 5
    line, col, end_line, end_col = loc.position_of("verifier.collect.1.user") or (0, 0, 0, 0)
    assert (line, col, end_line, end_col) == (16, 20, 16, 33)  # `user = "root"`


def test_locator_keeps_the_line_scanner_cases() -> None:
    loc = TomlLocator("a = 1\n[x]\ny.z = 2\n[[c]]\nk = 1\n[[c]]\nk = 2\n[c.sub]\nq = 3\n")
    assert (loc.line_of("a"), loc.line_of("x.y.z"), loc.line_of("x.y")) == (1, 3, 3)
    assert (loc.line_of("c.0.k"), loc.line_of("c.1.k"), loc.line_of("c.1.sub.q")) == (5, 7, 9)
    assert loc.line_of("nope.deeper") == 1


_KEYS = st.text("abcxyz_0123", min_size=1, max_size=6)
_SCALARS = st.one_of(
    st.integers(-1000, 1000).map(str),
    st.sampled_from(["true", "false", "1979-05-27 07:32:00Z", "[1, [2, 3]]", "{ a = [1], b = { c = 2 } }"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"\\'), max_size=8).map(
        lambda s: f'"{s}"'
    ),
    st.just('"""\nx = 1\n[fake]\n"""'),
)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_KEYS, st.lists(st.dictionaries(_KEYS, _SCALARS, max_size=3), max_size=3), max_size=4))
def test_every_key_of_generated_documents_is_found(tables: dict[str, list[dict[str, str]]]) -> None:
    # Property: for [[table]] arrays of key = value lines, each key maps to the line it is on.
    lines: list[str] = []
    expected: dict[str, int] = {}
    for name, elements in tables.items():
        for i, element in enumerate(elements):
            lines.append(f"[[{name}]]")
            for key, value in element.items():
                expected[f"{name}.{i}.{key}"] = len(lines) + 1
                lines.extend(f"{key} = {value}".split("\n"))
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)
    loc = TomlLocator(text)
    assert {path: loc.line_of(path) for path in expected} == expected


@pytest.mark.parametrize(
    ("toml", "line", "col", "message"),
    [
        ('d = """\n[verifier]\ntimeout_sec = 1\n"""\n[verifier]\ntimeout_sec = -5\n', 6, 1, "finite and positive"),
        ('artifacts = [\n  "/app/a",\n  "relative/b",\n]\n', 3, 3, "absolute path"),
        ('artifacts = [{ source = "/a", destination = "/abs" }]\n', 1, 31, "relative path"),
        ('[verifier]\ncollect = [\n  { command = "true" },\n  { command = "x", user = "r" },\n]\n', 4, 20, "`user`"),
        ('verifier.timeout_sec = "ten"\n', 1, 1, "expected a number"),
    ],
)
def test_load_errors_point_at_the_key(harbor_task, toml: str, line: int, col: int, message: str) -> None:
    d = harbor_task("bad", toml)
    with pytest.raises(AcxPlanError, match=message) as e:
        load_harbor_task(d)
    span = e.value.span
    assert span is not None and (span.file, span.line, span.col) == (str(d / "task.toml"), line, col)
