"""Tasks and plans (contracts P1–P9): TaskSpec → ExecutionPlan → PreparedTask.

``UNSET`` and ``None`` differ on TaskSpec and BenchmarkPlan timeouts: ``UNSET`` means "this source
says nothing" (the next source, finally the harness fallback, applies, T2), ``None`` means "no
deadline" (T1).
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, UnsetType

from acx.ir._common import (
    ArtifactCollectCommand,
    ArtifactLimits,
    ArtifactSpec,
    EnvironmentSetup,
    IRStruct,
    NetworkPolicy,
    ResourceRequirements,
)
from acx.ir._request import EnvironmentSpec, ExecutionSpec

__all__ = [
    "UNSET",
    "BenchmarkPlan",
    "ExecutionPlan",
    "FileRef",
    "HarnessPlan",
    "Message",
    "OutputFileSpec",
    "PreparedTask",
    "StepPlan",
    "TaskInput",
    "TaskOutput",
    "TaskSpec",
    "TaskStep",
    "UnsetType",
]

EvaluationMode = Literal["none", "reuse", "fresh"]
OptSeconds = float | None | UnsetType


class TaskStep(IRStruct, frozen=True):
    """One step of a multi-step task (Harbor's ``[[steps]]``): its own instruction, agent run and
    verifier, in order in the task's one environment. Unset fields inherit the task's."""

    name: str
    question: str = ""
    run_timeout_seconds: OptSeconds = UNSET
    evaluation_timeout_seconds: OptSeconds = UNSET
    run_user: str | None = None
    evaluation_user: str | None = None
    #: The step's own agent / verifier phase policies; None = the task's.
    run_network_policy: NetworkPolicy | None = None
    evaluation_network_policy: NetworkPolicy | None = None
    #: None = the task's ``evaluation_env_variables``; a mapping replaces them for this step.
    evaluation_env_variables: dict[str, str] | None = None
    #: The remaining steps are skipped when a key's reward is below its threshold (or missing).
    min_reward: dict[str, float] | None = None
    #: Collected after the step's agent, with the task's (into the step's own directory).
    artifacts: list[ArtifactSpec] = []
    artifact_collect: list[ArtifactCollectCommand] = []
    #: Benchmark-private paths and files of the step (tests, solution, workdir).
    metadata: dict[str, Any] = {}


class TaskSpec(IRStruct, frozen=True):
    """One task as a benchmark loaded it (P2). Raw dataset records stay in ``metadata``."""

    task_id: str
    question: str = ""
    category: str = "all"
    ground_truth: Any = None
    metadata: dict[str, Any] = {}
    resources: ResourceRequirements | None = None
    run_resources: ResourceRequirements | None = None
    evaluation_resources: ResourceRequirements | None = None
    baseline_network_policy: NetworkPolicy | None = None
    evaluation_baseline_network_policy: NetworkPolicy | None = None
    run_network_policy: NetworkPolicy | None = None
    evaluation_network_policy: NetworkPolicy | None = None
    evaluation_environment_mode: EvaluationMode | None = None
    env_variables: dict[str, str] = {}
    run_env_variables: dict[str, str] = {}
    evaluation_env_variables: dict[str, str] = {}
    #: None inherits the public vars, a mapping replaces them, {} inherits nothing (V1).
    evaluation_environment_env_variables: dict[str, str] | None = None
    require_startup_env: bool = False
    #: None = no task declaration (benchmark default applies); [] = declared, no extra paths.
    artifacts: list[ArtifactSpec] | None = None
    artifact_collect: list[ArtifactCollectCommand] | None = None
    environment_setup: EnvironmentSetup = EnvironmentSetup()
    #: None = no verifier environment declared (inherits the run setup); EnvironmentSetup() = independent (H2).
    evaluation_environment_setup: EnvironmentSetup | None = None
    run_timeout_seconds: OptSeconds = UNSET
    evaluation_timeout_seconds: OptSeconds = UNSET
    #: The sandbox user (name or uid) agent / evaluation commands run as; None = the image's
    #: default user (Harbor's ``[agent].user`` / ``[verifier].user``).
    run_user: str | None = None
    evaluation_user: str | None = None
    load_warnings: list[str] = []
    #: A multi-step task's steps, run in order in one environment; [] = a single-step task.
    steps: list[TaskStep] = []


class BenchmarkPlan(IRStruct, frozen=True):
    """Benchmark-private per-task settings (P2)."""

    run_timeout_seconds: OptSeconds = UNSET
    evaluation_timeout_seconds: OptSeconds = UNSET
    params: dict[str, Any] = {}


class HarnessPlan(IRStruct, frozen=True):
    """Validated harness settings (P2); a bare one for harness-free benchmarks."""

    inject_network_restriction_notice: bool = True
    default_run_timeout_seconds: float | None = None
    #: Budget of the harness's ``install_agent`` phase (installed agents); None = no install phase.
    install_timeout_seconds: float | None = None
    #: Hash of everything the install runs, uploads and sees (the install cache's key before the
    #: base image's digest is added); None = no install, or the harness config says install_cache false.
    install_cache_key: str | None = None
    #: The harness config says ``install_cache = true``: a driver that cannot cache is refused (E0459).
    install_cache_required: bool = False
    params: dict[str, Any] = {}


class ExecutionPlan(IRStruct, frozen=True):
    """The resolved plan of one task × semantic attempt; the only source of budgets at run time (T5)."""

    task_id: str
    attempt: int
    environment: EnvironmentSpec
    evaluation_environment: EnvironmentSpec | None = None
    evaluation_environment_mode: EvaluationMode = "none"
    run_network_policy: NetworkPolicy | None = None
    evaluation_network_policy: NetworkPolicy | None = None
    benchmark_plan: BenchmarkPlan = BenchmarkPlan()
    harness_plan: HarnessPlan = HarnessPlan()
    execution: ExecutionSpec = ExecutionSpec()
    applied_recipes: list[str] = []
    artifacts: list[ArtifactSpec] = []
    artifact_collect: list[ArtifactCollectCommand] = []
    artifact_collection_supported: bool = True
    collect_artifacts: bool = False
    save_artifacts: bool = False
    artifact_limits: ArtifactLimits = ArtifactLimits()
    artifact_collect_timeout_seconds: float | None = None
    runresult_collect_timeout_seconds: float = 60.0
    run_timer_compensation_seconds: float = 120.0
    run_timeout_seconds: float | None = None
    evaluation_timeout_seconds: float | None = None
    #: Budget of the ``install_agent`` phase (before ``run_harness``), scaled by the common
    #: ``timeout_multiplier``; None = the harness installs nothing.
    install_timeout_seconds: float | None = None
    #: The install cache's key (the harness's; the driver adds the base image's digest) when the
    #: agent is installed once per key in a derived image rather than in each attempt; None = each
    #: attempt installs (no install phase, ``install_cache = false``, or a driver that cannot cache).
    install_cache_key: str | None = None
    #: Names of process env vars the provider must resolve right before use (V1); names only.
    required_env: list[str] = []
    #: The sandbox user the run stage (install and harness) runs as; None = the image's default.
    run_user: str | None = None
    #: The sandbox user the evaluation runs as; None = the image's default.
    evaluation_user: str | None = None
    #: A multi-step task's steps (agent run then verification each, in one environment); [] = one.
    steps: list[StepPlan] = []
    #: Set only in the interpreter's view of the plan for one step: its index into ``steps``.
    step: int | None = None


class StepPlan(IRStruct, frozen=True):
    """One step of a multi-step plan: the step's resolved budgets and users (T5)."""

    name: str
    run_timeout_seconds: float | None = None
    evaluation_timeout_seconds: float | None = None
    run_user: str | None = None
    evaluation_user: str | None = None
    #: The step's agent / verifier phase policies when they differ from the plan's; None = the plan's.
    run_network_policy: NetworkPolicy | None = None
    evaluation_network_policy: NetworkPolicy | None = None
    #: None = the environment's evaluation variables; names only resolve right before use (V1).
    evaluation_env_variables: dict[str, str] | None = None
    min_reward: dict[str, float] | None = None
    #: Collected with the plan's after the step's agent, into ``attempt-N/steps/<name>/``.
    artifacts: list[ArtifactSpec] = []
    artifact_collect: list[ArtifactCollectCommand] = []


class FileRef(IRStruct, frozen=True):
    path: str
    label: str | None = None


class Message(IRStruct, frozen=True):
    role: str
    content: Any = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class TaskInput(IRStruct, frozen=True):
    prompt: str = ""
    system_prompt: str | None = None
    media: list[dict[str, Any]] = []
    files: list[FileRef] = []
    workspace: str | None = None
    tools: list[dict[str, Any]] = []
    messages: list[Message] = []


class OutputFileSpec(IRStruct, frozen=True):
    path: str
    description: str | None = None


class TaskOutput(IRStruct, frozen=True):
    answer: Any = None
    files: list[OutputFileSpec] = []


class PreparedTask(IRStruct, frozen=True):
    """Harness-facing content of a task (P2). Evaluation-only data never lands here (B1)."""

    task_id: str
    category: str = "all"
    input: TaskInput = TaskInput()
    output: TaskOutput = TaskOutput()
    ground_truth: Any = None
    metadata: dict[str, Any] = {}
