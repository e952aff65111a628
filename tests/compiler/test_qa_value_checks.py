"""QA: values every front end must reject with a span (T1 finiteness, bounds, tags, regexes, text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acx.compiler import compile_orchestration, validate_document
from acx.compiler._validate import check_cli_params
from acx.compiler._yaml import parse_yaml_text
from acx.diagnostics import Diagnostic
from acx.errors import AcxConfigError, AcxUserError
from acx.interpreter._attempt import retry_reason
from acx.ir import ExecutionIssue, ExecutionSpec, ResolvedRuntimeOptions

HEAD = """version: 1
name: q
requests:
  - name: a
    benchmark: {id: exact_match, dataset: qa.jsonl}
    harness: {id: command, command: echo}
"""


def _diags(text: str, path: str = "o.yaml") -> list[Diagnostic]:
    return validate_document(parse_yaml_text(text, path))


def _one(diags: list[Diagnostic]) -> Diagnostic:
    errors = [d for d in diags if d.severity == "error"]
    assert len(errors) == 1, [d.message for d in errors]
    return errors[0]


# ---- 1. lone surrogates (YAML and JSON front ends) -------------------------------------------


def test_yaml_lone_surrogate_is_e0201_at_the_string() -> None:
    # contract T1
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text(HEAD.replace("dataset: qa.jsonl", 'dataset: "\\ud800"'), "o.yaml")
    (diag,) = info.value.diagnostics
    assert diag.code == "E0201" and "surrogate" in diag.message
    assert diag.span is not None and (diag.span.line, diag.span.col) == (5, 43)


def test_json_surrogate_pairs_are_joined_and_lone_ones_rejected() -> None:
    # contract T1
    good = '{"version": 1, "name": "\\ud83d\\ude00", "requests": []}'
    assert parse_yaml_text(good, "o.json").data["name"] == "\U0001f600"
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text('{"version": 1, "name": "x\\udc00"}', "o.json")
    assert info.value.code == "E0201" and info.value.span is not None and info.value.span.col == 24
    with pytest.raises(AcxConfigError):
        parse_yaml_text('{"version": 1, "\\ud800": 1}', "o.json")  # keys too


def test_cli_params_with_a_lone_surrogate_do_not_crash() -> None:
    # contract T1
    diags = check_cli_params({"max_retries": "\ud800"}, ExecutionSpec, "--execution-params")
    assert [d.code for d in diags] == ["E0204"] and "surrogate" in diags[0].message


# ---- 2. NUL in strings -----------------------------------------------------------------------


def test_nul_in_a_path_is_e0204_naming_the_field() -> None:
    # contract T1
    diag = _one(_diags(HEAD.replace("dataset: qa.jsonl", 'dataset: "data/x\\0"')))
    assert diag.code == "E0204" and "NUL" in diag.message
    assert diag.path == "requests[0].benchmark.dataset"
    assert diag.span is not None and (diag.span.line, diag.span.col) == (5, 43)


# ---- 7. attempts.k bound ---------------------------------------------------------------------


@pytest.mark.parametrize("k", ["1001", "1000000000", "99999999999999999999999"])
def test_attempts_k_is_bounded(k: str) -> None:
    # contract T1
    diag = _one(_diags(HEAD + f"    execution: {{attempts: {{k: {k}}}}}\n"))
    assert diag.code == "E0204" and "<= 1000" in diag.message
    assert diag.span is not None and (diag.span.line, diag.span.col) == (7, 31)
    cli = check_cli_params({"attempts": {"k": int(k)}}, ExecutionSpec, "--execution-params")
    assert [d.code for d in cli] == ["E0204"] and cli[0].path == "--execution-params attempts.k"


def test_attempts_k_at_the_bound_is_fine() -> None:
    # contract T1
    assert not _diags(HEAD + "    execution: {attempts: {k: 1000}}\n")


# ---- 8. non-finite numbers -------------------------------------------------------------------


@pytest.mark.parametrize("value", [".inf", "1e400", ".nan", "-.inf"])
def test_non_finite_budget_is_e0204_at_the_value(value: str) -> None:
    # contract T1
    diag = _one(_diags(HEAD + f"    execution: {{run_timeout_seconds: {value}}}\n"))
    assert diag.code == "E0204" and "finite" in diag.message
    assert diag.span is not None and (diag.span.line, diag.span.col) == (7, 38)


def test_non_finite_runtime_and_cli_values_are_rejected() -> None:
    # contract T1
    diag = _one(_diags("runtime: {timeout_seconds: .inf}\n", "c.yaml"))
    assert diag.path == "runtime.timeout_seconds" and "finite" in diag.message
    cli = check_cli_params({"run_timeout_seconds": float("inf")}, ExecutionSpec, "--execution-params")
    assert [d.code for d in cli] == ["E0204"] and "finite" in cli[0].message


def test_non_finite_value_from_the_environment_is_rejected_with_its_span(project: Path) -> None:
    # contract T1
    (project / "o.yaml").write_text(HEAD + '    execution: {run_timeout_seconds: "${T}"}\n', encoding="utf-8")
    with pytest.raises(AcxUserError) as info:
        compile_orchestration("o.yaml", environ={"T": "inf"})
    (diag,) = info.value.diagnostics
    assert diag.code == "E0204" and "finite" in diag.message
    assert diag.span is not None and (diag.span.line, diag.span.col) == (7, 38)


# ---- 9. negative resources and limits, unknown providers --------------------------------------


@pytest.mark.parametrize("field", ["cpu", "memory_mb", "storage_mb", "gpu"])
def test_negative_resources_are_rejected(field: str) -> None:
    # contract T1
    diag = _one(_diags(f"environments: {{docker: {{resources: {{{field}: -1}}}}}}\n", "c.yaml"))
    assert diag.code == "E0204" and diag.path == f"environments.docker.resources.{field}"
    assert not _diags(f"environments: {{docker: {{resources: {{{field}: 0}}}}}}\n", "c.yaml")


def test_negative_provider_limits_point_at_the_entry() -> None:
    # contract T1
    text = "runtime: {provider_limits: {docker: -1, host_process: 0}, env_open_qps: {docker: -2}}\n"
    diags = _diags(text, "c.yaml")
    assert [(d.code, d.path) for d in diags] == [
        ("E0204", "runtime.provider_limits.docker"),
        ("E0204", "runtime.env_open_qps.docker"),
    ]
    assert diags[0].span is not None and diags[0].span.col == 37
    cli = check_cli_params({"provider_limits": {"docker": -3}}, ResolvedRuntimeOptions, "--runtime-params")
    assert [d.code for d in cli] == ["E0204"]


def test_unknown_provider_ids_get_did_you_mean() -> None:
    # contract T1
    diags = _diags("runtime: {provider_limits: {dockr: 2, k8s: 1}}\n", "c.yaml")
    assert [d.code for d in diags] == ["E0203", "E0203"]
    assert "`dockr`" in diags[0].message and diags[0].help is not None and "did you mean `docker`?" in diags[0].help
    assert diags[0].span is not None and diags[0].span.col == 29  # the key
    orchestration = "version: 1\nname: q\nruntime: {env_open_qps: {k8s: 1}}\nrequests: []\n"
    assert "E0203" in [d.code for d in _diags(orchestration)]


# ---- 12. YAML tags on mappings and sequences --------------------------------------------------


def test_tags_on_mappings_and_sequences_are_e0201() -> None:
    # contract T1
    text = HEAD.replace("benchmark: {", "benchmark: !!python/object:os.system {").replace(
        "harness: {", "harness: !foo {"
    )
    text += "    execution: {enabled_recipes: !!set [a]}\n"
    with pytest.raises(AcxConfigError) as info:
        parse_yaml_text(text, "o.yaml")
    assert [(d.code, d.span.line if d.span else 0) for d in info.value.diagnostics] == [
        ("E0201", 5),
        ("E0201", 6),
        ("E0201", 7),
    ]
    assert "`!foo`" in info.value.diagnostics[1].message
    # Explicit core tags stay fine.
    parse_yaml_text("a: !!map {b: !!seq [1]}\n", "c.yaml")


# ---- run-3. retry patterns -------------------------------------------------------------------


def test_invalid_retry_pattern_is_e0204_at_the_pattern() -> None:
    # contract T1
    diag = _one(_diags(HEAD + '    execution: {retry_pattern_list: ["ok", "50(3"]}\n'))
    assert diag.code == "E0204" and "regular expression" in diag.message
    assert diag.path == "requests[0].execution.retry_pattern_list[1]"
    assert diag.span is not None and (diag.span.line, diag.span.col) == (7, 44)


def test_invalid_retry_pattern_from_cli_and_environment(project: Path) -> None:
    # contract T1
    cli = check_cli_params({"retry_pattern_list": ["(["]}, ExecutionSpec, "--execution-params")
    assert [(d.code, d.path) for d in cli] == [("E0204", "--execution-params retry_pattern_list[0]")]
    (project / "o.yaml").write_text(HEAD + '    execution: {retry_pattern_list: ["${P}"]}\n', encoding="utf-8")
    with pytest.raises(AcxUserError) as info:
        compile_orchestration("o.yaml", environ={"P": "("})
    assert info.value.code == "E0204" and "regular expression" in info.value.diagnostics[0].message


def test_invalid_pattern_reaching_run_time_does_not_crash_the_task() -> None:
    # contract T1
    issue: Any = ExecutionIssue(severity="error", phase="run", code="model_failed", message="HTTP 503")
    assert retry_reason([issue], ["([", r"HTTP 5\d\d"]) is not None
    assert retry_reason([issue], ["(["]) is None


# ---- 11. unreadable YAML: line and column of the first bad byte -------------------------------


def test_non_utf8_yaml_names_line_and_column(tmp_path: Path) -> None:
    # contract T1
    from acx.compiler._yaml import read_text

    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b'version: 1\nname: "\xc3\xa9\xff"\n')
    with pytest.raises(AcxConfigError) as info:
        read_text(str(bad))
    assert info.value.code == "E0215" and info.value.path == str(bad)
    assert info.value.span is not None and (info.value.span.line, info.value.span.col) == (2, 9)


# ---- 2. the dataset loader itself never crashes on a NUL ---------------------------------------


def test_exact_match_loader_reports_a_nul_path() -> None:
    # contract T1
    from acx.components.benchmarks.exact_match import load_exact_match_dataset

    with pytest.raises(AcxUserError) as info:
        load_exact_match_dataset(Path("data/x\0.jsonl"))
    assert info.value.code == "E0401" and info.value.path == "benchmark.params.dataset"
