"""QA #13: a whole value that only looks like a `${VAR}` says what is really wrong (E0212).

`${X:-5}` is a default (only env-variable maps resolve defaults) and `${}`, `${ X }`, `${1X}`,
`${X` are malformed references; only a reference inside a longer text is "inside a longer string".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from acx.cli import main
from acx.compiler._interpolate import embedded_ref_diagnostic, interpolate
from acx.diagnostics import Span

Writer = Callable[[str, str], Path]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${X:-5}", "`${X:-...}` (a default value) is only supported in env-variable maps"),
        ("${X:-}", "`${X:-...}` (a default value) is only supported in env-variable maps"),
        ("${}", "malformed environment reference in `p`: the variable name is empty"),
        ("${ X }", "malformed environment reference in `p`: the braces hold spaces around the name"),
        ("${1X}", "malformed environment reference in `p`: a variable name cannot start with a digit"),
        ("${X-Y}", "malformed environment reference in `p`: the name holds a character other than"),
        ("${X", "malformed environment reference in `p`: the closing `}` is missing"),
        ("a${X}b", "`${...}` inside a longer string"),
        ("${X}${Y}", "`${...}` inside a longer string"),
    ],
)
def test_message_names_the_real_problem(value: str, expected: str) -> None:
    # contract R6
    diag = embedded_ref_diagnostic(value, None, "p")
    assert diag.code == "E0212" and expected in diag.message
    if "inside a longer string" not in expected:
        assert "inside a longer string" not in diag.message


def test_default_help_points_to_env_maps_and_never_quotes_the_default() -> None:
    # contract R6
    diag = embedded_ref_diagnostic("${X:-s3cret-default}", None, "model.base_url")
    assert "env_variables" in (diag.help or "") and "export X" in (diag.help or "")
    assert "s3cret-default" not in diag.message + (diag.help or "")


def test_interpolation_reports_the_same_wording() -> None:
    # contract R6
    _, info = interpolate({"max_retries": "${ X }"}, {"X": "1"}, span_of=lambda rel: Span("f.yaml", 1, 1))
    (diag,) = info.diagnostics
    assert diag.code == "E0212" and "spaces around the name" in diag.message


def test_validate_end_to_end(write: Writer, capsys: pytest.CaptureFixture[str]) -> None:
    # contract R6
    write(
        "m.yaml",
        """
        version: 1
        name: b
        requests:
          - name: a
            benchmark: {id: exact_match, dataset: qa.jsonl}
            harness: {id: command, command: echo}
            execution: {max_retries: "${X:-5}", run_timeout_seconds: "${1X}"}
        """,
    )
    assert main(["validate", "m.yaml"]) == 2
    err = capsys.readouterr().err
    assert "m.yaml:7:30: error[E0212]" in err and "(a default value) is only supported in env-variable maps" in err
    assert "a variable name cannot start with a digit" in err
    assert "inside a longer string" not in err
