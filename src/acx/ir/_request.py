"""RunRequest and its eight sections (contract R1), with the defaults of AgentCompass 1.0.1."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from acx.ir._common import (
    ArtifactCollectCommand,
    ArtifactLimits,
    ArtifactSpec,
    EnvironmentSetup,
    IRStruct,
    NetworkPolicy,
    PositiveSeconds,
    ResourceRequirements,
)

__all__ = [
    "ENVIRONMENT_SPEC_FIELDS",
    "MAX_ATTEMPTS",
    "AttemptsSpec",
    "BenchmarkSpec",
    "EnvironmentSpec",
    "ExecutionSpec",
    "ExportSpec",
    "HarnessSpec",
    "ModelLimits",
    "ModelPrice",
    "ModelRoleSpec",
    "ModelSpec",
    "OutputSpec",
    "RunMetadata",
    "RunRequest",
    "RunRuntimeSpec",
]

EvaluationMode = Literal["none", "reuse", "fresh"]

#: Upper bound of ``execution.attempts.k``: every attempt of every task is planned up front, so a
#: typo (``k: 1000000000``) would otherwise exhaust memory at compile time.
MAX_ATTEMPTS = 1000


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class ModelPrice(IRStruct, frozen=True):
    """USD per million tokens (the price table entry of one model)."""

    input_per_mtok: Annotated[float, msgspec.Meta(ge=0, description="USD per million prompt tokens")]
    output_per_mtok: Annotated[float, msgspec.Meta(ge=0, description="USD per million completion tokens")]
    cached_input_per_mtok: Annotated[
        Annotated[float, msgspec.Meta(ge=0)] | None, _d("USD per million cached prompt tokens; null = input price")
    ] = None


class ModelLimits(IRStruct, frozen=True):
    """Per-task model limits (every model call of one attempt, all roles together)."""

    max_tokens_total: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None, _d("prompt + completion tokens per attempt; null = no limit")
    ] = None
    max_model_calls: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None, _d("model calls per attempt; null = no limit")
    ] = None
    max_cost_usd: Annotated[
        Annotated[float, msgspec.Meta(gt=0)] | None, _d("USD per attempt (needs a price); null = no limit")
    ] = None


class ModelRoleSpec(IRStruct, frozen=True):
    """One model the run can call: where, how, with what key, at what price."""

    id: Annotated[str | None, _d("model id sent to the endpoint")] = None
    base_url: Annotated[str | None, _d("endpoint base URL")] = None
    api_key: Annotated[str | None, _d("API key; kept as a ${VAR} reference, never stored in clear")] = None
    api_protocol: Annotated[
        str | list[str] | None, _d("openai-chat | openai-responses | anthropic | auto (or a list)")
    ] = None
    params: Annotated[dict[str, Any], _d("inference parameters (temperature, max_tokens, ...)")] = {}
    wrap_api_key: Annotated[bool, _d("wrap the key for a usage-tracking gateway (with the run directory)")] = False
    price: Annotated[ModelPrice | None, _d("price per million tokens; null = cost unknown (never 0)")] = None
    max_connections: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None,
        _d(
            "concurrent connections to the endpoint; null: follows the run's concurrency "
            "(twice execution.task_concurrency, at least 8)"
        ),
    ] = None
    max_retries: Annotated[int, msgspec.Meta(ge=0, description="retries of a call after the first attempt")] = 3
    connect_timeout_seconds: Annotated[PositiveSeconds, _d("bound on connecting to the endpoint")] = 10.0
    request_timeout_seconds: Annotated[PositiveSeconds, _d("longest silence while waiting for an answer")] = 600.0
    total_timeout_seconds: Annotated[PositiveSeconds, _d("bound on one call, retries and waits included")] = 1800.0
    limits: Annotated[
        ModelLimits,
        _d("per-task limits: for `model`, all roles together; for a `model.roles` entry, that role's calls"),
    ] = ModelLimits()
    cache: Annotated[
        Literal["off", "read", "write", "read-write", "replay"],
        _d(
            "model-call cache of this role: off | read (answer hits from the cache) | write (store "
            "answers) | read-write | replay (answer only from the cache; a miss is an error)"
        ),
    ] = "off"


class ModelSpec(ModelRoleSpec, frozen=True):
    """A value object (R2): there is no model registry. The fields describe the ``agent`` role;
    ``roles`` adds more models by role (``grader``, ...)."""

    roles: Annotated[dict[str, ModelRoleSpec], _d("more models by role name (grader, ...)")] = {}
    cache_dir: Annotated[
        str | None,
        _d("the model-call cache directory, shared across runs; null: <results_dir>/.acx-cache/model-calls"),
    ] = None
    cache_max_bytes: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None,
        _d("bound on the cache directory's size; past it the least recently used entries go; null: 1 GiB"),
    ] = None


class BenchmarkSpec(IRStruct, frozen=True):
    id: Annotated[str, _d("benchmark id (acx list benchmark)")]
    params: Annotated[dict[str, Any], _d("validated benchmark config")] = {}


class HarnessSpec(IRStruct, frozen=True):
    id: Annotated[str, _d("harness id; `none` selects a harness-free benchmark")]
    params: Annotated[dict[str, Any], _d("validated harness config")] = {}


class EnvironmentSpec(IRStruct, frozen=True):
    """Provider id + provider params, stage network policies, evaluation mode, setup, env maps."""

    id: Annotated[str, _d("environment provider id (acx list env)")]
    params: Annotated[dict[str, Any], _d("provider-native options only")] = {}
    resources: Annotated[ResourceRequirements | None, _d("resources for every environment")] = None
    run_resources: Annotated[ResourceRequirements | None, _d("resources of the run environment")] = None
    evaluation_resources: Annotated[ResourceRequirements | None, _d("resources of the fresh verifier")] = None
    baseline_network_policy: Annotated[NetworkPolicy | None, _d("policy at sandbox start-up")] = None
    evaluation_baseline_network_policy: Annotated[
        NetworkPolicy | None, _d("start-up policy of the fresh verifier (requires fresh mode)")
    ] = None
    run_network_policy: Annotated[NetworkPolicy | None, _d("policy while the agent runs")] = None
    evaluation_network_policy: Annotated[NetworkPolicy | None, _d("policy while evaluating")] = None
    evaluation_environment_mode: Annotated[
        EvaluationMode | None, _d("none | reuse | fresh; unset = task, then benchmark default")
    ] = None
    env_variables: Annotated[dict[str, str], _d("public variables for every phase")] = {}
    run_env_variables: Annotated[dict[str, str], _d("variables for agent commands only")] = {}
    evaluation_env_variables: Annotated[dict[str, str], _d("variables for evaluation commands only")] = {}
    evaluation_environment_env_variables: Annotated[
        dict[str, str] | None, _d("fresh verifier start-up variables; null inherits, {} = no override")
    ] = None
    require_startup_env: Annotated[bool | None, _d("variables must reach sandbox start-up")] = None
    setup: Annotated[EnvironmentSetup, _d("image, workdir, build timeout, os")] = EnvironmentSetup()
    evaluation_setup: Annotated[EnvironmentSetup | None, _d("set-up of the fresh verifier (requires fresh mode)")] = (
        None
    )


#: The EnvironmentSpec fields that a flat ``environments.<id>`` config section may carry
#: beside provider params.
ENVIRONMENT_SPEC_FIELDS: frozenset[str] = frozenset(EnvironmentSpec.__struct_fields__) - {"id", "params"}


class AttemptsSpec(IRStruct, frozen=True):
    k: Annotated[
        int, msgspec.Meta(ge=1, le=MAX_ATTEMPTS, description=f"logical attempts per task (1 to {MAX_ATTEMPTS})")
    ] = 1
    strategy: Annotated[Literal["avg", "pass"], _d("avg: all attempts; pass: stop at first correct")] = "avg"


class ExecutionSpec(IRStruct, frozen=True):
    task_concurrency: Annotated[int, msgspec.Meta(ge=1, description="global physical-attempt limit")] = 32
    attempts: Annotated[AttemptsSpec, _d("attempt plan {k, strategy}")] = AttemptsSpec()
    enabled_recipes: Annotated[list[str], _d("recipe whitelist; [] = every matching recipe")] = []
    keep_environment: Annotated[bool, _d("leave sandboxes running after the task")] = False
    enable_analysis: Annotated[
        bool, _d("AgentCompass post-attempt analyzers; not supported by acx (only false is accepted, E0311)")
    ] = False
    analysis_params: Annotated[dict[str, Any], _d("analyzer configuration; not supported by acx (E0311)")] = {}
    max_retries: Annotated[int, msgspec.Meta(ge=0, description="shared extra retries per attempt")] = 0
    retry_pattern_list: Annotated[
        list[str] | None, _d("regexes; ERROR issues whose message/code match are retried")
    ] = None
    retry_min_delay_seconds: Annotated[float, msgspec.Meta(ge=0, description="first backoff")] = 5.0
    retry_max_delay_seconds: Annotated[float, msgspec.Meta(ge=0, description="backoff cap")] = 60.0
    run_timeout_seconds: Annotated[PositiveSeconds | None, _d("run budget T; null inherits task/benchmark default")] = (
        None
    )
    run_timer_compensation_seconds: Annotated[
        float, msgspec.Meta(ge=0, description="watchdog slack added to T (never scaled)")
    ] = 120.0
    evaluation_timeout_seconds: Annotated[PositiveSeconds | None, _d("evaluation budget; null inherits")] = None
    timeout_multiplier: Annotated[float, msgspec.Meta(gt=0, description="common budget multiplier")] = 1.0
    run_timeout_multiplier: Annotated[PositiveSeconds | None, _d("replaces timeout_multiplier for the run stage")] = (
        None
    )
    evaluation_timeout_multiplier: Annotated[
        PositiveSeconds | None, _d("replaces timeout_multiplier for evaluation")
    ] = None
    runresult_collect_timeout_seconds: Annotated[
        PositiveSeconds, _d("bound on collecting saved harness output (never scaled)")
    ] = 60.0
    artifact_collect_timeout_seconds: Annotated[
        PositiveSeconds | None, _d("bound on all collection commands together")
    ] = None
    artifact_limits: Annotated[ArtifactLimits, _d("download limits {max_mb, max_files, timeout_seconds}")] = (
        ArtifactLimits()
    )
    save_artifacts: Annotated[bool | None, _d("null: true for fresh, false for reuse/none")] = None
    artifacts: Annotated[
        list[ArtifactSpec] | None, _d("replaces task artifact paths; null inherits; [] = no extra paths")
    ] = None
    artifact_collect: Annotated[list[ArtifactCollectCommand] | None, _d("replaces collection commands; [] clears")] = (
        None
    )
    max_cost_usd: Annotated[
        Annotated[float, msgspec.Meta(gt=0)] | None,
        _d("USD for the whole run; reaching it stops the run cleanly (needs prices)"),
    ] = None


class RunRuntimeSpec(IRStruct, frozen=True):
    """Per-request runtime (R3): result reuse."""

    reuse: Annotated[bool | None, _d("reuse completed tasks of an earlier run")] = None
    reuse_run_id: Annotated[str | None, _d("run id to reuse; implies reuse")] = None
    checkpoint_resume: Annotated[bool | None, _d("recover evaluation from checkpoints")] = None


class ExportSpec(IRStruct, frozen=True):
    """One export ``acx run`` writes at the end of the run (``acx results export``)."""

    format: Annotated[Literal["inspect", "harbor", "atif"], _d("inspect, harbor or atif (docs/results.md)")]
    dir: Annotated[
        str | None,
        _d("directory to write; relative = inside the run directory; default exports/<format>"),
    ] = None
    inspect_format: Annotated[Literal["eval", "json"], _d("Inspect log format (format inspect)")] = "eval"


class OutputSpec(IRStruct, frozen=True):
    run_name: Annotated[str | None, _d("optional path namespace under results_dir")] = None
    run_id: Annotated[str | None, _d("explicit run id (must not exist)")] = None
    export: Annotated[
        list[ExportSpec], _d("exports written when the run ends, e.g. [{format: inspect}] (docs/results.md)")
    ] = []


class RunMetadata(IRStruct, frozen=True):
    config_path: Annotated[list[str], _d("config files loaded, in order")] = []
    recipe_dirs: Annotated[list[str], _d("trusted external recipe directories")] = []
    request_name: Annotated[str | None, _d("orchestration request name")] = None
    spec_path: Annotated[str | None, _d("spec file the request came from")] = None
    env_inputs: Annotated[list[str], _d("process environment variables read at compile time")] = []
    secret_refs: Annotated[list[str], _d("variables resolved only at use time (secrets)")] = []
    harness_alias: Annotated[
        str | None, _d("the AgentCompass harness id the request named, mapped to `harness.id` (docs/agents.md)")
    ] = None


class RunRequest(IRStruct, frozen=True):
    model: ModelSpec
    benchmark: BenchmarkSpec
    harness: HarnessSpec
    environment: EnvironmentSpec
    execution: ExecutionSpec = ExecutionSpec()
    runtime: RunRuntimeSpec = RunRuntimeSpec()
    output: OutputSpec = OutputSpec()
    metadata: RunMetadata = RunMetadata()
