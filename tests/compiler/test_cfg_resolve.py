"""Precedence resolution with provenance (contracts R8–R13, P8, V1, H3, V4)."""

from __future__ import annotations

import pytest

from acx.compiler import compile_orchestration, dry_run_payload, output_namespace
from acx.drivers import default_provider_limits
from acx.errors import AcxConfigError, AcxResolutionError, AcxUserError

ORCH = """
version: 1
name: nightly
task_concurrency: 16
runtime: {results_dir: out, provider_limits: {docker: 32}}
defaults:
  harness: {id: openai_chat, temperature: 0.2}
  environment: {id: docker, run_network_policy: {network_mode: allowlist, allowed_hosts: [pypi.org]}}
  model: {id: base-model, base_url: "${MODEL_BASE_URL}", api_key: "${MODEL_API_KEY}", params: {t: 0}}
  execution: {attempts: {k: 3}, max_retries: 2, run_timeout_seconds: 300}
  runtime: {checkpoint_resume: false}
  output: {run_name: exp1}
requests:
  - name: qa
    benchmark: {id: exact_match, dataset: data/qa.jsonl}
    execution: {run_timeout_seconds: 600}
    model: {id: other-model}
  - name: tb
    benchmark: {id: harbor, path: tasks/}
    harness: {id: oracle}
    environment: {run_network_policy: no-network, env_variables: {B: "${B_VAL}"}}
    runtime: {reuse_run_id: first}
"""
CONFIG = """
execution: {timeout_multiplier: 1.5, max_retries: 1, task_concurrency: 4, run_timeout_seconds: 100}
runtime: {progress: plain, reuse: true, provider_limits: {host_process: 8}}
benchmarks:
  exact_match: {case_sensitive: true, strip_punctuation: true}
harnesses:
  openai_chat: {temperature: 0.9, max_tokens: 64}
environments:
  docker: {pull: missing, env_variables: {A: "1"}, setup: {workdir: /app}}
"""
ENV = {"MODEL_BASE_URL": "http://models.local/v1", "MODEL_API_KEY": "sk-live-123"}


@pytest.fixture()
def compiled(project, write):
    write("orch.yaml", ORCH)
    write("config.yaml", CONFIG)
    return compile_orchestration("orch.yaml", environ=ENV, cwd=str(project))


def _req(compiled, name):
    return next(r for r in compiled.orchestration.requests if r.name == name).request


def test_orchestration_precedence_for_execution(compiled) -> None:  # contract R10
    qa, tb = _req(compiled, "qa"), _req(compiled, "tb")
    # defaults → config execution → defaults.execution → request.execution
    assert qa.execution.run_timeout_seconds == 600
    assert tb.execution.run_timeout_seconds == 300
    assert qa.execution.max_retries == 2  # defaults.execution beats the config
    assert qa.execution.timeout_multiplier == 1.5  # config beats the field default
    assert qa.execution.attempts.k == 3 and qa.execution.attempts.strategy == "avg"
    chain = compiled.provenance["qa"]["execution.run_timeout_seconds"]
    assert [c.layer for c in chain] == ["default", "project config", "orchestration defaults", "request `qa`"]
    assert [c.value for c in chain] == [None, 100, 300, 600]
    assert chain[-1].source == "orch.yaml:15:38"
    col = CONFIG.lstrip("\n").splitlines()[0].index("100") + 1
    assert chain[1].source == f"config.yaml:1:{col}"


def test_global_task_concurrency(project, write) -> None:  # contract R11
    write("orch.yaml", ORCH)
    write("config.yaml", CONFIG)
    compiled = compile_orchestration("orch.yaml", environ=ENV, cwd=str(project))
    assert compiled.orchestration.task_concurrency == 16
    assert all(r.request.execution.task_concurrency == 16 for r in compiled.orchestration.requests)
    chain = compiled.orchestration_provenance["task_concurrency"]
    assert [c.value for c in chain] == [32, 4, 16]
    cli = compile_orchestration("orch.yaml", environ=ENV, cwd=str(project), task_concurrency=2)
    assert cli.orchestration.task_concurrency == 2
    assert cli.provenance["qa"]["execution.task_concurrency"][-1].source == "--task-concurrency"
    write("orch.yaml", ORCH.replace("task_concurrency: 16\n", ""))
    from_config = compile_orchestration("orch.yaml", environ=ENV, cwd=str(project))
    assert from_config.orchestration.task_concurrency == 4


