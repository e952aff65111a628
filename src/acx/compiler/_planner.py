"""The planner (contracts P1–P7, H2–H4, T1–T5, V1, A1–A4): one ExecutionPlan per task × attempt.

Pure: it reads dataset files and task directories (through the benchmark), never opens an
environment and never reads a secret value. Driver capabilities come in as an argument (probed at
the CLI edge) and every policy the plan needs is checked against them (P7: refuse, never
downgrade).

Steps per plan (P4): (1) evaluation mode; (2) network policy inputs; (3) the task-local
EnvironmentSpec (setup, resources, env maps merged); (4) benchmark plan; (5) harness plan; budgets
and artifact inputs; (6) recipes in registry order; then benchmark ``resolve_artifacts`` and the
model-endpoint allowance; (7) missing policies → ``public``; (8) the fresh verifier environment
created or cleared; final normalisation and the capability check.

``plan_request`` does the per-request work once (component instances, task loading and selection,
request-level checks, recipe candidates) and returns a :class:`RequestPlan` whose
``plan_attempt(task, attempt)`` is called per *semantic attempt* (P3).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET
from msgspec.structs import replace

from acx.compiler._artifacts_plan import check_artifact_overrides, finalize_artifacts, resolve_save_artifacts
from acx.compiler._budgets import Budget, check_seconds, resolve_budget
from acx.compiler._network_plan import (
    MODEL_ENDPOINT_SOURCE,
    allow_model_endpoint,
    check_capabilities,
    drop_unenforced_storage,
)
from acx.compiler._recipes import (
    BaseRecipe,
    DeclarativeRecipeAdapter,
    RecipeRegistry,
    add_document_recipes,
    build_run_registry,
)
from acx.diagnostics import did_you_mean
from acx.drivers import DriverCapabilities
from acx.envref import referenced_names
from acx.errors import AcxPlanError, AcxUserError
from acx.ir import (
    MODEL_GATEWAY_HOST,
    Contribution,
    EnvironmentSetup,
    EnvironmentSpec,
    ExecutionPlan,
    ExecutionSpec,
    HarnessPlan,
    NetworkPolicy,
    Provenance,
    ResourceRequirements,
    RunRequest,
    StepPlan,
    TaskSpec,
)

__all__ = ["PlanWarning", "PlannedAttempt", "RequestPlan", "plan_request", "required_env_names"]

_PUBLIC = NetworkPolicy()
_DEFAULT_EXECUTION = ExecutionSpec()
_LEGACY_IMAGE_KEYS = ("image", "evaluation_image")
_FRESH_ONLY = (
    "evaluation_setup",
    "evaluation_baseline_network_policy",
    "evaluation_resources",
    "evaluation_environment_env_variables",
)
#: ExecutionSpec fields copied into same-named plan fields (explicit ones are kept by recipes).
_EXEC_PLAN_FIELDS = (
    "run_timeout_seconds",
    "evaluation_timeout_seconds",
    "run_timer_compensation_seconds",
    "runresult_collect_timeout_seconds",
    "artifact_collect_timeout_seconds",
    "artifact_limits",
    "save_artifacts",
    "artifacts",
    "artifact_collect",
)


_log = logging.getLogger("acx.planner")


@dataclass(frozen=True)
class PlanWarning:
    """A warning of one selected task: a load warning (``attempt`` None, H6) or a planning
    warning of one attempt (e.g. an artifact destination conflict, A1)."""

    task_id: str
    attempt: int | None
    message: str


@dataclass(frozen=True)
class PlannedAttempt:
    plan: ExecutionPlan
    #: Plan field path → contributions, lowest first, winner last (empty unless requested).
    provenance: Provenance
    warnings: list[str]


class _Prov:
    """Collects plan provenance; a disabled instance ignores everything (the fast path)."""

    def __init__(self, enabled: bool, request_prov: Provenance | None) -> None:
        self.enabled = enabled
        self.request_prov = request_prov or {}
        self.data: Provenance = {}

    def add(self, path: str, layer: str, kind: Any, source: str, value: Any) -> None:
        if self.enabled:
            self.data.setdefault(path, []).append(
                Contribution(layer=layer, kind=kind, source=source, value=_jsonable(value))
            )

    def request(self, plan_path: str, request_path: str, value: Any) -> None:
        """The request's own chain for ``request_path`` (from the resolver) or one summary entry."""
        if not self.enabled:
            return
        chain = self.request_prov.get(request_path)
        if chain:
            self.data.setdefault(plan_path, []).extend(chain)
        else:
            self.add(plan_path, "request", "file", request_path, value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return msgspec.to_builtins(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


_REQUIRED_CACHE: dict[tuple[int, ...], tuple[list[str], tuple[Any, ...]]] = {}


def _required_env_cached(*maps: dict[str, str] | None) -> list[str]:
    """:func:`required_env_names` memoised on the identity of the maps (shared across plans)."""
    if not any(maps):
        return []
    key = tuple(map(id, maps))
    hit = _REQUIRED_CACHE.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[1], maps, strict=True)):
        return hit[0]
    names = required_env_names(*maps)
    if len(_REQUIRED_CACHE) > 4096:
        _REQUIRED_CACHE.clear()
    _REQUIRED_CACHE[key] = (names, maps)  # keeps the maps alive so their ids stay unique
    return names


def required_env_names(*maps: dict[str, str] | None) -> list[str]:
    """Names referenced as ``${NAME}`` (no default) in env-variable maps (V1); names only."""
    names: set[str] = set()
    for m in maps:
        for value in (m or {}).values():
            names |= referenced_names(value)[0]
    return sorted(names)


def _merge_setup(base: EnvironmentSetup, over: EnvironmentSetup | None) -> EnvironmentSetup:
    """Field-wise: set (non-None) fields of ``over`` win (H2: request setup over task defaults)."""
    if over is None or over == EnvironmentSetup():
        return base
    changes = {f: getattr(over, f) for f in over.__struct_fields__ if getattr(over, f) is not None}
    return replace(base, **changes) if changes else base


