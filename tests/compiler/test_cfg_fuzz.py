"""Crash fuzzer: any JSON-like document yields diagnostics or a compiled orchestration — never an
unexpected exception (bad input must always end in one clear AcxUserError)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from acx.compiler import validate_document
from acx.compiler._resolve import ConfigDoc, resolve_orchestration
from acx.compiler._source import SourceDoc
from acx.errors import AcxUserError

WORDS = [
    "version",
    "name",
    "task_concurrency",
    "runtime",
    "defaults",
    "requests",
    "benchmark",
    "harness",
    "environment",
    "model",
    "execution",
    "output",
    "id",
    "params",
    "exact_match",
    "harbor",
    "none",
    "oracle",
    "docker",
    "host_process",
    "dataset",
    "path",
    "max_retries",
    "attempts",
    "k",
    "strategy",
    "setup",
    "image",
    "run_network_policy",
    "network_mode",
    "env_variables",
    "artifacts",
    "source",
    "reuse",
    "reuse_run_id",
    "run_name",
    "run_id",
    "api_key",
    "benchmarks",
    "environments",
    "models",
    "evaluation_environment_mode",
    "evaluation_setup",
    "results_dir",
    "provider_limits",
    "sample_ids",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 100)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from([*WORDS, "${X}", "a${X}", "/abs", "no-network", "fresh", "", "qa"])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(WORDS), inner, max_size=4),
    max_leaves=25,
)
documents = st.dictionaries(st.sampled_from(WORDS), values, max_size=6)
requests = st.lists(st.dictionaries(st.sampled_from(WORDS), values, max_size=6), max_size=3)


def _check(doc: SourceDoc, config: SourceDoc | None) -> None:
    diagnostics = validate_document(doc) + (validate_document(config) if config else [])
    for d in diagnostics:
        assert d.code.startswith("E0") and d.message
    if diagnostics or doc.kind != "orchestration":
        return
    configs = [ConfigDoc("--config", config)] if config else []
    try:
        resolve_orchestration(doc, configs, environ={"X": "1"})
    except AcxUserError as exc:
        assert exc.diagnostics


@settings(max_examples=80)
@given(documents, documents)
def test_arbitrary_documents_never_crash(data, config_data) -> None:
    from acx.compiler._yaml import detect_kind

    doc = SourceDoc(path="f.yaml", kind=detect_kind(data), data=data)
    config = SourceDoc(path="c.yaml", kind="run_config", data=config_data)
    _check(doc, config if config.kind == detect_kind(config_data) else None)


@settings(max_examples=100)
@given(requests, st.dictionaries(st.sampled_from(WORDS), values, max_size=4))
def test_near_valid_orchestrations_never_crash(reqs, defaults) -> None:
    data = {
        "version": 1,
        "defaults": {"benchmark": {"id": "exact_match", "dataset": "q"}, "harness": {"id": "none"}, **defaults},
        "requests": [{"name": f"r{i}", **r} for i, r in enumerate(reqs)] or [{"name": "a"}],
    }
    _check(SourceDoc(path="f.yaml", kind="orchestration", data=data), None)