def test_component_params_config_then_defaults_then_request(compiled) -> None:  # contract R10
    qa = _req(compiled, "qa")
    assert qa.benchmark.id == "exact_match"
    assert qa.benchmark.params["dataset"] == "data/qa.jsonl"  # relative paths stay as written
    assert qa.benchmark.params["case_sensitive"] is True  # config entry
    assert qa.benchmark.params["normalize_whitespace"] is True  # normalised: defaults filled
    assert qa.harness.params["temperature"] == 0.2  # defaults beat config
    assert qa.harness.params["max_tokens"] == 64  # config entry for the selected id
    tb = _req(compiled, "tb")
    # defaults.harness selects openai_chat: its params do not leak into the request's oracle harness
    assert tb.harness.id == "oracle" and "temperature" not in tb.harness.params
    assert compiled.base_dirs["qa"] == str(compiled.base_dirs["tb"])


def test_model_is_defaults_then_request(compiled) -> None:  # contract R10, R2
    qa, tb = _req(compiled, "qa"), _req(compiled, "tb")
    assert qa.model.id == "other-model" and tb.model.id == "base-model"
    assert qa.model.base_url == "http://models.local/v1"
    # secrets stay references (resolved by the process that uses them), their names recorded
    assert qa.model.api_key == "${MODEL_API_KEY}"
    assert qa.metadata.secret_refs == ["MODEL_API_KEY"]
    assert "MODEL_BASE_URL" in qa.metadata.env_inputs


def test_environment_merge_rules(compiled) -> None:  # reference §2.3: policies wholesale, env maps per key
    qa, tb = _req(compiled, "qa"), _req(compiled, "tb")
    assert qa.environment.id == "docker"
    assert qa.environment.params["pull"] == "missing"
    assert qa.environment.setup.workdir == "/app"
    assert qa.environment.run_network_policy.network_mode == "allowlist"
    # replaced wholesale by the string shorthand: allowed_hosts does not survive
    assert tb.environment.run_network_policy.network_mode == "no-network"
    assert tb.environment.run_network_policy.allowed_hosts == []
    # env maps are dict-merged per key and keep references verbatim (V1)
    assert tb.environment.env_variables == {"A": "1", "B": "${B_VAL}"}


def test_per_request_runtime_and_output(compiled) -> None:  # contract R10
    qa, tb = _req(compiled, "qa"), _req(compiled, "tb")
    assert qa.runtime.reuse is True  # config runtime.reuse
    assert qa.runtime.checkpoint_resume is False  # defaults.runtime
    assert tb.runtime.reuse_run_id == "first" and tb.runtime.reuse is True  # implied
    assert qa.output.run_name == "exp1" and qa.output.run_id is None


def test_orchestration_runtime(compiled) -> None:  # contract R10, R3
    rt = compiled.orchestration.runtime
    assert rt.results_dir == "out" and rt.progress == "plain"
    # The config's limits win over the used providers' defaults (explicit values stay, used or
    # not: host_process is not used here); unused providers' defaults are left out.
    used = {r.request.environment.id for r in compiled.orchestration.requests}
    assert used == {"docker"}
    assert rt.provider_limits == {"docker": 32, "host_process": 8}
    assert set(rt.env_open_qps) == used
    assert default_provider_limits()["bwrap"] == 128  # registered, but no request uses it


def test_execution_params_from_the_command_line_win(project, write) -> None:  # contract R8, T4
    write("orch.yaml", ORCH)
    compiled = compile_orchestration(
        "orch.yaml",
        environ=ENV,
        cwd=str(project),
        execution_params={"run_timeout_seconds": 42, "artifact_limits": {"max_mb": 10}},
        runtime_params={"results_dir": "cli-out"},
    )
    qa = _req(compiled, "qa")
    assert qa.execution.run_timeout_seconds == 42
    assert qa.execution.artifact_limits.max_mb == 10 and qa.execution.artifact_limits.timeout_seconds == 600
    assert compiled.orchestration.runtime.results_dir == "cli-out"
    chain = compiled.provenance["qa"]["execution.run_timeout_seconds"]
    assert chain[-1].layer == "command line" and chain[-1].source == "--execution-params"


