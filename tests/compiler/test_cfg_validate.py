"""validate_document: every problem of a document, with spans, codes, did-you-mean (R7, R12)."""

from __future__ import annotations

from acx.compiler import validate_document
from acx.compiler._yaml import parse_yaml_text

#: defaults that select a benchmark and a harness, so requests may be just `{name: a}`.
D = "defaults: {benchmark: {id: harbor, path: t}, harness: {id: oracle}}\n"


def _codes(text: str) -> list[tuple[str, str]]:
    doc = parse_yaml_text(text, "x.yaml")
    return [(d.code, str(d.span)) for d in validate_document(doc)]


def test_valid_run_config_has_no_diagnostics() -> None:
    text = (
        "runtime: {results_dir: r, reuse: true}\n"
        "execution: {task_concurrency: 4, artifacts: [/logs/x], artifact_collect: [{command: make}]}\n"
        "benchmarks: {harbor: {path: t, task_names: ['hello-*']}}\n"
        "harnesses: {command: {command: [python, agent.py]}}\n"
        "environments: {docker: {setup: {image: x}, run_network_policy: no-network, api_token: '${TOK}'}}\n"
    )
    assert [d.message for d in validate_document(parse_yaml_text(text, "c.yaml"))] == [
        "unknown key `api_token` in environment `docker` params"
    ]


def test_all_independent_errors_are_reported_in_source_order() -> None:  # contract R12
    text = "execution: {max_retries: -1, bogus: 1}\nbenchmarks: {nope: {}}\nruntime: {progress: fancy}\n"
    assert _codes(text) == [
        ("E0204", "x.yaml:1:26"),
        ("E0203", "x.yaml:1:30"),
        ("E0301", "x.yaml:2:14"),
        ("E0205", "x.yaml:3:21"),
    ]


def test_run_config_component_sections_are_flat() -> None:  # contract R7
    codes = _codes("benchmarks:\n  exact_match:\n    params: {dataset: a}\n")
    assert codes == [("E0207", "x.yaml:3:5")]


def test_models_section_is_rejected() -> None:  # contract R2
    assert _codes("models: {a: {}}\n") == [("E0206", "x.yaml:1:1")]


def test_orchestration_version_and_requests() -> None:  # reference §2.4
    assert [c for c, _ in _codes("version: 2\n" + D + "requests: [{name: a}]\n")] == ["E0211"]
    assert [c for c, _ in _codes(D + "requests: [{name: a}]\n")] == ["E0211"]
    assert [c for c, _ in _codes("version: 1\nrequests: []\n")] == ["E0210"]
    assert [c for c, _ in _codes("version: 1\nrequests: [{benchmark: {id: harbor}, harness: {id: oracle}}]\n")] == [
        "E0208"
    ]


def test_defaults_select_the_id_for_param_checks() -> None:
    text = "version: 1\ndefaults: {benchmark: {id: exact_match}, harness: {id: none}}\n"
    text += "requests:\n  - {name: a, benchmark: {datset: q}}\n"
    doc = parse_yaml_text(text, "x.yaml")
    (diag,) = validate_document(doc)
    assert diag.code == "E0203" and diag.help == "did you mean `dataset`?"


def test_api_protocol_values() -> None:
    assert [
        c for c, _ in _codes("version: 1\n" + D + "requests: [{name: a, model: {api_protocol: [auto, anthropic]}}]\n")
    ] == ["E0205"]
    assert [c for c, _ in _codes("version: 1\n" + D + "requests: [{name: a, model: {api_protocol: open-chat}}]\n")] == [
        "E0205"
    ]


def test_env_var_references_are_accepted_anywhere_and_env_maps_may_embed() -> None:  # contract R6, V1
    text = (
        "version: 1\ntask_concurrency: ${TC}\n" + D + ""
        "requests: [{name: a, execution: {max_retries: '${R}'},"
        " environment: {env_variables: {A: 'pre-${X}', B: '${Y:-d}'}}}]\n"
    )
    assert _codes(text) == []


def test_legacy_harness_env_is_rejected() -> None:  # contract V4
    text = "version: 1\n" + D + "requests: [{name: a, harness: {id: command, command: x, env: {A: b}}}]\n"
    (diag,) = validate_document(parse_yaml_text(text, "x.yaml"))
    assert diag.code == "E0214" and "run_env_variables" in diag.message


def test_diagnostics_carry_spans_for_acx_style_docs_without_key_locs() -> None:
    from acx.compiler._source import SourceDoc
    from acx.diagnostics import Span

    doc = SourceDoc(
        path="spec.acx",
        kind="orchestration",
        data={
            "version": 1,
            "defaults": {"benchmark": {"id": "harbor", "path": "t"}, "harness": {"id": "none"}},
            "requests": [{"name": "a", "execution": {"max_retries": "x"}}],
        },
        locs={("requests", 0): Span("spec.acx", 3, 3)},
    )
    (diag,) = validate_document(doc)
    assert str(diag.span) == "spec.acx:3:3"


def test_reuse_in_orchestration_runtime_points_to_defaults_runtime() -> None:  # contract R3
    doc = parse_yaml_text("version: 1\nruntime: {reuse: true}\n" + D + "requests: [{name: a}]\n", "x.yaml")
    (diag,) = validate_document(doc)
    assert diag.code == "E0203" and diag.help == "set `defaults.runtime.reuse` (or a request's `runtime.reuse`)"


def test_a_request_must_select_a_benchmark_and_a_harness() -> None:  # contract R1
    codes = _codes("version: 1\nrequests:\n  - {name: a, benchmark: {id: harbor, path: t}}\n  - {name: b}\n")
    assert codes == [("E0305", "x.yaml:3:5"), ("E0305", "x.yaml:4:5"), ("E0305", "x.yaml:4:5")]
