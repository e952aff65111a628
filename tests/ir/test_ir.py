"""The IR: frozen, closed, canonical encoding and content hash."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import acx.ir as ir


def _request(**execution: object) -> ir.RunRequest:
    return ir.RunRequest(
        model=ir.ModelSpec(id="m"),
        benchmark=ir.BenchmarkSpec(id="exact_match", params={"dataset": "d.jsonl"}),
        harness=ir.HarnessSpec(id="none"),
        environment=ir.EnvironmentSpec(id="host_process"),
        execution=msgspec.convert(execution, ir.ExecutionSpec),
    )


def test_execution_defaults_match_agentcompass() -> None:  # contract R1
    e = ir.ExecutionSpec()
    assert e.task_concurrency == 32
    assert e.attempts == ir.AttemptsSpec(k=1, strategy="avg")
    assert e.max_retries == 0
    assert e.run_timer_compensation_seconds == 120.0
    assert e.runresult_collect_timeout_seconds == 60.0
    assert e.timeout_multiplier == 1.0
    assert e.artifact_limits == ir.ArtifactLimits(max_mb=16384, max_files=100000, timeout_seconds=600.0)
    assert e.artifact_collect_timeout_seconds is None
    assert e.save_artifacts is None and e.artifacts is None and e.artifact_collect is None
    assert e.retry_min_delay_seconds == 5.0 and e.retry_max_delay_seconds == 60.0


def test_run_request_has_exactly_eight_sections() -> None:  # contract R1
    assert set(ir.RunRequest.__struct_fields__) == {
        "model",
        "benchmark",
        "harness",
        "environment",
        "execution",
        "runtime",
        "output",
        "metadata",
    }


def test_structs_are_frozen_and_closed() -> None:
    req = _request()
    with pytest.raises(AttributeError):
        req.model = ir.ModelSpec()  # type: ignore[misc]
    with pytest.raises(msgspec.ValidationError, match="unknown field `bogus`"):
        msgspec.convert({"bogus": 1}, ir.ExecutionSpec)


def test_runtime_options_distinct_from_request_runtime() -> None:  # contract R3
    assert "results_dir" in ir.ResolvedRuntimeOptions.__struct_fields__
    assert "results_dir" not in ir.RunRuntimeSpec.__struct_fields__
    # Per-provider defaults come from the driver registry (filled by the resolver), not the IR.
    assert ir.ResolvedRuntimeOptions().provider_limits == {}


def test_unset_differs_from_null_on_task_timeouts() -> None:  # contract T1, T2
    unset = ir.TaskSpec(task_id="a")
    explicit = ir.TaskSpec(task_id="a", run_timeout_seconds=None)
    assert unset.run_timeout_seconds is ir.UNSET
    assert explicit.run_timeout_seconds is None
    assert ir.canonical_json(unset) != ir.canonical_json(explicit)


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=8))
def test_canonical_encoding_stable_under_key_order(params: dict[str, int]) -> None:
    reordered = dict(reversed(list(params.items())))
    a = ir.BenchmarkSpec(id="x", params=params)
    b = ir.BenchmarkSpec(id="x", params=reordered)
    assert ir.canonical_json(a) == ir.canonical_json(b)
    assert ir.content_hash(a) == ir.content_hash(b)


def test_content_hash_changes_with_value() -> None:
    assert ir.content_hash(_request(max_retries=1)) != ir.content_hash(_request(max_retries=2))
    assert ir.content_hash(_request()).startswith("sha256:")


def test_round_trip_through_json() -> None:
    req = _request(max_retries=3)
    assert ir.decode(ir.canonical_json(req), ir.RunRequest) == req


def test_status_from_issues() -> None:  # contract S2
    issue = ir.ExecutionIssue
    assert ir.status_from_issues([]) == "completed"
    assert ir.status_from_issues([issue(severity="warning", phase="run", code="w")]) == "completed"
    assert ir.status_from_issues([issue(severity="error", phase="evaluate", code="e")]) == "eval_error"
    assert ir.status_from_issues([issue(severity="fatal", phase="setup", code="f")]) == "run_error"
    both = [issue(severity="error", phase="run", code="a"), issue(severity="error", phase="evaluate", code="b")]
    assert ir.status_from_issues(both) == "run_error_or_eval_error"
    assert ir.status_from_issues([], skipped=True) == "skipped"


def test_metric_contract_primary() -> None:  # contract S1
    assert ir.MetricContract.binary().primary_id() == "correct"
    assert ir.MetricContract.scalar().primary_id() == "score"
    bad = ir.MetricContract(metrics={"x": ir.MetricSpec(kind="scalar", primary=True)})
    with pytest.raises(ValueError):
        bad.primary_id()