def test_explicit_configs_layer_in_order(project, write) -> None:  # contract R4
    write("orch.yaml", ORCH)
    write("a.yaml", "execution: {timeout_multiplier: 2.0}\n")
    write("b.yaml", "execution: {timeout_multiplier: 3.0}\n")
    compiled = compile_orchestration("orch.yaml", configs=["a.yaml", "b.yaml"], environ=ENV, cwd=str(project))
    assert _req(compiled, "qa").execution.timeout_multiplier == 3.0
    assert [c.source.split(":")[0] for c in compiled.provenance["qa"]["execution.timeout_multiplier"]] == [
        "ExecutionSpec default",
        "a.yaml",
        "b.yaml",
    ]


def test_null_drops_earlier_environment_layers(project, write) -> None:  # reference §3.1
    write("orch.yaml", ORCH)
    write("a.yaml", "environments: {docker: {pull: missing}}\n")
    write("b.yaml", "environments: {docker: null}\n")
    compiled = compile_orchestration("orch.yaml", configs=["a.yaml", "b.yaml"], environ=ENV, cwd=str(project))
    assert _req(compiled, "qa").environment.params["pull"] == "never"


def test_dry_run_payload_shape_and_redaction(project, write) -> None:  # contract P8
    write("orch.yaml", ORCH.replace('"${MODEL_API_KEY}"', "sk-literal-secret"))
    compiled = compile_orchestration("orch.yaml", environ=ENV, cwd=str(project))
    payload = dry_run_payload(compiled)
    assert payload["format_version"] == 1
    assert list(payload) == [
        "format_version",
        "orchestration_id",
        "name",
        "task_concurrency",
        "runtime",
        "requests",
    ]
    first = payload["requests"][0]
    assert list(first)[:3] == ["key", "index", "name"]
    assert set(first) >= {
        "model",
        "benchmark",
        "harness",
        "environment",
        "execution",
        "runtime",
        "output",
        "metadata",
    }
    assert first["key"] == f"{payload['orchestration_id']}/0"
    assert first["benchmark"]["id"] == "exact_match"
    assert first["model"]["api_key"] == "********"
    assert "sk-literal-secret" not in str(payload)
    chain = compiled.provenance["qa"]["model.api_key"]
    assert "sk-literal-secret" not in str(chain)


def test_orchestration_id_is_content_derived(project, write) -> None:  # contract R13
    write("orch.yaml", ORCH)
    a = compile_orchestration("orch.yaml", environ=ENV, cwd=str(project))
    b = compile_orchestration("orch.yaml", environ=ENV, cwd=str(project))
    assert a.orchestration.id == b.orchestration.id and len(a.orchestration.id) == 12
    c = compile_orchestration("orch.yaml", environ=ENV, cwd=str(project), task_concurrency=3)
    assert c.orchestration.id != a.orchestration.id
    assert [r.key for r in a.orchestration.requests] == [f"{a.orchestration.id}/0", f"{a.orchestration.id}/1"]
    assert [(r.index, r.name) for r in a.orchestration.requests] == [(0, "qa"), (1, "tb")]


def test_missing_env_var_is_a_resolution_error(project, write) -> None:  # contract R6
    write("orch.yaml", ORCH)
    with pytest.raises(AcxResolutionError) as info:
        compile_orchestration("orch.yaml", environ={"MODEL_API_KEY": "x"}, cwd=str(project))
    (diag,) = info.value.diagnostics
    assert diag.code == "E0302" and "MODEL_BASE_URL" in diag.message and str(diag.span).startswith("orch.yaml:8:")


def test_missing_secret_is_only_a_warning_at_compile_time(project, write) -> None:  # contract R6, P8
    # A secret stays a reference in the request, so compiling (a dry run in CI) never needs it;
    # `acx run` refuses up front while it is missing (E0310).
    write("orch.yaml", ORCH)
    compiled = compile_orchestration("orch.yaml", environ={"MODEL_BASE_URL": "x"}, cwd=str(project))
    (warning,) = [w for w in compiled.warnings if w.code == "W0302"]  # once, though two requests use it
    assert warning.code == "W0302" and warning.severity == "warning" and "MODEL_API_KEY" in warning.message
    assert str(warning.span).startswith("orch.yaml:8:")
    request = compiled.orchestration.requests[0].request
    assert request.model.api_key == "${MODEL_API_KEY}" and request.metadata.secret_refs == ["MODEL_API_KEY"]


def test_missing_required_param_after_layering(project, write) -> None:
    write(
        "orch.yaml",
        "version: 1\nrequests:\n  - name: a\n    benchmark: {id: exact_match}\n    harness: {id: none}\n",
    )
    with pytest.raises(AcxResolutionError) as info:
        compile_orchestration("orch.yaml", environ={}, cwd=str(project))
    diag = info.value.diagnostics[0]
    assert "dataset" in diag.message and str(diag.span) == "orch.yaml:3:5"


