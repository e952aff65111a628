"""QA #6: a diagnostic about a sensitive field masks its framed value wherever the value sits.

The per-line `key: value` masking cannot see a value on a continuation line (`api_key:` then
`- sk-...`); the diagnostic's field path (`is_sensitive_path`) decides instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from acx.cli import main
from acx.diagnostics import Diagnostic, Related, Span, render_text

Writer = Callable[[str, str], Path]

ML = """
version: 1
name: b
requests:
  - name: a
    benchmark: {id: exact_match, dataset: qa.jsonl}
    harness: {id: command, command: echo}
    model:
      id: m
      api_key:
        - sk-LEAKED-1
"""


def test_continuation_line_value_is_masked_end_to_end(write: Writer, capsys: pytest.CaptureFixture[str]) -> None:
    # contract P8
    write("ml.yaml", ML)
    assert main(["validate", "ml.yaml"]) == 2
    err = capsys.readouterr().err
    assert "requests[0].model.api_key" in err and "E0204" in err
    assert "sk-LEAKED-1" not in err
    assert " 10 |         * ***********" in err  # same length: the caret stays aligned


def _render(text: str, span: Span, path: str | None, code: str = "E0204") -> str:
    return render_text([Diagnostic(code=code, message="m", span=span, path=path)], sources={span.file: text})


def test_span_of_a_sensitive_path_is_masked_on_any_line() -> None:
    # contract P8
    text = "headers:\n  Authorization:\n    - Bearer visible-1\n"
    out = _render(text, Span("f.yaml", 3, 5, 4, 1), "requests[0].model.params.headers.Authorization[0]")
    assert "visible-1" not in out and " 3 |     * ****** *********" in out
    # a single-line span masks just its columns
    out = _render("x: [visible-2, 3]\n", Span("f.yaml", 1, 5, 1, 14), "defaults.model.api_key[0]")
    assert "visible-2" not in out and "x: [*********, 3]" in out


def test_ordinary_paths_keys_and_references_are_left_readable() -> None:
    # contract P8
    assert "visible-3" in _render("  - visible-3\n", Span("f.yaml", 1, 3), "requests[0].harness.command")
    # the span is the sensitive key itself (unknown key): it is named in the message anyway
    out = _render("      headers:\n", Span("f.yaml", 1, 7, 1, 14), "requests[0].model.headers", "E0203")
    assert "headers:" in out
    # a reference names the secret, it is not one
    out = _render('  api_key:\n    "${KEY}"\n', Span("f.yaml", 2, 5, 2, 13), "requests[0].model.api_key")
    assert '"${KEY}"' in out


def test_related_frames_of_a_sensitive_diagnostic_are_masked() -> None:
    # contract P8
    text = "api_key:\n  - visible-4\napi_key:\n  - visible-5\n"
    diag = Diagnostic(
        code="E0204",
        message="m",
        span=Span("f.yaml", 4, 3),
        path="model.api_key",
        related=(Related(Span("f.yaml", 2, 3), "shadowed"),),
    )
    out = render_text([diag], sources={"f.yaml": text})
    assert "visible-4" not in out and "visible-5" not in out
