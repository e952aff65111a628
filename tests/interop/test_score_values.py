"""acx reads Inspect score values as numbers exactly as inspect-ai's own `value_to_float` does
(property, against the real function), except that a value Inspect cannot read (it warns and
counts 0) is unavailable in acx, never a 0 (docs/results.md, "Other tools")."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.results._inspect import score_number

scorer = pytest.importorskip("inspect_ai.scorer")
to_float = scorer.value_to_float()

VALUES = st.one_of(
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["C", "I", "P", "N", "c", " C", "yes", "YES", "True", "no", "False", "nan", "inf", "1e3", " 2 "]),
    st.text(max_size=8),
)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_score_values_read_as_inspect_reads_them(value: object) -> None:
    warnings = _Warnings()
    logger = logging.getLogger("inspect_ai.scorer._metric")
    logger.addHandler(warnings)
    propagate, logger.propagate = logger.propagate, False
    try:
        theirs = to_float(value)
    finally:
        logger.removeHandler(warnings)
        logger.propagate = propagate
    ours = score_number(value)
    unreadable = any("Unable to convert value to float" in m for m in warnings.messages)
    assert (ours is None) == unreadable, (value, ours, theirs, warnings.messages)
    if ours is not None:
        assert ours == theirs
    else:
        assert theirs == 0.0  # Inspect counts what it cannot read as 0; acx as unavailable
