"""Single-run resolution from explicit arguments (contract R8)."""

from __future__ import annotations

import pytest

from acx.compiler import compile_run
from acx.errors import AcxUserError


def test_single_run_precedence(project, write) -> None:  # contract R8
    write(
        "config.yaml",
        "execution: {max_retries: 1, timeout_multiplier: 2.0}\nruntime: {reuse: true, results_dir: r}\n"
        "benchmarks: {exact_match: {case_sensitive: true, dataset: from-config.jsonl}}\n",
    )
    compiled = compile_run(
        "exact_match",
        "none",
        "qwen3",
        benchmark_params={"dataset": "qa.jsonl"},
        execution_params={"max_retries": 4},
        runtime_params={"progress": "plain"},
        environ={},
        cwd=str(project),
    )
    orch = compiled.orchestration
    assert orch.name == "run" and len(orch.requests) == 1
    run = orch.requests[0]
    assert run.name == "qwen3_exact_match_none"  # results namespace of a direct run
    req = run.request
    # component params: config entry → explicit arguments
    assert req.benchmark.params["dataset"] == "qa.jsonl" and req.benchmark.params["case_sensitive"] is True
    # execution: defaults → config → explicit non-None arguments
    assert req.execution.max_retries == 4 and req.execution.timeout_multiplier == 2.0
    # process runtime: defaults → config → explicit
    assert orch.runtime.results_dir == "r" and orch.runtime.progress == "plain"
    # reuse unspecified → the config's runtime reuse setting
    assert req.runtime.reuse is True
    assert req.model.id == "qwen3" and req.environment.id == "host_process"
    chain = compiled.provenance[run.name]["benchmark.params.dataset"]
    assert [c.source for c in chain] == ["config.yaml:3:59", "--benchmark-params"]
    assert compiled.base_dirs[run.name] == str(project)


def test_single_run_explicit_reuse_and_model_secret(project) -> None:  # contract R8
    compiled = compile_run(
        "exact_match",
        "openai_chat",
        "m",
        benchmark_params={"dataset": "qa.jsonl"},
        model_params={"base_url": "${URL}", "api_key": "${KEY}"},
        reuse=False,
        environ={"URL": "http://x", "KEY": "sk"},
        cwd=str(project),
    )
    req = compiled.orchestration.requests[0].request
    assert req.runtime.reuse is False
    assert req.model.base_url == "http://x" and req.model.api_key == "${KEY}"
    assert req.metadata.secret_refs == ["KEY"] and req.metadata.env_inputs == ["URL"]


def test_single_run_errors_name_the_flag(project) -> None:
    with pytest.raises(AcxUserError) as info:
        compile_run("exact_match", "none", "m", benchmark_params={"datset": "q"}, environ={}, cwd=str(project))
    diag = info.value.diagnostics[0]
    assert diag.path == "--benchmark-params datset" and diag.help == "did you mean `dataset`?"
    with pytest.raises(AcxUserError) as info:
        compile_run("exact_matc", "none", "m", environ={}, cwd=str(project))
    assert info.value.code == "E0301"