def _merge_resources(*layers: ResourceRequirements | None) -> ResourceRequirements | None:
    present = [r for r in layers if r is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    merged: dict[str, Any] = {}
    for r in present:
        for f in r.__struct_fields__:
            value = getattr(r, f)
            if value is not None and not (f == "ignore_gpu_type" and value is False):
                merged[f] = value
    return ResourceRequirements(**merged)


def _stage_budgets(
    ex: ExecutionSpec, bplan: Any, hplan: HarnessPlan, run_value: Any, evaluation_value: Any
) -> tuple[Budget, Budget]:
    """The run and evaluation budgets (T2) of a task, or of one step of it: ``run_value`` /
    ``evaluation_value`` are the task's (or step's) own, else UNSET."""
    run_b = resolve_budget(
        task_value=run_value,
        benchmark_value=bplan.run_timeout_seconds,
        harness_fallback=hplan.default_run_timeout_seconds,
        override=ex.run_timeout_seconds,
        common_multiplier=ex.timeout_multiplier,
        stage_multiplier=ex.run_timeout_multiplier,
        stage_multiplier_field="run_timeout_multiplier",
    )
    eval_b = resolve_budget(
        task_value=evaluation_value,
        benchmark_value=bplan.evaluation_timeout_seconds,
        harness_fallback=None,
        override=ex.evaluation_timeout_seconds,
        common_multiplier=ex.timeout_multiplier,
        stage_multiplier=ex.evaluation_timeout_multiplier,
        stage_multiplier_field="evaluation_timeout_multiplier",
    )
    return run_b, eval_b


def _merge_env(base: dict[str, str], over: dict[str, str]) -> dict[str, str]:
    # Return a shared input when possible: plans of one request then share their env maps
    # (memory, and the required-names cache hits).
    if not over:
        return base if base else over
    if not base:
        return over
    return {**base, **over}


@dataclass
class RequestPlan:
    """Per-request planning state: components, selected tasks and ``plan_attempt`` (P3)."""

    name: str
    request: RunRequest
    benchmark: Any
    harness: Any
    tasks: list[TaskSpec]
    total_tasks: int
    capabilities: DriverCapabilities
    recipes: RecipeRegistry
    request_provenance: Provenance | None = None
    #: Called once per distinct warning of a planned task (its load warnings when it is first
    #: planned, H6, then each attempt's planning warnings). None: logged to ``acx.planner``
    #: (``acx run`` shows them on stderr before the run starts and in run.log during it).
    on_warning: Callable[[PlanWarning], None] | None = None
    #: Every distinct warning so far, in planning order.
    warnings: list[PlanWarning] = field(default_factory=list)
    _seen_warnings: set[tuple[str, int | None, str]] = field(default_factory=set)
    _candidates: list[BaseRecipe] = field(default_factory=list)
    _explicit: frozenset[str] = frozenset()
    _harness_plan: HarnessPlan | None = None
    _bench_mode: str = "none"
    _run_follows_baseline: bool = False
    #: The phases of ``_plan`` that live in their own classes (composed, sharing this state).
    _envs: _EnvironmentPlanner = field(init=False, repr=False, compare=False)
    _details: _PlanDetails = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Builds the phase helpers."""
        self._envs = _EnvironmentPlanner(self)
        self._details = _PlanDetails(self)

    # ---- public API ------------------------------------------------------------------------
    def plan_attempt(self, task: TaskSpec, attempt: int, *, warnings: list[str] | None = None) -> ExecutionPlan:
        """The ExecutionPlan of ``task`` for semantic attempt ``attempt`` (1-based).

        Planning warnings are appended to ``warnings`` when given, recorded in
        :attr:`warnings` and passed to :attr:`on_warning` (once per task × attempt × message).
        """
        planned = self.plan_attempt_detailed(task, attempt, provenance=False)
        if warnings is not None:
            warnings.extend(planned.warnings)
        return planned.plan

    def plan_attempt_detailed(self, task: TaskSpec, attempt: int, *, provenance: bool = True) -> PlannedAttempt:
        """The plan with its provenance (``explain``) and planning warnings."""
        try:
            planned = self._plan(task, attempt, _Prov(provenance, self.request_provenance), [])
        except AcxUserError as exc:
            raise _in_request(exc, self.name) from None
        if task.load_warnings:  # H6: shown for selected tasks only, i.e. the ones planned
            self._note_warnings(task.task_id, None, task.load_warnings)
        if planned.warnings:
            self._note_warnings(task.task_id, attempt, planned.warnings)
        return planned

    def _note_warnings(self, task_id: str, attempt: int | None, messages: list[str]) -> None:
        for message in messages:
            key = (task_id, attempt, message)
            if key in self._seen_warnings:
                continue
            self._seen_warnings.add(key)
            warning = PlanWarning(task_id, attempt, message)
            self.warnings.append(warning)
            if self.on_warning is not None:
                self.on_warning(warning)
            else:
                _log.warning("acx: warning: request %r: %s", self.name, message)

    def task(self, task_id: str) -> TaskSpec:
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        hint = did_you_mean(task_id, [t.task_id for t in self.tasks])
        raise AcxPlanError(
            f"request {self.name!r} has no selected task {task_id!r}",
            code="E0460",
            path="--task",
            help=(f"did you mean {hint!r}? " if hint else "") + "`acx compile SPEC --plans` lists the task ids",
        )

    def attempts(self) -> range:
        return range(1, self.request.execution.attempts.k + 1)

    def iter_plans(self) -> Iterator[tuple[TaskSpec, int, ExecutionPlan]]:
        for task in self.tasks:
            for attempt in self.attempts():
                yield task, attempt, self.plan_attempt(task, attempt)

    # ---- the steps -------------------------------------------------------------------------
    def _plan(self, task: TaskSpec, attempt: int, prov: _Prov, warnings: list[str]) -> PlannedAttempt:
        req = self.request
        renv = req.environment
        ex = req.execution
        tid = task.task_id

        # (1) evaluation mode (P5)
        mode = renv.evaluation_environment_mode or task.evaluation_environment_mode or self._bench_mode
        if prov.enabled:
            prov.add(
                "evaluation_environment_mode",
                "benchmark",
                "benchmark",
                f"{self.benchmark.id} default",
                self._bench_mode,
            )
            if task.evaluation_environment_mode:
                prov.add("evaluation_environment_mode", "task", "task", tid, task.evaluation_environment_mode)
            if renv.evaluation_environment_mode:
                prov.request(
                    "evaluation_environment_mode",
                    "environment.evaluation_environment_mode",
                    renv.evaluation_environment_mode,
                )

        # (2) policy inputs (P6): explicit request value, else the task hint
        baseline = renv.baseline_network_policy or task.baseline_network_policy
        run_policy = renv.run_network_policy or task.run_network_policy
        follows = run_policy is None and baseline is not None and self._run_follows_baseline
        if follows:
            # The benchmark keeps the agent phase at the environment's baseline (Harbor's
            # resolve_agent_phase_policy), never the `public` last default of step (7).
            run_policy = baseline
        eval_policy = renv.evaluation_network_policy or task.evaluation_network_policy
        if prov.enabled:
            for path, tval, rval in (
                (
                    "environment.baseline_network_policy",
                    task.baseline_network_policy,
                    renv.baseline_network_policy,
                ),
                ("run_network_policy", task.run_network_policy, renv.run_network_policy),
                ("evaluation_network_policy", task.evaluation_network_policy, renv.evaluation_network_policy),
            ):
                if tval is not None:
                    prov.add(path, "task", "task", tid, tval)
                if rval is not None:
                    req_path = path if path.startswith("environment.") else f"environment.{path}"
                    prov.request(path, req_path, rval)
            if follows:
                prov.add(
                    "run_network_policy",
                    "benchmark",
                    "benchmark",
                    f"{self.benchmark.id}: the agent phase keeps the environment baseline",
                    run_policy,
                )

        # (3) the task-local environment (a new struct; the request is never mutated)
        env = self._envs._environment(task, baseline, prov)

        # (4) benchmark plan, (5) harness plan
        bplan = self.benchmark.build_plan(task, req)
        hplan = self._harness_plan or self.harness.build_plan(task, req)

        run_b, eval_b = _stage_budgets(ex, bplan, hplan, task.run_timeout_seconds, task.evaluation_timeout_seconds)
        if prov.enabled:
            self._details._budget_prov(prov, "run_timeout_seconds", run_b, tid)
            self._details._budget_prov(prov, "evaluation_timeout_seconds", eval_b, tid)
            for f in (
                "run_timer_compensation_seconds",
                "runresult_collect_timeout_seconds",
                "artifact_collect_timeout_seconds",
                "artifact_limits",
            ):
                if f"execution.{f}" in prov.request_prov:  # the resolver's chain, default included
                    prov.request(f, f"execution.{f}", getattr(ex, f))
                    continue
                prov.add(f, "default", "default", "ExecutionSpec", getattr(_DEFAULT_EXECUTION, f))
                if getattr(ex, f) != getattr(_DEFAULT_EXECUTION, f):
                    prov.request(f, f"execution.{f}", getattr(ex, f))

        supported = bool(self.benchmark.collect_artifacts)
        if supported:
            artifacts = ex.artifacts if ex.artifacts is not None else (task.artifacts or [])
            collect = ex.artifact_collect if ex.artifact_collect is not None else (task.artifact_collect or [])
        else:
            artifacts, collect = [], []
        save = ex.save_artifacts if ex.save_artifacts is not None else mode == "fresh"

        plan = ExecutionPlan(
            task_id=tid,
            attempt=attempt,
            environment=env,
            evaluation_environment_mode=mode,  # type: ignore[arg-type]
            run_network_policy=run_policy,
            evaluation_network_policy=eval_policy,
            benchmark_plan=bplan,
            harness_plan=hplan,
            execution=ex,
            artifacts=artifacts,
            artifact_collect=collect,
            artifact_collection_supported=supported,
            save_artifacts=save,
            artifact_limits=ex.artifact_limits,
            artifact_collect_timeout_seconds=ex.artifact_collect_timeout_seconds,
            runresult_collect_timeout_seconds=ex.runresult_collect_timeout_seconds,
            run_timer_compensation_seconds=ex.run_timer_compensation_seconds,
            run_timeout_seconds=run_b.seconds,
            evaluation_timeout_seconds=eval_b.seconds,
            install_timeout_seconds=self._details._install_budget(hplan, ex, prov),
            install_cache_key=self._details._install_cache(hplan, prov),
            run_user=task.run_user,
            evaluation_user=task.evaluation_user,
        )
        if prov.enabled:
            self._details._artifact_prov(prov, task, supported)

        # (6) recipes, in registry order (RC2, RC3)
        scale = {"run_timeout_seconds": run_b, "evaluation_timeout_seconds": eval_b}
        plan = self._details._apply_recipes(plan, task, prov, scale)

        # A3: the benchmark may resolve artifact paths after all recipes; explicit request wins.
        if supported and ex.artifacts is None:
            resolved = self.benchmark.resolve_artifacts(task, req, plan)
            if resolved is not None:
                plan = replace(plan, artifacts=resolved)
                prov.add("artifacts", "benchmark", "benchmark", f"{self.benchmark.id}.resolve_artifacts", resolved)

        plan = self._allow_model_endpoint(plan, prov)

        # (7) missing policies → public
        plan = self._envs._default_policies(plan, prov)

        # (8) evaluation environment per the final mode; then normalisation and checks
        plan = self._envs._evaluation_environment(plan, task, prov)
        plan = self._details._finalize(plan, task, mode, warnings, prov)
        if task.steps:
            plan = self._envs._with_steps(plan, task, bplan, hplan, prov)
        plan = self._envs._drop_storage(plan, warnings, prov)
        check_capabilities(
            plan,
            self.capabilities,
            requires_isolated_filesystem=self.benchmark.requires_isolated_filesystem,
            benchmark_id=self.benchmark.id,
        )
        return PlannedAttempt(plan, prov.data, warnings)

    def _allow_model_endpoint(self, plan: ExecutionPlan, prov: _Prov) -> ExecutionPlan:
        policy = plan.run_network_policy
        if policy is None or policy.network_mode not in ("no-network", "allowlist"):
            return plan
        if self.request.harness.id == "none":
            return plan
        location = self.harness.model_location(self.request) if self.harness is not None else "none"
        # Host-side harnesses call the model from acx's process: the sandbox gets no egress for it.
        # An agent inside the sandbox reaches models only through the run's gateway: exactly that
        # address is allowed (bound to its real address:port when the run starts), never the model host.
        if location != "sandbox":
            return plan
        new = allow_model_endpoint(policy, MODEL_GATEWAY_HOST)
        if new is policy:
            return plan
        prov.add("run_network_policy", "planner", "planner", MODEL_ENDPOINT_SOURCE, new)
        return replace(plan, run_network_policy=new)


class _EnvironmentPlanner:
    """The environment half of planning an attempt: the run environment, the evaluation
    environment per mode, default network policies, storage the driver cannot limit, and the
    steps of a multi-step task."""

    def __init__(self, c: RequestPlan) -> None:
        self.c = c

    def _with_steps(
        self, plan: ExecutionPlan, task: TaskSpec, bplan: Any, hplan: HarnessPlan, prov: _Prov
    ) -> ExecutionPlan:
        """A multi-step task's steps: each one's budgets resolved like the task's (T2, T5), its
        users and verifier variables; every step runs and is verified in the agent's environment."""
        if plan.evaluation_environment_mode != "reuse":
            raise AcxPlanError(
                f"task {task.task_id!r} has {len(task.steps)} steps, each verified in the agent's environment; "
                f"evaluation_environment_mode {plan.evaluation_environment_mode!r} cannot run it",
                code="E0413",
                path="environment.evaluation_environment_mode",
                help="remove the evaluation_environment_mode override for this request (multi-step tasks "
                "need `reuse`), or leave the task out (--tasks, task_names)",
            )
        ex = self.c.request.execution
        steps: list[StepPlan] = []
        extra_env: list[dict[str, str] | None] = []
        for i, step in enumerate(task.steps):
            step_run = step.run_timeout_seconds if step.run_timeout_seconds is not UNSET else task.run_timeout_seconds
            run_b, eval_b = _stage_budgets(ex, bplan, hplan, step_run, step.evaluation_timeout_seconds)
            if prov.enabled:
                self.c._details._budget_prov(prov, f"steps.{i}.run_timeout_seconds", run_b, task.task_id)
                self.c._details._budget_prov(prov, f"steps.{i}.evaluation_timeout_seconds", eval_b, task.task_id)
            env = None
            if step.evaluation_env_variables is not None:
                env = _merge_env(step.evaluation_env_variables, self.c.request.environment.evaluation_env_variables)
                extra_env.append(env)
            run_policy, eval_policy = self._step_policies(plan, step, i, prov)
            # A step's artifacts and collection commands add to the task's, unless the request
            # replaced the task's (A3: the explicit request value wins).
            collects = bool(self.c.benchmark.collect_artifacts)
            artifacts = step.artifacts if collects and ex.artifacts is None else []
            collect = step.artifact_collect if collects and ex.artifact_collect is None else []
            steps.append(
                StepPlan(
                    name=step.name,
                    run_network_policy=run_policy,
                    evaluation_network_policy=eval_policy,
                    run_timeout_seconds=run_b.seconds,
                    evaluation_timeout_seconds=eval_b.seconds,
                    run_user=step.run_user or plan.run_user,
                    evaluation_user=step.evaluation_user or plan.evaluation_user,
                    evaluation_env_variables=env,
                    min_reward=step.min_reward,
                    artifacts=artifacts,
                    artifact_collect=collect,
                )
            )
        required = sorted(set(plan.required_env).union(required_env_names(*extra_env)))
        return replace(plan, steps=steps, required_env=required)

    def _step_policies(
        self, plan: ExecutionPlan, step: Any, i: int, prov: _Prov
    ) -> tuple[NetworkPolicy | None, NetworkPolicy | None]:
        """A step's own phase policies (a task hint: the request's explicit policy wins, P6), the
        run one with the model gateway allowed as for the task's; None = the plan's."""
        renv = self.c.request.environment
        run = None if renv.run_network_policy is not None else step.run_network_policy
        ev = None if renv.evaluation_network_policy is not None else step.evaluation_network_policy
        if run is not None:
            run = self.c._allow_model_endpoint(
                replace(plan, run_network_policy=run), _Prov(False, None)
            ).run_network_policy
            prov.add(f"steps.{i}.run_network_policy", "task", "task", f"task {plan.task_id} step {step.name}", run)
        if ev is not None:
            prov.add(
                f"steps.{i}.evaluation_network_policy", "task", "task", f"task {plan.task_id} step {step.name}", ev
            )
        return (
            run if run != plan.run_network_policy else None,
            ev if ev != plan.evaluation_network_policy else None,
        )

    def _drop_storage(self, plan: ExecutionPlan, warnings: list[str], prov: _Prov) -> ExecutionPlan:
        dropped = drop_unenforced_storage(plan, self.c.capabilities, warnings)
        if dropped is not plan and prov.enabled:
            for key in ("environment", "evaluation_environment"):
                env = getattr(dropped, key)
                if env is not None and env is not getattr(plan, key):
                    source = f"driver {env.id!r} cannot limit storage_mb: dropped (P7 warning)"
                    prov.add(f"{key}.resources", "planner", "planner", source, env.resources)
        return dropped

    def _environment(self, task: TaskSpec, baseline: NetworkPolicy | None, prov: _Prov) -> EnvironmentSpec:
        renv = self.c.request.environment
        setup = _merge_setup(task.environment_setup, renv.setup)
        resources = _merge_resources(task.resources, task.run_resources, renv.resources, renv.run_resources)
        env = replace(
            renv,
            setup=setup,
            resources=resources,
            run_resources=None,
            baseline_network_policy=baseline,
            env_variables=_merge_env(task.env_variables, renv.env_variables),
            run_env_variables=_merge_env(task.run_env_variables, renv.run_env_variables),
            evaluation_env_variables=_merge_env(task.evaluation_env_variables, renv.evaluation_env_variables),
            require_startup_env=bool(task.require_startup_env or renv.require_startup_env),
        )
        if prov.enabled:
            for f in EnvironmentSetup.__struct_fields__:
                tval, rval = getattr(task.environment_setup, f), getattr(renv.setup, f)
                if tval is not None:
                    prov.add(f"environment.setup.{f}", "task", "task", task.task_id, tval)
                if rval is not None:
                    prov.request(f"environment.setup.{f}", f"environment.setup.{f}", rval)
            for f in ("env_variables", "run_env_variables", "evaluation_env_variables"):
                if getattr(task, f):
                    prov.add(f"environment.{f}", "task", "task", task.task_id, getattr(task, f))
                if getattr(renv, f):
                    prov.request(f"environment.{f}", f"environment.{f}", getattr(renv, f))
            for label, r in (("task", task.resources), ("task run", task.run_resources)):
                if r is not None:
                    prov.add("environment.resources", label, "task", task.task_id, r)
            for f in ("resources", "run_resources"):
                if getattr(renv, f) is not None:
                    prov.request("environment.resources", f"environment.{f}", getattr(renv, f))
        return env

    def _default_policies(self, plan: ExecutionPlan, prov: _Prov) -> ExecutionPlan:
        changes: dict[str, Any] = {}
        if plan.run_network_policy is None:
            changes["run_network_policy"] = _PUBLIC
            prov.add("run_network_policy", "default", "default", "public (P4 step 7)", _PUBLIC)
        if plan.evaluation_network_policy is None:
            changes["evaluation_network_policy"] = _PUBLIC
            prov.add("evaluation_network_policy", "default", "default", "public (P4 step 7)", _PUBLIC)
        env = plan.environment
        if env.baseline_network_policy is None:
            env = replace(env, baseline_network_policy=_PUBLIC)
            changes["environment"] = env
            prov.add("environment.baseline_network_policy", "default", "default", "public (P4 step 7)", _PUBLIC)
        return replace(plan, **changes) if changes else plan

    def _evaluation_environment(self, plan: ExecutionPlan, task: TaskSpec, prov: _Prov) -> ExecutionPlan:
        renv = self.c.request.environment
        if plan.evaluation_environment_mode != "fresh":
            for f in _FRESH_ONLY:
                if getattr(renv, f) is not None:
                    raise AcxPlanError(
                        f"task {task.task_id!r}: environment.{f} requires evaluation_environment_mode fresh, "
                        f"but the mode is {plan.evaluation_environment_mode!r}",
                        code="E0421",
                        path=f"environment.{f}",
                        help=f"set environment.evaluation_environment_mode: fresh, or remove environment.{f}",
                    )
            return replace(plan, evaluation_environment=None) if plan.evaluation_environment is not None else plan
        env = plan.environment
        independent = task.evaluation_environment_setup is not None
        # H2: an explicit verifier environment is independent of the task's run setup; None inherits
        # the resolved run setup. Either way the request's setup is layered over the task's
        # defaults (like the reference): request `setup`, then request `evaluation_setup`.
        base_setup = task.evaluation_environment_setup if independent else env.setup
        if independent:
            base_setup = _merge_setup(base_setup, renv.setup)  # type: ignore[arg-type]
        setup = _merge_setup(base_setup, renv.evaluation_setup)  # type: ignore[arg-type]
        task_res = (
            task.evaluation_resources if independent else _merge_resources(task.resources, task.evaluation_resources)
        )
        resources = _merge_resources(task_res, renv.resources, renv.evaluation_resources)
        # H4: request evaluation baseline > request baseline > task verifier baseline > agent baseline.
        baseline = (
            renv.evaluation_baseline_network_policy
            or renv.baseline_network_policy
            or task.evaluation_baseline_network_policy
            or env.baseline_network_policy
            or _PUBLIC
        )
        # V1/V3: None inherits the public vars, a mapping replaces them; request overrides per key.
        if task.evaluation_environment_env_variables is None:
            startup = env.env_variables
        else:
            startup = _merge_env(task.evaluation_environment_env_variables, renv.env_variables)
        startup = _merge_env(startup, renv.evaluation_environment_env_variables or {})
        evaluation = EnvironmentSpec(
            id=env.id,
            params=env.params,
            resources=resources,
            baseline_network_policy=baseline,
            evaluation_network_policy=plan.evaluation_network_policy,
            evaluation_environment_mode="fresh",
            env_variables=startup,
            evaluation_env_variables=env.evaluation_env_variables,
            require_startup_env=env.require_startup_env,
            setup=setup,
        )
        if prov.enabled:
            src = "task verifier environment (independent, H2)" if independent else "run setup (inherited, H2)"
            prov.add(
                "evaluation_environment.setup",
                "task" if independent else "planner",
                "task" if independent else "planner",
                src,
                base_setup,
            )
            if independent and renv.setup != EnvironmentSetup():
                prov.request("evaluation_environment.setup", "environment.setup", renv.setup)
            if renv.evaluation_setup is not None:
                prov.request("evaluation_environment.setup", "environment.evaluation_setup", renv.evaluation_setup)
            prov.add(
                "evaluation_environment.baseline_network_policy",
                "planner",
                "planner",
                "H4: request evaluation baseline > request baseline > task verifier > agent baseline",
                baseline,
            )
        return replace(plan, evaluation_environment=evaluation)


class _PlanDetails:
    """Budgets and their provenance, the install budget and cache, artifacts, recipes and the
    final normalisation of a plan."""

    def __init__(self, c: RequestPlan) -> None:
        self.c = c

    def _install_budget(self, hplan: HarnessPlan, ex: Any, prov: _Prov) -> float | None:
        """The ``install_agent`` phase's budget: the harness's (its config), scaled by the common
        ``timeout_multiplier`` like the other stage budgets; None when the harness installs nothing."""
        base = hplan.install_timeout_seconds
        if base is None:
            return None
        seconds = float(base) * float(ex.timeout_multiplier)
        if prov.enabled:
            source = f"{self.c.request.harness.id} harness (install_timeout_seconds)"
            prov.add("install_timeout_seconds", "harness", "harness", source, base)
            if ex.timeout_multiplier != 1.0:
                mult = f"× {ex.timeout_multiplier:g} (execution.timeout_multiplier)"
                prov.add("install_timeout_seconds", "planner", "planner", mult, seconds)
        return seconds

    def _install_cache(self, hplan: HarnessPlan, prov: _Prov) -> str | None:
        """The install cache's key when the harness installs, its config allows the cache and the
        driver has it (``DriverCapabilities.install_cache``); a driver without it installs in every
        attempt (or is refused when the config requires the cache: check_capabilities, E0459)."""
        key = hplan.install_cache_key
        if key is None or not self.c.capabilities.install_cache:
            return None
        if prov.enabled:
            source = f"{self.c.request.harness.id} harness (install, upload, agent_dir, definition env)"
            prov.add("install_cache_key", "harness", "harness", source, key)
        return key

    def _budget_prov(self, prov: _Prov, path: str, b: Budget, tid: str) -> None:
        kind = {"task": "task", "benchmark": "benchmark", "harness": "harness"}.get(b.default_source, "default")
        source = {
            "task": f"task {tid}",
            "benchmark": f"{self.c.benchmark.id} benchmark plan",
            "harness": f"{self.c.request.harness.id} harness fallback",
        }.get(b.default_source, "no task, benchmark or harness default (no deadline)")
        prov.add(path, b.default_source if b.default_source != "none" else "default", kind, source, b.default)
        if b.override is not None:
            prov.request(path, f"execution.{path}", b.override)
        if b.multiplier != 1.0 and b.seconds is not None:
            mult_path = f"execution.{b.multiplier_field}"
            prov.add(path, "planner", "planner", f"× {b.multiplier:g} ({mult_path})", b.seconds)

    def _artifact_prov(self, prov: _Prov, task: TaskSpec, supported: bool) -> None:
        ex = self.c.request.execution
        if not supported:
            prov.add("artifacts", "benchmark", "benchmark", f"{self.c.benchmark.id}: collect_artifacts = false", [])
            prov.add(
                "collect_artifacts",
                "benchmark",
                "benchmark",
                f"{self.c.benchmark.id}: collect_artifacts = false",
                False,
            )
            return
        prov.add("artifacts", "benchmark", "benchmark", "convention dir (A1)", ["/logs/artifacts"])
        if task.artifacts is not None:
            prov.add("artifacts", "task", "task", task.task_id, task.artifacts)
        if ex.artifacts is not None:
            prov.request("artifacts", "execution.artifacts", ex.artifacts)
        if task.artifact_collect is not None:
            prov.add("artifact_collect", "task", "task", task.task_id, task.artifact_collect)
        if ex.artifact_collect is not None:
            prov.request("artifact_collect", "execution.artifact_collect", ex.artifact_collect)

    def _apply_recipes(
        self, plan: ExecutionPlan, task: TaskSpec, prov: _Prov, scale: dict[str, Budget]
    ) -> ExecutionPlan:
        if not self.c._candidates:
            return plan
        applied: list[str] = []
        explicit = self._explicit_for(task)
        for recipe in self.c._candidates:
            if not _run_recipe(recipe, recipe.matches, self.c.request, task, plan):
                continue
            before = plan
            if isinstance(recipe, DeclarativeRecipeAdapter):
                plan = recipe.apply_explicit(plan, explicit)
            else:
                plan = _run_recipe(recipe, recipe.apply, plan, self.c.request, task)
            if not isinstance(plan, ExecutionPlan):
                raise _recipe_error(
                    recipe,
                    f"returned {type(plan).__name__}, not an ExecutionPlan",
                    f"fix {recipe.origin}: apply() must return a (copied) ExecutionPlan",
                )
            if plan.task_id != before.task_id or plan.attempt != before.attempt:
                raise _recipe_error(
                    recipe,
                    "changed the plan's task_id/attempt",
                    f"fix {recipe.origin}: recipes adjust a plan, they never retarget it",
                )
            applied.append(recipe.id)
            if prov.enabled:
                _diff_prov(prov, before, plan, recipe)
            if isinstance(recipe, DeclarativeRecipeAdapter):
                plan = _scale_recipe_defaults(before, plan, recipe, scale, prov)
        if applied:
            plan = replace(plan, applied_recipes=[*plan.applied_recipes, *applied])
        return plan

    def _explicit_for(self, task: TaskSpec) -> frozenset[str]:
        extra = []
        if task.run_timeout_seconds is not UNSET:
            extra.append("run_timeout_seconds")
        if task.evaluation_timeout_seconds is not UNSET:
            extra.append("evaluation_timeout_seconds")
        if task.evaluation_environment_mode is not None:
            extra.append("evaluation_environment_mode")
        if task.artifacts is not None:  # an explicit [] is a declaration too
            extra.append("artifacts")
        if task.artifact_collect is not None:
            extra.append("artifact_collect")
        return self.c._explicit.union(extra) if extra else self.c._explicit

    def _finalize(
        self, plan: ExecutionPlan, task: TaskSpec, initial_mode: str, warnings: list[str], prov: _Prov
    ) -> ExecutionPlan:
        ex = self.c.request.execution
        tid = task.task_id
        mode = plan.evaluation_environment_mode
        changes: dict[str, Any] = {}
        # Budgets: recipes may have changed them (T5); re-check T1.
        check_seconds(plan.run_timeout_seconds, "run_timeout_seconds", tid)
        check_seconds(plan.evaluation_timeout_seconds, "evaluation_timeout_seconds", tid)
        check_seconds(plan.artifact_collect_timeout_seconds, "artifact_collect_timeout_seconds", tid)
        _check_workdirs(plan)
        if plan.artifact_collection_supported:
            if not self.c.benchmark.collect_artifacts:
                raise AcxPlanError(
                    f"task {tid!r}: a recipe re-enabled artifact collection, but benchmark "
                    f"{self.c.benchmark.id!r} does not collect artifacts",
                    code="E0423",
                    path="artifact_collection_supported",
                    help="recipes cannot enable artifacts when the benchmark disables collection",
                )
            final = finalize_artifacts(plan.artifacts, task_id=tid, mode=mode, warnings=warnings)
            if final != plan.artifacts:
                changes["artifacts"] = final
            collect = bool(final or plan.artifact_collect)
        else:
            if plan.artifacts or plan.artifact_collect:
                changes["artifacts"], changes["artifact_collect"] = [], []
            collect = False
        if collect != plan.collect_artifacts:
            changes["collect_artifacts"] = collect
        # A2: the save default follows the *final* mode; a request or recipe value is explicit.
        initial = ex.save_artifacts if ex.save_artifacts is not None else initial_mode == "fresh"
        explicit = plan.save_artifacts if (ex.save_artifacts is not None or plan.save_artifacts != initial) else None
        save = resolve_save_artifacts(explicit, mode, tid)
        if save != plan.save_artifacts:
            changes["save_artifacts"] = save
        if prov.enabled:
            prov.add(
                "save_artifacts",
                "default",
                "default",
                "A2: true for fresh, false for reuse/none",
                mode == "fresh",
            )
            if ex.save_artifacts is not None:
                prov.request("save_artifacts", "execution.save_artifacts", ex.save_artifacts)
        env = plan.environment
        env_changes: dict[str, Any] = {}
        if env.run_network_policy != plan.run_network_policy:
            env_changes["run_network_policy"] = plan.run_network_policy
        if env.evaluation_network_policy != plan.evaluation_network_policy:
            env_changes["evaluation_network_policy"] = plan.evaluation_network_policy
        if env.evaluation_environment_mode != mode:
            env_changes["evaluation_environment_mode"] = mode
        for f in _FRESH_ONLY:  # consumed by step 8
            if getattr(env, f) is not None:
                env_changes[f] = None
        if env_changes:
            env = replace(env, **env_changes)
            changes["environment"] = env
        ev = plan.evaluation_environment
        required = _required_env_cached(
            env.env_variables,
            env.run_env_variables,
            env.evaluation_env_variables,
            ev.env_variables if ev is not None else None,
        )
        if required != plan.required_env:
            changes["required_env"] = required
        return replace(plan, **changes) if changes else plan


def _check_workdirs(plan: ExecutionPlan) -> None:
    """H5: a workdir is an absolute POSIX path, whoever set it (task, request or recipe)."""
    for key, env in (("environment", plan.environment), ("evaluation_environment", plan.evaluation_environment)):
        workdir = env.setup.workdir if env is not None else None
        if workdir is None or (workdir.startswith("/") and "\\" not in workdir):
            continue
        request_path = "environment.setup.workdir" if key == "environment" else "environment.evaluation_setup.workdir"
        raise AcxPlanError(
            f"task {plan.task_id!r}: {key}.setup.workdir must be an absolute POSIX path, got {workdir!r} (H5)",
            code="E0429",
            path=request_path,
            help="write it from the sandbox root, e.g. workdir: /app (`acx explain SPEC REQUEST "
            f"{key}.setup.workdir --task {plan.task_id}` shows who set it)",
        )


def _run_recipe(recipe: BaseRecipe, method: Callable[..., Any], *args: Any) -> Any:
    """A recipe's ``matches``/``apply``; a crash in user code becomes a clear planning error."""
    try:
        return method(*args)
    except AcxUserError:
        raise
    except Exception as exc:
        raise _recipe_error(
            recipe,
            f"failed in {method.__name__}(): {type(exc).__name__}: {exc}",
            f"fix {recipe.origin} (or leave it out with execution.enabled_recipes)",
        ) from exc


def _recipe_error(recipe: BaseRecipe, message: str, help: str) -> AcxPlanError:
    span = recipe.span
    return AcxPlanError(
        f"recipe {recipe.id!r} {message}",
        code="E0432",
        span=span,
        path=None if span else "execution.enabled_recipes",
        help=help,
    )


def _scale_recipe_defaults(
    before: ExecutionPlan,
    after: ExecutionPlan,
    recipe: DeclarativeRecipeAdapter,
    scale: dict[str, Budget],
    prov: _Prov,
) -> ExecutionPlan:
    """T2: a budget a recipe's ``defaults`` filled is a default, so the stage multiplier applies.

    (``set`` values are final plan values, T5.) Without this, ``timeout_multiplier: 2`` would
    silently not scale a budget that only a recipe default gives.
    """
    changes: dict[str, float] = {}
    for name, budget in scale.items():
        value = getattr(after, name)
        if (
            budget.multiplier == 1.0
            or value is None
            or getattr(before, name) is not None
            or name not in recipe.decl.defaults
            or name in recipe.decl.set
        ):
            continue
        changes[name] = value * budget.multiplier
        if prov.enabled:
            source = f"recipe default × {budget.multiplier:g} (execution.{budget.multiplier_field})"
            prov.add(name, "planner", "planner", source, changes[name])
    return replace(after, **changes) if changes else after


def _diff_prov(prov: _Prov, before: ExecutionPlan, after: ExecutionPlan, recipe: BaseRecipe) -> None:
    """Record every value a recipe changed as a ``recipe:<id>`` contribution (RC, explain)."""
    for name in ExecutionPlan.__struct_fields__:
        old, new = getattr(before, name), getattr(after, name)
        if old is new or old == new:
            continue
        for path, value in _changed(_jsonable(old), _jsonable(new), f"{name}."):
            prov.add(path, f"recipe:{recipe.id}", "recipe", recipe.origin, value)


def _changed(old: Any, new: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in new.keys() | old.keys():
            if old.get(key) != new.get(key):
                yield from _changed(old.get(key), new.get(key), f"{prefix}{key}.")
        return
    if old != new:
        yield prefix.rstrip("."), new


# ---------------------------------------------------------------------------------------------
# plan_request
# ---------------------------------------------------------------------------------------------
def plan_request(
    req: RunRequest,
    *,
    base_dir: str,
    capabilities: DriverCapabilities,
    task_glob: str | None = None,
    recipes: RecipeRegistry | None = None,
    request_provenance: Provenance | None = None,
    benchmark: Any = None,
    harness: Any = None,
) -> RequestPlan:
    """Load and select the request's tasks and prepare per-attempt planning (P1, P3, B4).

    ``benchmark``/``harness`` instances may be injected (tests, SDK); by default they are built
    from the component registry and ``req.benchmark.params`` / ``req.harness.params``.
    ``request_provenance`` (the resolver's chain for this request) lets ``explain`` show where
    request values came from and lets recipes tell explicit user values from defaults.
    """
    try:
        return _plan_request(req, base_dir, capabilities, task_glob, recipes, request_provenance, benchmark, harness)
    except AcxUserError as exc:
        raise _in_request(exc, req.metadata.request_name) from None


def _in_request(exc: AcxUserError, name: str | None) -> AcxUserError:
    """The same error, its message prefixed with the request name (several requests, one output)."""
    first = exc.diagnostics[0]
    if not name or first.message.startswith("request "):
        return exc
    head = dataclasses.replace(first, message=f"request {name!r}: {first.message}")
    new = type(exc)(diagnostics=[head, *exc.diagnostics[1:]])
    return new


def _plan_request(
    req: RunRequest,
    base_dir: str,
    capabilities: DriverCapabilities,
    task_glob: str | None,
    recipes: RecipeRegistry | None,
    request_provenance: Provenance | None,
    benchmark: Any,
    harness: Any,
) -> RequestPlan:
    _check_request(req)
    bench = benchmark if benchmark is not None else _build_benchmark(req, base_dir)
    harn = harness if harness is not None else _build_harness(req)
    _check_pairing(req, bench)
    check_artifact_overrides(req.execution, supported=bool(bench.collect_artifacts), benchmark_id=bench.id)
    registry = recipes if recipes is not None else build_run_registry(req.metadata.recipe_dirs)
    if recipes is None:
        add_document_recipes(registry, req.metadata)
    candidates = registry.candidates(req.execution.enabled_recipes)

    all_tasks = bench.load_tasks(req)
    tasks = bench.select_tasks(all_tasks, req)
    if task_glob:
        selected = len(tasks)
        tasks = [t for t in tasks if fnmatch.fnmatchcase(t.task_id, task_glob)]
        if not tasks:
            of = f"{selected} selected of {len(all_tasks)}" if selected != len(all_tasks) else str(selected)
            raise AcxPlanError(
                f"--tasks {task_glob!r} matches none of the {of} tasks",
                code="E0440",
                path="--tasks",
                help="the glob is matched against task ids (case-sensitive); e.g. --tasks 'q1*'",
            )
    # B4: stable, unique, non-empty ids.
    seen: set[str] = set()
    for t in all_tasks:
        if not t.task_id or t.task_id in seen:
            raise AcxPlanError(
                f"benchmark {bench.id!r} produced an empty or duplicate task id {t.task_id!r}",
                code="E0403",
                help="task ids must be unique non-empty strings",
            )
        seen.add(t.task_id)

    harness_plan = None
    if req.harness.id == "none":
        harness_plan = HarnessPlan()  # P4 (5): a bare HarnessPlan for harness-free benchmarks
    elif type(harn).build_plan is _base_harness_build_plan():
        harness_plan = harn.build_plan(tasks[0] if tasks else TaskSpec(task_id="-"), req)

    return RequestPlan(
        name=req.metadata.request_name or "run",
        request=req,
        benchmark=bench,
        harness=harn,
        tasks=tasks,
        total_tasks=len(all_tasks),
        capabilities=capabilities,
        recipes=registry,
        request_provenance=request_provenance,
        _candidates=candidates,
        _explicit=_explicit_paths(req, request_provenance),
        _harness_plan=harness_plan,
        _bench_mode=bench.resolve_evaluation_environment_mode(req),
        _run_follows_baseline=bench.run_policy_follows_baseline,
    )


def _base_harness_build_plan() -> Any:
    from acx.components import BaseHarness

    return BaseHarness.build_plan


def _check_request(req: RunRequest) -> None:
    params = req.environment.params
    for key in _LEGACY_IMAGE_KEYS:
        if key in params:
            target = "setup.image" if key == "image" else "evaluation_setup.image"
            raise AcxPlanError(
                f"environment param `{key}` is not supported: the image lives only in `{target}` (H3)",
                code="E0420",
                path=f"environment.params.{key}",
                help=f"move it: environment: {{{target.split('.')[0]}: {{image: …}}}}, e.g. "
                f'--env-params \'{{"{target.split(".")[0]}": {{"image": "registry.example/runner:v1"}}}}\'',
            )
    if "env" in req.harness.params:
        raise AcxPlanError(
            "harness param `env` is not supported (V4)",
            code="E0426",
            path="harness.params.env",
            help="set agent variables in environment.run_env_variables instead",
        )


def _check_pairing(req: RunRequest, bench: Any) -> None:
    harness_free = bench.harness_free
    if harness_free and req.harness.id != "none":
        raise AcxPlanError(
            f"benchmark {bench.id!r} runs tasks itself and must be paired with harness `none`, not {req.harness.id!r}",
            code="E0428",
            path="harness.id",
            help="set harness: {id: none}",
        )
    if not harness_free and req.harness.id == "none":
        raise AcxPlanError(
            f"harness `none` selects a harness-free benchmark, but {bench.id!r} needs an agent",
            code="E0428",
            path="harness.id",
            help="choose a harness (acx list harness), e.g. harness: {id: command, command: [...]}",
        )


def _build_benchmark(req: RunRequest, base_dir: str) -> Any:
    return _build_component("benchmark", req.benchmark.id, req.benchmark.params, base_dir=Path(base_dir))


def _build_harness(req: RunRequest) -> Any:
    return _build_component("harness", req.harness.id, req.harness.params)


def _build_component(kind: str, cid: str, params: dict[str, Any], **kwargs: Any) -> Any:
    """A benchmark or harness instance from the component registry with its typed config (B2)."""
    from acx.components import BENCHMARKS, HARNESSES

    registry = BENCHMARKS if kind == "benchmark" else HARNESSES
    info = registry.get(cid)
    if info is None:
        hint = None if ":" in cid else did_you_mean(cid, list(registry))
        raise AcxPlanError(
            registry.why_missing(cid),
            code="E0300",
            path=f"{kind}.id",
            help=(f"did you mean {hint!r}? " if hint else "") + f"known {kind}s: " + ", ".join(registry),
        )
    return info.create(_convert_config(params, info.config_class, kind), **kwargs)


def _convert_config(params: dict[str, Any], config_class: Any, kind: str) -> Any:
    try:
        return msgspec.convert(params, config_class)
    except msgspec.ValidationError as exc:
        raise AcxPlanError(
            f"invalid {kind} params: {exc}",
            code="E0200",
            path=f"{kind}.params",
            help=f"see `acx config docs {kind} ID` for the accepted fields",
        ) from None


def _explicit_paths(req: RunRequest, request_prov: Provenance | None) -> frozenset[str]:
    """Plan paths a user set explicitly: differing from the default, or set by a non-default layer."""
    out: set[str] = set()
    ex = req.execution
    for f in _EXEC_PLAN_FIELDS:
        if getattr(ex, f) != getattr(_DEFAULT_EXECUTION, f):
            out.add(f)
    if req.environment.evaluation_environment_mode is not None:
        out.add("evaluation_environment_mode")
    for path, chain in (request_prov or {}).items():
        if not any(c.layer != "default" and c.kind != "default" for c in chain):
            continue
        if path.startswith("execution."):
            name = path.split(".", 1)[1]
            if name.split(".", 1)[0] in _EXEC_PLAN_FIELDS:
                out.add(name)
        elif path.startswith("environment."):
            out.add(path)
            if path == "environment.evaluation_environment_mode":
                out.add("evaluation_environment_mode")
    return frozenset(out)
