"""The YAML emitter of `--format yaml`: any JSON-like value round-trips through a YAML parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from acx.cli._output import to_yaml

text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8) | st.sampled_from(
    [
        "true",
        "null",
        "~",
        "1.5",
        "-",
        "- a",
        "a: b",
        "#x",
        "...",
        "---",
        ".inf",
        "y",
        "=",
        "@a",
        "${X}",
        "0x1f",
        "1e3",
    ]
)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(text, values, max_size=4))
def test_to_yaml_round_trips(data) -> None:
    assert YAML(typ="safe", pure=True).load(to_yaml(data)) == data