def test_param_from_config_satisfies_required_and_environment_defaults_to_host_process(project, write) -> None:
    write(
        "orch.yaml",
        "version: 1\nrequests:\n  - name: a\n    benchmark: {id: exact_match}\n    harness: {id: none}\n",
    )
    write("config.yaml", "benchmarks: {exact_match: {dataset: qa.jsonl}}\n")
    compiled = compile_orchestration("orch.yaml", environ={}, cwd=str(project))
    req = compiled.orchestration.requests[0].request
    assert req.benchmark.params["dataset"] == "qa.jsonl" and req.environment.id == "host_process"
    assert compiled.orchestration.name == "orch"


def test_env_var_strings_convert_to_typed_fields(project, write) -> None:  # contract R6
    write(
        "orch.yaml",
        'version: 1\ntask_concurrency: ${TC}\ndefaults: {execution: {max_retries: "${R}"}}\n'
        "requests:\n  - name: a\n    benchmark: {id: exact_match, dataset: q.jsonl}\n"
        "    harness: {id: none}\n",
    )
    compiled = compile_orchestration("orch.yaml", environ={"TC": "5", "R": "3"}, cwd=str(project))
    assert compiled.orchestration.task_concurrency == 5
    req = compiled.orchestration.requests[0].request
    assert req.execution.max_retries == 3
    assert compiled.provenance["a"]["execution.max_retries"][-1].source.endswith("via ${R}")
    with pytest.raises(AcxResolutionError) as info:
        compile_orchestration("orch.yaml", environ={"TC": "5", "R": "many"}, cwd=str(project))
    assert "max_retries" in info.value.diagnostics[0].message


def test_evaluation_only_fields_need_fresh_mode(project, write) -> None:
    write(
        "orch.yaml",
        "version: 1\ndefaults: {environment: {evaluation_environment_mode: reuse}}\n"
        "requests:\n  - name: a\n    benchmark: {id: exact_match, dataset: q.jsonl}\n"
        "    harness: {id: none}\n"
        "    environment: {evaluation_setup: {image: x}}\n",
    )
    with pytest.raises(AcxResolutionError) as info:
        compile_orchestration("orch.yaml", environ={}, cwd=str(project))
    diag = info.value.diagnostics[0]
    assert diag.code == "E0308" and "fresh" in diag.message and diag.span.line == 7


def test_spec_must_be_an_orchestration(project, write) -> None:
    write("cfg.yaml", "execution: {max_retries: 1}\n")
    with pytest.raises(AcxConfigError) as info:
        compile_orchestration("cfg.yaml", environ={}, cwd=str(project))
    assert info.value.code == "E0210"


def test_cli_params_are_validated(project, write) -> None:
    write("orch.yaml", ORCH)
    with pytest.raises(AcxUserError) as info:
        compile_orchestration(
            "orch.yaml",
            environ=ENV,
            cwd=str(project),
            execution_params={"max_retires": 1, "task_concurrency": 3},
        )
    codes = sorted(d.code for d in info.value.diagnostics)
    assert codes == ["E0203", "E0213"]
    assert any("did you mean `max_retries`" in (d.help or "") for d in info.value.diagnostics)


def test_output_namespace() -> None:  # reference §4
    assert output_namespace("swe verified/1") == "swe_verified_1"
    assert output_namespace("a.b=c-d_e") == "a.b=c-d_e"


def test_recipe_dirs_are_recorded_in_metadata(project, write) -> None:  # contract R9, RC1
    (project / "sub").mkdir()
    write("sub/config.yaml", "runtime: {recipe_dirs: [./from-config]}\n")
    write(
        "orch.yaml",
        "version: 1\nruntime: {recipe_dirs: [./my_recipes]}\nrequests:\n"
        "  - {name: a, benchmark: {id: exact_match, dataset: q}, harness: {id: none}}\n",
    )
    compiled = compile_orchestration("orch.yaml", configs=["sub/config.yaml"], environ={}, cwd=str(project))
    meta = compiled.orchestration.requests[0].request.metadata
    assert meta.recipe_dirs == [str(project / "my_recipes")]  # the orchestration beats the config
    assert meta.config_path == [str(project / "sub" / "config.yaml")]
    assert compiled.orchestration.runtime.recipe_dirs == ["./my_recipes"]
