"""Base classes of benchmarks and harnesses: a plan-time half and a run-time half.

Plan-time methods (``load_tasks``, ``select_tasks``, ``build_plan``, …) are pure: they may read
dataset files and task directories, never open an environment, call a model or read a secret
(B3, B5, RC4). Run-time methods are ``async`` and receive an open :class:`acx.drivers.Session`.

Module rule for implementations: no trio, docker or HTTP client import at module level; import
them inside the run-time methods so ``acx compile`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from acx.components._configs import BenchmarkConfig, HarnessConfig
from acx.errors import AcxInternalError
from acx.ir import (
    ArtifactSpec,
    BenchmarkPlan,
    ExecutionIssue,
    ExecutionPlan,
    HarnessPlan,
    MetricContract,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskSpec,
)

if TYPE_CHECKING:
    from acx.components._context import HarnessContext
    from acx.drivers import Session

__all__ = ["DEFAULT_ARTIFACTS_DIR", "BaseBenchmark", "BaseHarness"]

#: Collected for every benchmark that collects artifacts (A1).
DEFAULT_ARTIFACTS_DIR = "/logs/artifacts"


class BaseBenchmark:
    id: ClassVar[str]
    description: ClassVar[str]
    config_class: ClassVar[type[BenchmarkConfig]] = BenchmarkConfig
    #: Default evaluation mode when neither request nor task sets one (P5).
    evaluation_environment_mode: ClassVar[str] = "none"
    #: Class-level capability; False disables artifact collection entirely (A1, A3).
    collect_artifacts: ClassVar[bool] = True
    parallel_attempts_safe: ClassVar[bool] = False
    #: Runs tasks itself (``run_task``); must be paired with harness ``none``.
    harness_free: ClassVar[bool] = False
    #: Tasks write absolute paths (/logs, /tests…): needs a driver with an isolated filesystem.
    requires_isolated_filesystem: ClassVar[bool] = False
    metric_contract: ClassVar[MetricContract] = MetricContract.binary("correct")
    #: Observations recorded when evaluation times out (plus an error issue); None = no score.
    evaluation_timeout_metrics: ClassVar[dict[str, Any] | None] = None
    #: A task with no run-phase policy (neither the request nor the task sets one) runs its agent
    #: under the environment's baseline policy instead of the planner's last default ``public``
    #: (P6). Harbor: ``resolve_agent_phase_policy`` — the explicit agent policy, else the baseline.
    run_policy_follows_baseline: ClassVar[bool] = False

    def __init__(self, config: BenchmarkConfig, *, base_dir: Path | None = None) -> None:
        self.config = config
        #: Directory relative paths in the config resolve against (the spec file's directory).
        self.base_dir = base_dir or Path.cwd()

    # ---- hooks the interpreter reads ----------------------------------------------------------
    @property
    def calls_model(self) -> bool:
        """The benchmark itself calls the run's models (a model-graded scorer): the run starts its
        model gateway for the attempt even when the harness calls none. Default: False."""
        return False

    def aggregate_metrics(self, outcomes: list[Any], request: RunRequest, report: Any) -> Any:
        """The run's metrics report after the standard aggregation (``report``, over the finished
        tasks' ``outcomes`` in dataset order): return a replacement to aggregate differently, or
        None to keep it. Default: None."""
        return None

    def recovery_inputs(self, task: TaskSpec) -> dict[str, str]:
        """Files and directories the evaluation of ``task`` reads besides the agent's output (kind
        → host path, e.g. Harbor's ``task_files`` and ``tests``): an evaluation checkpoint (A9)
        fingerprints them, so ``--resume``/``--reuse``/``acx regrade`` notice when they changed.
        Default: none (the task and the benchmark params are always fingerprinted)."""
        return {}

    # ---- plan time -------------------------------------------------------------------------
    def resolve_evaluation_environment_mode(self, req: RunRequest) -> str:
        return self.evaluation_environment_mode

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        raise AcxInternalError(f"benchmark {self.id} must override load_tasks (a benchmark without tasks)")

    def select_tasks(self, tasks: list[TaskSpec], req: RunRequest) -> list[TaskSpec]:
        """Deterministic selection (B4): ``sample_ids`` (unknown → error) and subclass filters."""
        from acx.components.benchmarks import select_by_sample_ids

        return select_by_sample_ids(tasks, getattr(self.config, "sample_ids", None))

    def build_plan(self, task: TaskSpec, req: RunRequest) -> BenchmarkPlan:
        return BenchmarkPlan()

    def resolve_artifacts(self, task: TaskSpec, req: RunRequest, plan: ExecutionPlan) -> list[ArtifactSpec] | None:
        """Artifact paths after all recipes (A3); None keeps what the planner resolved."""
        return None

    # ---- run time --------------------------------------------------------------------------
    async def prepare_task(
        self, task: TaskSpec, session: Session | None, req: RunRequest, plan: ExecutionPlan
    ) -> PreparedTask:
        return PreparedTask(task_id=task.task_id, category=task.category)

    async def run_task(
        self,
        task: TaskSpec,
        prepared: PreparedTask,
        req: RunRequest,
        plan: ExecutionPlan,
        session: Session | None,
    ) -> RunResult:
        raise AcxInternalError(
            f"benchmark {self.id} is not harness-free; the planner pairs it with a harness, not `none`"
        )

    async def evaluate(
        self,
        task: TaskSpec,
        prepared: PreparedTask,
        result: RunResult,
        req: RunRequest,
        plan: ExecutionPlan,
        session: Session | None = None,
    ) -> RunResult:
        raise AcxInternalError(f"benchmark {self.id} must override evaluate")

    # ---- multi-step tasks (TaskSpec.steps): prepare_task, the run and evaluate run once per step,
    # with ``plan.step`` the step's index ----------------------------------------------------------
    def step_continues(self, task: TaskSpec, plan: ExecutionPlan, result: RunResult) -> bool:
        """After step ``plan.step`` ran and was evaluated (``result``): whether the next one runs."""
        return True

    def combine_steps(self, task: TaskSpec, plan: ExecutionPlan, results: list[RunResult]) -> RunResult:
        """The attempt's result from the results of the steps that ran (in order, at least one)."""
        return results[-1]


