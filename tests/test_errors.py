"""The exception hierarchy and diagnostic rendering."""

from __future__ import annotations

import json

from acx import errors
from acx.diagnostics import Diagnostic, Related, Span, did_you_mean, render_json, render_text


def test_hierarchy_is_rooted_and_user_errors_exit_2() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.AcxError)
    for cls in (
        errors.AcxSyntaxError,
        errors.AcxConfigError,
        errors.AcxResolutionError,
        errors.AcxPlanError,
        errors.CapabilityError,
        errors.AcxResultsError,
    ):
        assert issubclass(cls, errors.AcxUserError)
        assert cls.exit_code == 2
    assert not issubclass(errors.AcxInternalError, errors.AcxUserError)
    assert not issubclass(errors.DriverError, errors.AcxUserError)


def test_user_error_carries_structured_fields() -> None:
    span = Span("a.yaml", 3, 5, 3, 9)
    exc = errors.AcxConfigError(
        "unknown key `foo`", code="E0201", span=span, path="execution.foo", help="did you mean `for`?"
    )
    assert (exc.code, exc.span, exc.path, exc.help) == ("E0201", span, "execution.foo", "did you mean `for`?")
    assert str(exc).startswith("a.yaml:3:5: error[E0201]: unknown key `foo`")
    payload = json.loads(exc.to_json())
    assert payload["diagnostics"][0]["span"] == {"file": "a.yaml", "line": 3, "col": 5, "end_line": 3, "end_col": 9}
    assert payload["valid"] is False and payload["error_count"] == 1


def test_code_frame_points_at_the_span(tmp_path) -> None:
    src = tmp_path / "c.yaml"
    src.write_text("execution:\n  max_retires: 2\n")
    d = Diagnostic(
        code="E0201",
        message="unknown key",
        span=Span(str(src), 2, 3, 2, 14),
        help="did you mean `max_retries`?",
        related=(Related(Span(str(src), 1, 1), "in this section"),),
    )
    text = render_text([d])
    assert "  max_retires: 2" in text
    assert "    ^^^^^^^^^^^" in text.replace(" 2 |", "   |") or "^^^^^^^^^^^" in text
    assert "help: did you mean `max_retries`?" in text
    assert "note:" in text


def test_did_you_mean() -> None:
    assert did_you_mean("max_retires", ["max_retries", "attempts"]) == "max_retries"
    assert did_you_mean("zzz", ["max_retries"]) is None
    assert did_you_mean("Docker", ["docker"]) == "docker"


def test_render_json_counts() -> None:
    diags = [Diagnostic(code="W1", message="w", severity="warning"), Diagnostic(code="E1", message="e")]
    payload = json.loads(render_json(diags))
    assert payload["error_count"] == 1 and payload["warning_count"] == 1
