"""Environment interpolation (R6, V1) and secret redaction (reference §2.2)."""

from __future__ import annotations

from acx.compiler import redact
from acx.compiler._interpolate import interpolate
from acx.compiler._redact import REDACTED, is_sensitive_path
from acx.diagnostics import Span


def _span(rel):
    return Span("f.yaml", 1, 1)


def test_whole_field_reference_is_substituted() -> None:  # contract R6
    out, info = interpolate({"base_url": "${URL}", "n": 3}, {"URL": "http://m"}, span_of=_span, abs_prefix=("model",))
    assert out == {"base_url": "http://m", "n": 3}
    assert info.env_inputs == {"URL"} and info.substituted == {("base_url",): "URL"}
    assert not info.diagnostics


def test_missing_variable_is_an_error_naming_it_not_a_value() -> None:  # contract R6
    _, info = interpolate({"base_url": "${NOPE}"}, {"OTHER": "s3cret"}, span_of=_span)
    (diag,) = info.diagnostics
    assert diag.code == "E0302" and "NOPE" in diag.message and "s3cret" not in diag.message + (diag.help or "")


def test_embedded_reference_is_rejected_with_the_fix() -> None:  # contract R6
    _, info = interpolate({"path": "data/${X}/qa.jsonl"}, {"X": "1"}, span_of=_span)
    (diag,) = info.diagnostics
    assert diag.code == "E0212" and "whole-field ${VAR}" in (diag.help or "")


def test_env_maps_keep_references_verbatim() -> None:  # contract V1
    data = {
        "env_variables": {"A": "${A}", "B": "${B:-x}", "C": "pre-${C}"},
        "run_env_variables": {"D": "${D}"},
    }
    out, info = interpolate(data, {}, span_of=_span, abs_prefix=("environment",))
    assert out == data and not info.diagnostics and not info.env_inputs


def test_sensitive_positions_keep_the_reference_and_warn_when_unset() -> None:
    out, info = interpolate({"api_key": "${KEY}", "id": "m"}, {"KEY": "sk-1"}, span_of=_span, abs_prefix=("model",))
    assert out["api_key"] == "${KEY}" and info.secret_refs == {"KEY"} and not info.env_inputs
    assert not info.diagnostics
    _, missing = interpolate({"api_key": "${KEY}"}, {}, span_of=_span)
    assert [(d.code, d.severity) for d in missing.diagnostics] == [("W0302", "warning")]
    assert missing.secret_refs == {"KEY"}


def test_front_end_secret_paths_are_sensitive_too() -> None:
    out, info = interpolate({"base_url": "${U}"}, {"U": "x"}, span_of=_span, secret_paths=frozenset({("base_url",)}))
    assert out["base_url"] == "${U}" and info.secret_refs == {"U"}


def test_redaction_keys_suffixes_and_containers() -> None:
    data = {
        "api_key": "sk-live",
        "wrap_api_key": True,
        "password": "p",
        "token": 5,
        "hf_token": "t",
        "client_secret": "s",
        "id": "model-x",
        "headers": {"X-Trace": "abc", "nested": {"deep": "v"}},
        "env_variables": {"PUBLIC": "1", "REF": "${REF}"},
        "credentials": ["a", None],
        "max_tokens": 10,
        "ref_key": "${MY_KEY}",
        "empty_key": None,
    }
    out = redact(data)
    assert out["api_key"] == REDACTED and out["password"] == REDACTED and out["token"] == REDACTED
    assert out["hf_token"] == REDACTED and out["client_secret"] == REDACTED
    assert out["wrap_api_key"] is True and out["id"] == "model-x" and out["max_tokens"] == 10
    assert out["headers"] == {"X-Trace": REDACTED, "nested": {"deep": REDACTED}}
    assert out["env_variables"] == {"PUBLIC": REDACTED, "REF": "${REF}"}
    assert out["credentials"] == [REDACTED, None]
    assert out["ref_key"] == "${MY_KEY}" and out["empty_key"] is None
    assert data["api_key"] == "sk-live"  # input untouched


def test_redact_accepts_ir_structs() -> None:
    from acx.ir import ModelSpec

    out = redact(ModelSpec(id="m", api_key="literal"))
    assert out["api_key"] == REDACTED and out["id"] == "m"


def test_sensitive_path() -> None:
    assert is_sensitive_path(("model", "api_key"))
    assert is_sensitive_path(("environment", "env_variables", "X"))
    assert not is_sensitive_path(("model", "wrap_api_key"))
    assert not is_sensitive_path(("execution", "max_retries"))


def test_a_short_literal_secret_warns_it_will_not_be_masked() -> None:  # contract V1
    # W0305: "abc" is too short to be masked; placeholders (`none`), real-length keys, env maps'
    # literal values and ordinary fields say nothing
    _, short = interpolate({"api_key": "abc", "id": "m"}, {}, span_of=_span, abs_prefix=("model",))
    (diag,) = short.diagnostics
    assert (diag.code, diag.severity, diag.path) == ("W0305", "warning", "model.api_key")
    assert "abc" not in diag.message + (diag.help or "")  # the value itself is never quoted
    for quiet in (
        {"api_key": "none"},
        {"api_key": "EMPTY"},
        {"api_key": "sk-live-123"},
        {"id": "m1"},
        {"env_variables": {"DB_PASSWORD": "x"}},
    ):
        _, info = interpolate(quiet, {}, span_of=_span, abs_prefix=("model",))
        assert not info.diagnostics, quiet