class BaseHarness:
    id: ClassVar[str]
    description: ClassVar[str]
    config_class: ClassVar[type[HarnessConfig]] = HarnessConfig
    #: Run budget used only when neither task nor benchmark gives one (T2).
    default_run_timeout_seconds: ClassVar[float | None] = None
    parallel_attempts_safe: ClassVar[bool] = False
    #: Calls ``req.model`` from the host (in-process, through the run's model gateway); the
    #: sandbox gets no egress for it.
    calls_model: ClassVar[bool] = False
    #: Protocol used when ``model.api_protocol`` is unset or ``auto``.
    default_protocol: ClassVar[str] = "openai-chat"
    #: Cannot run a task without a model (implied by ``calls_model``): a request that configures
    #: none (no ``model.id``, ``model.base_url`` or ``model.roles.agent``) is refused when it is
    #: compiled (E0306) instead of failing every task at run time.
    requires_model: ClassVar[bool] = False

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config

    # ---- plan time -------------------------------------------------------------------------
    def model_location(self, req: RunRequest) -> str:
        """Where this harness calls models from: ``"host"`` (in-process, through the gateway; no
        sandbox egress), ``"sandbox"`` (an agent inside the sandbox calls the gateway's HTTP
        endpoint; the planner allows exactly the gateway under restricted egress) or ``"none"``."""
        return "host" if self.calls_model else "none"

    def build_plan(self, task: TaskSpec, req: RunRequest) -> HarnessPlan:
        return HarnessPlan(
            inject_network_restriction_notice=self.config.inject_network_restriction_notice,
            default_run_timeout_seconds=self.default_run_timeout_seconds,
        )

    # ---- run time --------------------------------------------------------------------------
    # Every run-time method gets one HarnessContext (session, prepared task, request, plan, the
    # run stage's deadline, the attempt's model session, an event emitter, and ``state``).
    async def start_session(self, ctx: HarnessContext) -> Any:
        """Per-attempt harness state; the interpreter stores it in ``ctx.state``."""
        return None

    async def install_agent(self, ctx: HarnessContext) -> list[ExecutionIssue]:
        """The ``install_agent`` phase (after ``start_session``, before ``execute_task``): runs
        only when the plan has an ``install_timeout_seconds`` (from ``build_plan``'s
        ``HarnessPlan.install_timeout_seconds``); ``ctx.deadline`` is that budget's end. Issues
        returned with severity ``fatal`` stop the attempt before the agent runs.

        With the install cache (``ExecutionPlan.install_cache_key`` set) it runs once per cache
        key in a throwaway sandbox whose file system becomes the image later attempts start from;
        ``ctx.install_layer`` is then True and the install must not depend on the task."""
        return []

    def install_content_key(self) -> str:
        """A hash of what the install reads from the host at run time (uploaded files), added to
        the plan's ``install_cache_key`` by the interpreter: a changed upload is a new cache key.
        Empty by default (a harness whose install reads nothing from the host)."""
        return ""

    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        raise AcxInternalError(f"harness {self.id} must override execute_task")

    async def collect_result(self, ctx: HarnessContext, partial: RunResult | None) -> RunResult | None:
        """Read saved output after execution or a timeout; never resumes the agent (T3)."""
        return partial

    async def close_session(self, ctx: HarnessContext) -> None:
        return None
