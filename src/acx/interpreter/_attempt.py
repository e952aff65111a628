"""One logical attempt: runtime retries around a try; a try runs the phases under their deadlines.

Phases of a try (each a ``phase_changed`` event, T3)::

    open_environment → prepare_task → start_harness → run_harness | run_task
      → collect_harness_result → collect_artifacts → evaluate (reuse: in the run session)
      → release → evaluate (none: no session) | evaluate_environment + evaluate (fresh)

Budgets come only from the plan (T5): the harness watchdog is ``T + compensation``, a
harness-free ``run_task`` gets ``T`` exactly, ``collect_result`` gets
``runresult_collect_timeout_seconds``, evaluation ``evaluation_timeout_seconds``. A deadline cancels
the coroutine *and* the driver kills the command in the sandbox. Cleanup runs in shielded scopes
bounded by the cleanup grace period. Runtime retries (bounded by ``max_retries``) reuse the
attempt's plan (P3); every discarded try is kept under ``attempt-N/retries/``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import random
import re
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from acx.components import BaseHarness, HarnessContext
from acx.drivers import Driver, OpenRequest, Session
from acx.errors import AcxRuntimeError, AcxUserError, DriverError
from acx.interpreter import _checkpoint
from acx.interpreter._envvars import resolve_map
from acx.interpreter._events import ProgressEvent
from acx.interpreter._fs import PRIVATE, atomic_write_json, task_dir_name
from acx.interpreter._keyed import keyed_digest
from acx.interpreter._limits import Limits
from acx.interpreter._metrics import validate_observations
from acx.interpreter._models import merge_into_result, session_scope
from acx.interpreter._store import RunStore, read_json
from acx.ir import (
    EnvironmentSpec,
    ExecutionIssue,
    ExecutionPlan,
    NetworkPolicy,
    PreparedTask,
    RunRequest,
    RunResult,
    StepPlan,
    TaskSpec,
    status_from_issues,
    to_builtins,
)
from acx.secrets import Scrubber

__all__ = ["AttemptRunner", "RequestContext", "Scrubber", "retry_reason", "step_view"]

log = logging.getLogger("acx.interpreter")

_PUBLIC = NetworkPolicy()
_HOST = socket.gethostname()
_PROCESS_TOKEN = uuid.uuid4().hex[:6]
_SESSION_COUNTER = itertools.count(1)
_PID = os.getpid()


def _no_write() -> None:
    """Nothing to write: waiting for a group commit makes the earlier journal line durable."""


@dataclass
class RequestContext:
    """Everything one request's attempts share."""

    name: str
    index: int
    key: str
    orchestration_id: str
    request: RunRequest
    benchmark: Any
    harness: Any
    driver: Driver
    store: RunStore
    limits: Limits
    environ: Mapping[str, str]
    emit_event: Callable[[ProgressEvent], None]
    grace: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    scrub: Scrubber = field(default_factory=Scrubber)
    live_sessions: set[str] = field(default_factory=set)
    #: The run's model gateway (``acx.interpreter._models.RunModels``) when the harness calls models.
    models: Any = None
    #: Where evaluation checkpoints are recovered from (``_checkpoint.RecoveryPolicy``), or None.
    recovery: Any = None

    def bind_policy(self, policy: NetworkPolicy) -> NetworkPolicy:
        """A plan policy as the driver applies it (the model gateway's real address bound in)."""
        return self.models.bind_policy(policy) if self.models is not None else policy

    def emit(self, event: str, **fields: Any) -> None:
        self.emit_event(
            ProgressEvent(
                run_id=self.store.run_id,
                event=event,
                timestamp=time.time(),
                orchestration_id=self.orchestration_id,
                request_key=self.key,
                request_name=self.name,
                request_index=self.index,
                **fields,
            )
        )


def _issue(severity: str, phase: str, code: str, message: str = "") -> ExecutionIssue:
    return ExecutionIssue(severity=severity, phase=phase, code=code, message=message[:2000])  # type: ignore[arg-type]


def retry_reason(issues: list[ExecutionIssue], patterns: list[str] | None) -> str | None:
    """Why a try is retried: any FATAL issue, or an ERROR whose message/code matches a pattern."""
    for i in issues:
        if i.severity == "fatal":
            return f"fatal {i.code}"
    compiled = _retry_patterns(tuple(patterns or ()))
    for i in issues:
        if i.severity != "error":
            continue
        for pat, rx in compiled:
            if rx.search(i.message) or rx.search(i.code):
                return f"error {i.code} matches {pat!r}"
    return None


@functools.lru_cache(maxsize=64)
def _retry_patterns(patterns: tuple[str, ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The patterns compiled once per list. Compilation rejects invalid ones; one that reaches a
    run anyway (a hand-edited program) is skipped with a warning instead of failing every task."""
    out: list[tuple[str, re.Pattern[str]]] = []
    for pat in patterns:
        try:
            out.append((pat, re.compile(pat)))
        except (re.error, TypeError) as exc:
            log.warning("execution.retry_pattern_list: ignoring invalid regex %r: %s", pat, exc)
    return tuple(out)


def backoff_seconds(retry: int, lo: float, hi: float, rng: random.Random) -> float:
    """Exponential backoff with jitter: base = lo·2^retry capped at hi; sleep ∈ [base/2, base]."""
    base = min(hi, lo * (2**retry)) if lo > 0 else 0.0
    return rng.uniform(base / 2, base) if base > 0 else 0.0


@dataclass
class _Try:
    """Mutable state of one physical try."""

    number: int
    issues: list[ExecutionIssue] = field(default_factory=list)
    telemetry: dict[str, Any] = field(default_factory=dict)
    result: RunResult | None = None
    prepared: PreparedTask | None = None
    evaluated: RunResult | None = None
    artifacts: dict[str, Any] = field(default_factory=dict)
    run_ok: bool = True
    #: The network policy the run stage left in force (kept through artifact collection, A5).
    net: NetworkPolicy | None = None
    #: A sandbox of this try was lost with its infrastructure (a cluster node died).
    infra_lost: bool = False
    #: SHA-256 of the model_calls.json this try wrote (for its evaluation checkpoint).
    transcript_sha256: str | None = None
    #: The agent is in the image the run sandbox starts from (the install cache): no install phase.
    installed: bool = False

    def add(self, severity: str, phase: str, code: str, message: str = "") -> None:
        self.issues.append(_issue(severity, phase, code, message))
        if severity == "fatal":
            self.run_ok = False


class AttemptRunner:
    """Runs one logical attempt of one task with its plan (retries included)."""

    def __init__(self, ctx: RequestContext, task: TaskSpec, attempt: int, plan: ExecutionPlan) -> None:
        self.ctx = ctx
        self.task = task
        self.attempt = attempt
        self.plan = plan
        env = plan.environment
        # Resolved right before use (V1); missing names were refused before any environment opened.
        self.public_env = resolve_map(env.env_variables, ctx.environ)
        self.run_env = resolve_map(env.run_env_variables, ctx.environ)
        self.eval_env = resolve_map(env.evaluation_env_variables, ctx.environ)
        for m, raw in (
            (self.public_env, env.env_variables),
            (self.run_env, env.run_env_variables),
            (self.eval_env, env.evaluation_env_variables),
        ):
            ctx.scrub.add(m, raw=raw, environ=ctx.environ)
        #: Where the harness's model calls and the judge's are written: the attempt's directory,
        #: ``steps/<name>/`` in it while a step of a multi-step task runs.
        self.record_dir: Path | None = None
        #: Set by :meth:`find_recovery`: the checkpoint to evaluate from, or why there is none.
        self.recovery: _checkpoint.Recovery | None = None
        self.refused: str | None = None

    @functools.cached_property
    def attempt_dir(self) -> Path:
        return self.ctx.store.attempt_dir(self.task.task_id, self.attempt)

    # ---- events ------------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        self.ctx.emit(
            "phase_changed",
            task_id=self.task.task_id,
            category=self.task.category,
            attempt=self.attempt,
            phase=name,
        )

    def _msg(self, exc: BaseException) -> str:
        text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        help = getattr(exc, "fields", {}).get("help") if isinstance(exc, AcxRuntimeError) else None
        if help:  # what to do, as the driver said it (e.g. how to build a missing image)
            text = f"{text} (help: {help})"
        return self.ctx.scrub(f"{type(exc).__name__}: {text}")

    @staticmethod
    def _code(exc: BaseException, default: str) -> str:
        """A driver's own issue code (``image_not_found``, ``environment_no_image``) over the
        generic one; the generic ``runtime_failed``/``environment_failed`` defaults add nothing."""
        code = getattr(exc, "code", None) if isinstance(exc, AcxRuntimeError) else None
        return code if isinstance(code, str) and code not in ("runtime_failed", "environment_failed") else default

    # ---- evaluation-only recovery (A9) --------------------------------------------------------
    def find_recovery(self) -> bool:
        """Look for this attempt's checkpoint in the request's recovery source and check it; True
        when the attempt will be evaluated from it (its directory must then be left as it is)."""
        policy = self.ctx.recovery
        if policy is None:
            return False
        key = (self.task.task_id, self.attempt)
        path = _checkpoint.find(policy.source, *key)
        # Only an evaluation that failed or never ran is redone from a checkpoint; an attempt left
        # out of a reuse for another reason (corrupt artifacts, a retry) runs again.
        evaluated = path is not None and (path.parent / "result.json").exists()
        if evaluated and not policy.no_agent and key not in policy.eval_failed:
            path = None
        if path is None:
            if key in policy.eval_failed:
                mode = self.plan.evaluation_environment_mode
                self.refused = (
                    f"evaluation mode {mode!r} evaluates in the run sandbox, which is gone: the attempt reruns"
                    if mode not in _checkpoint.RECOVERABLE_MODES
                    else "its evaluation failed and it has no evaluation checkpoint: the attempt reruns"
                )
            elif policy.no_agent:
                mode = self.plan.evaluation_environment_mode
                self.refused = (
                    # Say why: a reuse-mode attempt completed its agent phase but never gets one.
                    f"no evaluation checkpoint: evaluation mode {mode!r} evaluates in the run sandbox, "
                    "which is gone (only none/fresh attempts are recoverable)"
                    if mode not in _checkpoint.RECOVERABLE_MODES
                    else "no evaluation checkpoint (the agent phase did not complete, or the run predates them)"
                )
            return False
        inputs = _checkpoint.fingerprints(self.ctx.benchmark, self.task, self.ctx.request.benchmark)
        outcome = _checkpoint.check(
            path,
            task=self.task,
            attempt=self.attempt,
            plan=self.plan,
            inputs=inputs,
            allow_evaluation_changes=policy.no_agent,
            scrub=self.ctx.scrub,
        )
        if isinstance(outcome, str):
            self.refused = self.ctx.scrub(outcome)
            log.warning(
                "task %s attempt %d: evaluation checkpoint not used: %s",
                self.task.task_id,
                self.attempt,
                self.refused,
                extra={"request": self.ctx.name},
            )
            return False
        self.recovery = outcome
        return True

    @property
    def strictly_refused(self) -> bool:
        """Refused under ``--recovery strict``: marked, never run (:meth:`_strictly_refused`)."""
        policy = self.ctx.recovery
        return self.refused is not None and policy is not None and policy.strict and not policy.no_agent

    def _refusal_issue(self) -> ExecutionIssue | None:
        if self.refused is None:
            return None
        if self.ctx.recovery is not None and self.ctx.recovery.no_agent:
            return _issue("error", "run", "not_recoverable", f"not regraded: {self.refused}")
        return _issue("warning", "setup", "checkpoint_refused", f"evaluation-only recovery refused: {self.refused}")

    async def _recover(self, recovery: _checkpoint.Recovery) -> RunResult:
        """Evaluate from the checkpoint: no sandbox for the agent, no harness, no agent command."""
        t = _Try(0)
        self.ctx.emit(
            "attempt_started",
            task_id=self.task.task_id,
            category=self.task.category,
            attempt=self.attempt,
            payload={"try": 1, "recovered": True},
        )
        self.phase("recover_evaluation")
        started = time.monotonic()
        try:
            _checkpoint.restore_into(recovery, self.attempt_dir)
            data = read_json(self.attempt_dir / _checkpoint.CHECKPOINT_NAME)
        except (OSError, ValueError) as exc:  # the copy from the source run failed (disk, permissions)
            t.add("error", "evaluate", "evaluation_setup_failed", f"cannot restore the checkpoint: {self._msg(exc)}")
            return self._final(t)
        t.result, t.prepared = recovery.result, recovery.prepared
        recorded = data.get("artifacts") or {}
        if recorded.get("declared_artifacts") is not None:
            t.artifacts["declared_artifacts"] = recorded["declared_artifacts"]
        if recorded.get("manifest"):
            t.artifacts["manifest"] = recorded["manifest"]["name"]
        t.issues.extend(msgspec.convert(data.get("run_issues") or [], list[ExecutionIssue]))
        policy = self.ctx.recovery
        t.telemetry["recovered_from"] = {
            "run_id": data.get("source_run_id"),
            "kind": policy.kind if policy is not None else "resume",
            "changed_evaluation_inputs": list(recovery.changed),
        }
        log.info(
            "task %s attempt %d: run stage restored from checkpoint (%s)",
            self.task.task_id,
            self.attempt,
            data.get("source_run_id"),
            extra={"request": self.ctx.name},
        )
        async with self.ctx.limits.attempts:
            if self.plan.evaluation_environment_mode == "fresh":
                await self._fresh_evaluation(t)
            else:
                await self._evaluate(t, None, switch=False)
        t.telemetry["wall_seconds"] = round(time.monotonic() - started, 3)
        return self._final(t)

    def _say_refused(self, *, strict: bool) -> None:
        self.ctx.emit(
            "recovery_refused",
            task_id=self.task.task_id,
            category=self.task.category,
            attempt=self.attempt,
            payload={"reason": self.refused, "strict": strict},
        )

    def _strictly_refused(self) -> RunResult:
        """``--recovery strict``: the refusal is the attempt's result (``eval_error``, so a later
        ``--resume`` picks it up again); the agent is not paid for twice."""
        assert self.refused is not None
        message = (
            f"evaluation-only recovery refused (--recovery strict): {self.refused}; the agent was not run "
            "again — restore the changed input, or resume with --recovery rerun to run the agent again"
        )
        issue = _issue("error", "evaluate", "recovery_refused", message)
        self._say_refused(strict=True)
        return RunResult(
            task_id=self.task.task_id,
            attempt=self.attempt,
            category=self.task.category,
            issues=[issue],
            status=status_from_issues([issue]),
        )

    def _unrecoverable(self) -> RunResult:
        """acx regrade: an attempt without a usable checkpoint is recorded, never run."""
        issue = self._refusal_issue() or _issue("error", "run", "not_recoverable", "not regraded")
        return RunResult(
            task_id=self.task.task_id,
            attempt=self.attempt,
            category=self.task.category,
            issues=[issue],
            status=status_from_issues([issue]),
        )

    # ---- the retry loop ----------------------------------------------------------------------
    async def run(self) -> RunResult:
        if self.recovery is None and self.ctx.recovery is not None and self.refused is None:
            self.find_recovery()
        if self.recovery is not None:
            return await self._recover(self.recovery)
        if self.ctx.recovery is not None and self.ctx.recovery.no_agent:
            return self._unrecoverable()
        if self.strictly_refused:
            return self._strictly_refused()
        refusal = self._refusal_issue()
        if self.refused is not None:  # the terminal says why this attempt pays for its agent again
            self._say_refused(strict=False)
        result = await self._run_tries()
        extra = [refusal] if refusal is not None else []  # why the attempt ran again
        extra += self._declaration_issues()
        if extra:
            result = msgspec.structs.replace(result, issues=[*result.issues, *extra])
        return result

    def _declaration_issues(self) -> list[ExecutionIssue]:
        """What the task declares that acx does not honour (Harbor's ``mcp_servers``,
        ``healthcheck``, unknown keys…): said in every attempt's result, not only at load (H6)."""
        issues = [_issue("warning", "setup", "task_declaration_ignored", m) for m in self.task.load_warnings]
        servers = self.task.metadata.get("mcp_servers") if isinstance(self.task.metadata, dict) else None
        harness = self.ctx.harness
        # Harbor's MCP servers go to the agent; a harness with no agent (oracle) needs none.
        if servers and not getattr(harness, "supports_mcp", False) and harness.id not in ("oracle", "none"):
            names = ", ".join(str(s.get("name")) for s in servers)
            message = (
                f"the task's MCP servers ({names}) are not given to the agent: the {harness.id} harness has no "
                'MCP support (react and installed_agent have; docs/agents.md "MCP servers")'
            )
            issues.append(_issue("warning", "setup", "task_declaration_ignored", message))
        return issues

    async def _run_tries(self) -> RunResult:
        ex = self.plan.execution
        retries = 0
        node_losses = 0  # tries lost with their infrastructure: their own budget (issue 18 item 2)
        while True:
            async with self.ctx.limits.attempts:
                tried = await self._one_try(retries + node_losses)
            final = self._final(tried)
            reason = retry_reason(final.issues, ex.retry_pattern_list)
            if final.issues or retries or node_losses:
                # A clean try is in the journal and progress.jsonl already; run.log is for what went wrong.
                log.info(
                    "task %s attempt %d try %d: %s%s",
                    self.task.task_id,
                    self.attempt,
                    retries + node_losses + 1,
                    final.status,
                    "".join(f"; {i.severity} {i.phase}/{i.code}: {i.message[:200]}" for i in final.issues),
                    extra={"request": self.ctx.name},
                )
            if tried.infra_lost and any(i.severity in ("fatal", "error") for i in final.issues):
                # What went wrong went wrong with its node (an evaluation cut off by the loss too).
                reason = reason or "error with the sandbox's node lost"
                budget = self.ctx.driver.max_infrastructure_losses
                if node_losses < budget:
                    node_losses += 1
                    reason = f"infrastructure lost ({node_losses}/{budget}): {reason}"
                    self._retry(final, retries + node_losses, reason, 0.0, scope="infrastructure")
                    continue
                final = self._infra_exhausted(final, node_losses + 1, budget)
                reason = None  # a node loss never consumes max_retries
            if node_losses:
                final = msgspec.structs.replace(
                    final, telemetry={**final.telemetry, "infrastructure_losses": node_losses}
                )
            if reason is None or retries >= ex.max_retries:
                return msgspec.structs.replace(final, retry_count=retries)
            delay = backoff_seconds(retries, ex.retry_min_delay_seconds, ex.retry_max_delay_seconds, self.ctx.rng)
            self._retry(final, retries + node_losses + 1, reason, delay)
            self.phase("retry_wait")
            await trio.sleep(delay)
            retries += 1

    def _retry(self, final: RunResult, retry: int, reason: str, delay: float, scope: str = "attempt") -> None:
        self._archive_try(final, retry, reason, delay, scope)
        self.ctx.emit(
            "attempt_retry",
            task_id=self.task.task_id,
            attempt=self.attempt,
            payload={"retry": retry, "reason": reason, "delay_seconds": round(delay, 3)},
        )

    @staticmethod
    def _infra_exhausted(final: RunResult, lost: int, budget: int) -> RunResult:
        """The attempt's result once its sandbox was lost with its node once more than allowed."""
        issue = _issue(
            "fatal",
            "run",
            "infrastructure_losses_exhausted",
            f"the attempt lost its sandbox with its node {lost} time(s); at most {budget} such loss(es) "
            "run it again (runtime.cluster.max_node_losses)",
        )
        issues = [*final.issues, issue]
        return msgspec.structs.replace(final, issues=issues, status=status_from_issues(issues))

    def _final(self, t: _Try) -> RunResult:
        base = t.evaluated or t.result or RunResult(task_id=self.task.task_id)
        issues = list(base.issues) + [i for i in t.issues if i not in base.issues]
        metrics, bad = validate_observations(self.ctx.benchmark.metric_contract, dict(base.metrics))
        issues += bad
        issues = [msgspec.structs.replace(i, message=self.ctx.scrub(i.message)) for i in issues]
        telemetry = {**base.telemetry, **t.telemetry}
        return msgspec.structs.replace(
            base,
            task_id=self.task.task_id,
            attempt=self.attempt,
            category=self.task.category,
            issues=issues,
            metrics=metrics,
            telemetry=telemetry,
            artifacts={**base.artifacts, **t.artifacts},
            status=status_from_issues(issues),
        )

    def _archive_try(self, final: RunResult, retry: int, reason: str, delay: float, scope: str = "attempt") -> None:
        """Keep the discarded try (A8): a retry record, and its files under ``retries/<id>/``."""
        retries_dir = self.attempt_dir / "retries"
        retries_dir.mkdir(parents=True, exist_ok=True)  # rare path: a retry
        stage = next((i.phase for i in final.issues if i.severity in ("fatal", "error")), "run")
        record = {
            "schema_version": "acx.retry.v1",
            "task_id": self.task.task_id,
            "category": self.task.category,
            "attempt": self.attempt,
            "retry": retry,
            "max_retries": self.plan.execution.max_retries,
            "retry_delay_seconds": round(delay, 3),
            "stage": stage,
            "scope": scope,
            "reason": reason,
            "issues": to_builtins(final.issues),
            "discarded_result": to_builtins(final),
        }
        name = f"{task_dir_name(self.task.task_id)}.attempt{self.attempt}.retry{retry}.{stage}.json"
        atomic_write_json(retries_dir / name, self.ctx.scrub.tree(record), mode=PRIVATE)
        leftovers = [p for p in self.attempt_dir.iterdir() if p.name not in ("retries",)]
        if leftovers:
            dest = retries_dir / uuid.uuid4().hex[:12]
            dest.mkdir()
            for p in leftovers:
                p.rename(dest / p.name)

    # ---- one try -----------------------------------------------------------------------------
    async def _one_try(self, number: int) -> _Try:
        t = _Try(number)
        ctx, plan = self.ctx, self.plan
        ctx.emit(
            "attempt_started",
            task_id=self.task.task_id,
            category=self.task.category,
            attempt=self.attempt,
            payload={"try": number + 1},
        )
        mode = plan.evaluation_environment_mode
        session: Session | None = None
        started = time.monotonic()
        async with ctx.limits.provider_slot(plan.environment.id):
            try:
                image = None
                if plan.install_cache_key is not None:
                    image = await self._cached_install(t)
                if t.run_ok:  # a failed cached install opens nothing: the agent cannot run
                    session = await self._open(
                        t, plan.environment, "run", self._baseline(plan.environment), image=image
                    )
                if session is not None and plan.steps:
                    await self._run_steps(t, session)
                elif session is not None:
                    await self._run_stage(t, session)
                    if t.run_ok and plan.collect_artifacts:
                        await self._collect_artifacts(t, session)
                    await self._end_run_policy(t, session)
                    if t.run_ok and mode == "reuse":
                        await self._evaluate(t, session, switch=True)
            finally:
                if session is not None:
                    await self._release(t, session)
        if plan.steps:  # verified step by step in the run session: nothing left to evaluate
            pass
        elif t.run_ok and t.result is not None and mode in _checkpoint.RECOVERABLE_MODES:
            await self._save_checkpoint(t)
        if t.run_ok and t.result is not None and mode == "none":
            await self._evaluate(t, None, switch=False)
        elif t.run_ok and t.result is not None and mode == "fresh":
            await self._fresh_evaluation(t)
        t.telemetry["wall_seconds"] = round(time.monotonic() - started, 3)
        return t

    async def _run_steps(self, t: _Try, session: Session) -> None:
        """A multi-step task: each step's prepare_task, agent run and evaluation in order in this one
        session (Harbor's MultiStepTrial), the plan seen through the step's view. The benchmark
        says whether the next step runs and combines the steps' results into the attempt's."""
        whole, eval_env = self.plan, self.eval_env
        results: list[RunResult] = []
        last = len(whole.steps) - 1
        try:
            for index, step in enumerate(whole.steps):
                st = _Try(t.number)
                st.installed = t.installed  # the install cache's image already holds the agent
                self.plan = step_view(whole, index)
                self.eval_env = self._step_eval_env(step, eval_env)
                self.record_dir = self.attempt_dir / "steps" / _step_dir_name(step.name)
                self.ctx.emit(
                    "step_started",
                    task_id=self.task.task_id,
                    attempt=self.attempt,
                    payload={"step": step.name, "index": index + 1, "of": last + 1},
                )
                await self._run_stage(st, session)
                if st.run_ok and self.plan.collect_artifacts:  # after the step's agent, before its verifier
                    await self._collect_artifacts(st, session, self.record_dir)
                await self._end_run_policy(st, session)
                if st.run_ok and st.result is not None:
                    await self._evaluate(st, session, switch=True)
                if t.prepared is None:
                    t.prepared = st.prepared
                results.append(self._final(st))
                if index < last and not self.ctx.benchmark.step_continues(self.task, self.plan, results[-1]):
                    break
        finally:
            self.plan, self.eval_env, self.record_dir = whole, eval_env, None
        t.prepared = t.prepared or PreparedTask(task_id=self.task.task_id, category=self.task.category)
        t.result = t.evaluated = self.ctx.benchmark.combine_steps(self.task, whole, results)

    def _step_eval_env(self, step: StepPlan, task_env: dict[str, str]) -> dict[str, str]:
        """A step's own verifier variables (resolved right before use, V1), else the task's."""
        if step.evaluation_env_variables is None:
            return task_env
        resolved = resolve_map(step.evaluation_env_variables, self.ctx.environ)
        self.ctx.scrub.add(resolved, raw=step.evaluation_env_variables, environ=self.ctx.environ)
        return resolved

    def _baseline(self, env: EnvironmentSpec) -> NetworkPolicy:
        return env.baseline_network_policy or _PUBLIC

    async def _save_checkpoint(self, t: _Try) -> None:
        """The evaluation checkpoint (A9): written once, before evaluation, so a failed scoring
        never changes it. Not written when declared artifacts left no manifest (nothing to verify
        a recovery against). Failing to write it costs only the recovery: a warning."""
        result, prepared = t.result, t.prepared
        assert result is not None and prepared is not None
        if self.plan.collect_artifacts and not t.artifacts.get("manifest"):
            return
        self.phase("save_evaluation_checkpoint")
        ctx = self.ctx
        attempt_dir = self.attempt_dir
        issues = to_builtins(t.issues)  # as of now: the try goes on to add the evaluation's

        def save() -> None:
            data = _checkpoint.build(
                run_id=ctx.store.run_id,
                task=self.task,
                attempt=self.attempt,
                plan=self.plan,
                result=result,
                prepared=prepared,
                artifacts=t.artifacts,
                attempt_dir=attempt_dir,
                inputs=_checkpoint.fingerprints(ctx.benchmark, self.task, ctx.request.benchmark),
                transcript_sha256=t.transcript_sha256,
            )
            data["run_issues"] = issues
            _checkpoint.write(attempt_dir, data, ctx.scrub)

        try:
            # All of it in one worker-thread hop: the input fingerprints (the benchmark's files,
            # hashed), the transcript's stat, the encoding, and the write — which creates the task
            # and attempt directories (two mkdirs, a temp file, a rename), metadata operations that
            # wait for a busy filesystem's journal. On the trio thread they stall every other task
            # of the run. The try is not touched meanwhile: its task awaits the hop.
            await ctx.store.offload(save)
        except Exception as exc:  # any failure only costs the recovery (a full disk: see one())
            t.add("warning", "collect", "checkpoint_failed", f"evaluation checkpoint not written: {self._msg(exc)}")

    def _open_request(
        self,
        env: EnvironmentSpec,
        role: str,
        policy: NetworkPolicy,
        startup_env: dict[str, str],
        image: str | None = None,
    ) -> OpenRequest:
        """The driver's request for one sandbox; ``image`` (the install cache's derived image)
        replaces the environment's image or build."""
        ctx = self.ctx
        # The run (its id, and its directory's key: run ids are shared by the requests of an
        # orchestration), then unique across processes resuming it (random per process) and within
        # one (a counter): cheaper than a uuid4 per session.
        store = ctx.store
        session_id = f"{store.run_id}-{store.run_key}-{_PROCESS_TOKEN}{next(_SESSION_COUNTER):x}"
        resources = env.evaluation_resources if role == "evaluate" else env.run_resources
        labels = {
            "acx.run_id": ctx.store.run_id,
            "acx.run_key": ctx.store.run_key,
            "acx.request": ctx.name,
            "acx.task": self.task.task_id[:63],
            "acx.attempt": str(self.attempt),
            "acx.session": session_id,
            "acx.role": role,
            "acx.pid": str(os.getpid()),
            "acx.host": _HOST,
        }
        if self.plan.execution.keep_environment:
            # Kept on purpose: garbage collection (`acx gc`, the docker orphan sweep) leaves it alone.
            labels["acx.keep"] = "true"
        build_context = self.task.metadata.get("environment_dir") if isinstance(self.task.metadata, dict) else None
        return OpenRequest(
            session_id=session_id,
            labels=labels,
            setup=env.setup if image is None else msgspec.structs.replace(env.setup, image=image),
            resources=resources or env.resources,
            network_policy=ctx.bind_policy(policy),
            startup_env=startup_env,
            build_context=build_context if image is None else None,
            state_dir=self.ctx.store.attempt_dir_str(self.task.task_id, self.attempt),
        )

    async def _open(
        self,
        t: _Try,
        env: EnvironmentSpec,
        role: str,
        policy: NetworkPolicy,
        startup_env: dict[str, str] | None = None,
        image: str | None = None,
    ) -> Session | None:
        ctx = self.ctx
        self.phase("open_environment" if role == "run" else "evaluate_environment")
        req = self._open_request(env, role, policy, self.public_env if startup_env is None else startup_env, image)
        await ctx.limits.wait_open_turn(env.id)
        # A killed run's sandboxes must be found on --resume. A driver that finds its own again
        # (host_process directories, docker labels) needs only the journal line; for any other, the
        # line is durable (a group commit) before the sandbox exists.
        store = ctx.store
        discoverable = ctx.driver.sessions_discoverable
        store.session_opened(
            req.session_id,
            {"provider": env.id, "task_id": self.task.task_id, "attempt": self.attempt, "role": role, "pid": _PID},
            through=not discoverable,
        )
        if not discoverable:
            await store.durably(_no_write)
        budget = env.setup.build_timeout_seconds
        session: Session | None = None
        try:
            # Waiting for room (a cluster node's free slot) is not part of the setup deadline; no
            # checkpoint between it and open(), which takes over what it holds.
            await ctx.driver.admit(req)
            with trio.fail_after(budget) if budget else _nullscope():
                session = await ctx.driver.open(req)
        except trio.TooSlowError:
            t.add("fatal", "setup", "environment_timeout", f"environment open exceeded {budget} s")
        except AcxUserError as exc:
            t.add("fatal", "setup", "environment_unsupported", self._msg(exc))
        except Exception as exc:
            t.add("fatal", "setup", self._code(exc, "environment_failed"), self._msg(exc))
            if isinstance(exc, DriverError) and exc.infrastructure_lost:  # its node died while it opened
                t.infra_lost = True
            if getattr(exc, "code", None) == "release_failed":
                # The failed open could not remove what it had made (issue 11.13): a record, like a
                # failed release, for --resume and `acx results show`.
                record = {"provider": env.id, "task_id": self.task.task_id, "attempt": self.attempt}
                store.record_session(req.session_id, {**record, "pid": _PID, "state": "release_failed"})
        if session is None:
            store.session_closed(req.session_id, "open_failed")
            return None
        ctx.live_sessions.add(session.id)
        # What the driver could not honour at open (e.g. docker's storage limit refused by the
        # engine): a warning on the attempt (Session.open_notes).
        for note in session.open_notes:
            t.add("warning", "setup", "resource_not_enforced", str(note))
        return session

    def _record_outliving(self, session: Session, state: str) -> None:
        """A record file in .env-resources/ for a sandbox that outlives its attempt."""
        record = {"provider": self.plan.environment.id, "task_id": self.task.task_id, "attempt": self.attempt}
        self.ctx.store.record_session(session.id, {**record, "pid": _PID, "state": state})

    async def _release(self, t: _Try, session: Session) -> None:
        ctx = self.ctx
        if session.infrastructure_lost:
            t.infra_lost = True
        # One scope: shielded from the caller's cancellation, bounded by the cleanup grace period.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + ctx.grace):
            self.phase("release")
            if self.plan.execution.keep_environment:
                self._record_outliving(session, "kept")
                ctx.store.session_closed(session.id, "kept")
                ctx.live_sessions.discard(session.id)
                log.info("environment retained (keep_environment): %s", session.id, extra={"request": ctx.name})
                return
            try:
                await session.close()
            except Exception as exc:
                t.add(
                    "warning",
                    "cleanup",
                    "release_failed",
                    f"environment release failed; resource record retained: {self._msg(exc)}",
                )
            else:
                ctx.store.session_closed(session.id)
                ctx.live_sessions.discard(session.id)
                return
        # Failed or timed out (the scope's deadline): no await from here on.
        self._record_outliving(session, "release_failed")
        if not any(i.code == "release_failed" for i in t.issues):
            t.add(
                "warning",
                "cleanup",
                "release_failed",
                "environment release timed out; record retained",
            )

    async def _switch(
        self, t: _Try, session: Session, policy: NetworkPolicy | None, current: NetworkPolicy, phase: str
    ) -> NetworkPolicy:
        if policy is None or policy == current:
            return current
        try:
            await session.set_network_policy(self.ctx.bind_policy(policy))
        except Exception as exc:
            # A sandbox lost with its infrastructure (a cluster node) keeps the driver's own code
            # (node_lost): the loss is not the policy's, and is retried as a loss.
            lost = isinstance(exc, DriverError) and exc.infrastructure_lost
            code = self._code(exc, "network_policy_failed") if lost else "network_policy_failed"
            t.add("fatal", phase, code, self._msg(exc))
            raise _Abort from exc
        return policy

    async def _run_stage(self, t: _Try, session: Session) -> None:
        ctx, plan, task = self.ctx, self.plan, self.task
        req = ctx.request
        self.phase("prepare_task")
        try:
            t.prepared = await ctx.benchmark.prepare_task(task, session, req, plan)
        except Exception as exc:
            code = self._code(exc, "environment_failed") if isinstance(exc, DriverError) else "setup_failed"
            t.add("fatal", "setup", code, self._msg(exc))
            return
        baseline = self._baseline(plan.environment)
        try:
            t.net = await self._switch(t, session, plan.run_network_policy, baseline, "setup")
        except _Abort:
            return
        T = plan.run_timeout_seconds
        if ctx.benchmark.harness_free:
            await self._run_harness_free(t, session, T)
        else:
            await self._run_harness(t, session, T)

    async def _end_run_policy(self, t: _Try, session: Session) -> None:
        """Back to the baseline policy — after artifact collection, which (with anything the agent
        left running) stays under the run stage's policy (A5)."""
        if t.net is None:
            return
        try:
            await self._switch(t, session, self._baseline(self.plan.environment), t.net, "cleanup")
        except _Abort:
            pass
        t.net = None

    async def _run_harness_free(self, t: _Try, session: Session, T: float | None) -> None:
        ctx = self.ctx
        assert t.prepared is not None
        self.phase("run_task")
        with _deadline(T) as scope, session.env_scope(self.run_env), _user(session, self.plan.run_user):
            try:
                t.result = await ctx.benchmark.run_task(self.task, t.prepared, ctx.request, self.plan, session)
            except Exception as exc:
                t.add("fatal", "run", "run_failed", self._msg(exc))
        if scope.cancelled_caught:
            t.telemetry["timed_out"] = True
            t.add("error", "run", "run_timeout", f"run_task exceeded its budget of {T} s")
            t.result = t.result or RunResult(task_id=self.task.task_id)
        if t.result is not None and any(i.severity == "fatal" for i in t.result.issues):
            t.run_ok = False  # a FATAL issue of the run stage skips evaluation (docs/running.md)

    async def _run_harness(self, t: _Try, session: Session, T: float | None) -> None:
        ctx, plan = self.ctx, self.plan
        harness = ctx.harness
        assert t.prepared is not None
        models = ctx.models.open(self.task.task_id, self.attempt, t.number) if ctx.models is not None else None
        hctx = self._harness_context(t.prepared, session, models)
        self.phase("start_harness")
        try:
            hctx.state = await harness.start_session(hctx)
        except Exception as exc:
            t.add("fatal", "setup", "harness_setup_failed", self._msg(exc))
            if models is not None:
                models.close()
            return
        partial: RunResult | None = None
        watchdog = None if T is None else T + plan.run_timer_compensation_seconds
        try:
            if plan.install_timeout_seconds is not None and not t.installed:
                t.telemetry["install_cached"] = False
                if not await self._install_agent(t, session, hctx):
                    return  # a fatal install issue: the agent never runs (close_session still does)
            self.phase("run_harness")
            # The agent's own budget is T from now (its deadline); the watchdog adds the
            # compensation for a harness that overruns it.
            hctx.deadline = None if T is None else trio.current_time() + T
            with (
                _deadline(watchdog) as scope,
                session.env_scope(self.run_env),
                _user(session, plan.run_user),
                session_scope(models),
            ):
                try:
                    partial = await harness.execute_task(hctx)
                except Exception as exc:  # a sandbox that died keeps its own code (sandbox_stopped)
                    t.add("fatal", "run", self._code(exc, "harness_failed"), self._msg(exc))
            if scope.cancelled_caught:
                t.telemetry["timed_out"] = True
                t.add(
                    "error",
                    "run",
                    "run_timeout",
                    f"harness exceeded its watchdog of {watchdog} s (T={T} + compensation)",
                )
            # Saved output is collected even after a timeout, with public vars only, unscaled budget.
            self.phase("collect_harness_result")
            # A harness without its own collect_result or close_session needs no deadline for it
            # (the base ones return at once): two cancel scopes fewer per attempt.
            if _overrides(harness, "collect_result"):
                with trio.move_on_after(plan.runresult_collect_timeout_seconds) as cscope:
                    try:
                        partial = await harness.collect_result(hctx, partial)
                    except Exception as exc:
                        t.add("fatal", "collect", "collect_failed", self._msg(exc))
                if cscope.cancelled_caught:
                    t.add(
                        "error",
                        "collect",
                        "collect_timeout",
                        f"collecting the harness result exceeded {plan.runresult_collect_timeout_seconds} s",
                    )
        finally:
            if _overrides(harness, "close_session"):
                with trio.CancelScope(shield=True, deadline=trio.current_time() + self.ctx.grace):
                    try:
                        await harness.close_session(hctx)
                    except Exception as exc:
                        t.add("warning", "cleanup", "harness_cleanup_failed", self._msg(exc))
            if models is not None:
                models.close()  # its tokens die with the harness: nothing in the sandbox can call on
        # An empty answer is the benchmark's to judge, not an infrastructure error.
        t.result = partial or RunResult(task_id=self.task.task_id)
        if any(i.severity == "fatal" for i in t.result.issues):
            # A harness that reports a FATAL issue itself (e.g. the oracle of a task with no
            # solution) ran nothing worth grading: like a raised one, it skips evaluation.
            t.run_ok = False
        if models is not None:
            t.result, t.transcript_sha256 = await merge_into_result(
                t.result, models, self.record_dir or self.attempt_dir, ctx.scrub
            )

    async def _install_agent(self, t: _Try, session: Session, hctx: HarnessContext) -> bool:
        """The ``install_agent`` phase: its own budget B from the plan (the harness clips its
        commands to ``hctx.deadline``, killing them in the sandbox at B); the watchdog adds the
        run's timer compensation for a harness that overruns it. False = the agent must not run."""
        plan = self.plan
        budget = plan.install_timeout_seconds
        assert budget is not None
        self.phase("install_agent")
        watchdog = budget + plan.run_timer_compensation_seconds
        hctx.deadline = trio.current_time() + budget
        issues: list[ExecutionIssue] = []
        with trio.move_on_after(watchdog) as scope, session.env_scope(self.run_env), _user(session, plan.run_user):
            try:
                issues = await self.ctx.harness.install_agent(hctx)
            except Exception as exc:
                t.add("fatal", "setup", self._code(exc, "install_failed"), self._msg(exc))
                return False
        hctx.deadline = None
        if scope.cancelled_caught:
            t.add(
                "fatal",
                "setup",
                "install_timeout",
                f"installing the agent exceeded its watchdog of {watchdog:g} s (budget {budget:g} s + compensation)",
            )
            return False
        for issue in issues:
            t.add(issue.severity, issue.phase, issue.code, issue.message)
        return not any(i.severity == "fatal" for i in issues)

    async def _cached_install(self, t: _Try) -> str | None:
        """The install cache (``plan.install_cache_key``): the image with the agent installed, from
        the driver (``Driver.cached_install``: built once per key, under the run stage's network
        policy, user and variables). None when the driver cannot cache after all (a warning; the
        attempt installs in its own sandbox) or the install failed (its issues; nothing runs)."""
        ctx, plan = self.ctx, self.plan
        if not ctx.driver.capabilities().install_cache:
            # Planning saw a driver that caches; the one running cannot (a cluster's remote driver).
            t.add(
                "warning",
                "setup",
                "install_cache_unavailable",
                f"driver {plan.environment.id!r} cannot cache the installed agent here; it is installed in "
                "this attempt's sandbox",
            )
            return None
        self.phase("install_agent")
        key = await self._install_key()
        baseline = self._baseline(plan.environment)
        req = self._open_request(plan.environment, "run", plan.run_network_policy or baseline, self.public_env)

        async def install(session: Session) -> bool:
            hctx = self._harness_context(PreparedTask(task_id=self.task.task_id), session, None)
            hctx.install_layer = True
            return await self._install_agent(t, session, hctx)

        started = time.monotonic()
        budget = plan.environment.setup.build_timeout_seconds
        try:
            got = await ctx.driver.cached_install(req, key, install)
        except trio.TooSlowError:
            t.add("fatal", "setup", "environment_timeout", f"opening the install sandbox exceeded {budget} s")
            return None
        except Exception as exc:
            t.add("fatal", "setup", self._code(exc, "install_failed"), self._msg(exc))
            return None
        seconds = round(time.monotonic() - started, 3)
        if got is None:
            if t.run_ok:  # the installer said no without an issue of its own
                t.add("fatal", "setup", "install_failed", "the agent's install failed")
            return None
        t.installed = True
        t.telemetry.update(install_cached=got.cached, install_seconds=seconds, install_cache_key=got.key)
        if got.cached:
            payload = {"event": "agent_installed", "ok": True, "cached": True, "seconds": seconds}
            ctx.emit("harness_event", task_id=self.task.task_id, attempt=self.attempt, payload=payload)
        return got.image

    async def _install_key(self) -> str:
        """The plan's install key with what only the run knows: the uploads' content (hashed in a
        worker thread), the values of the variables the install sees, and its user."""
        plan = self.plan
        content = await trio.to_thread.run_sync(self.ctx.harness.install_content_key)
        data = msgspec.json.encode(
            {
                "plan": plan.install_cache_key,
                "content": content,
                "run_env": self.run_env,
                "public_env": self.public_env,
                "user": plan.run_user,
            },
            order="sorted",
        )
        # Keyed: the variables' values may be secrets, and the key is written to result.json and
        # an image tag (acx.interpreter._keyed says why a plain hash is not enough).
        return keyed_digest(data)

    def _harness_context(self, prepared: PreparedTask, session: Session, models: Any) -> HarnessContext:
        """The one object the harness's run-time methods get (the deadline is set when it runs)."""
        task_id, attempt = self.task.task_id, self.attempt

        def emit(event: str, payload: dict[str, Any]) -> None:
            # Scrubbed with the whole event on its way out (RequestRun._emit), like every event.
            self.ctx.emit("harness_event", task_id=task_id, attempt=attempt, payload={"event": event, **payload})

        return HarnessContext(
            session=session,
            prepared=prepared,
            request=self.ctx.request,
            plan=self.plan,
            task=self.task,
            attempt=attempt,
            models=models,
            emit=emit,
        )

    async def _collect_artifacts(self, t: _Try, session: Session, into: Path | None = None) -> None:
        """Into the attempt's directory (``into``: a multi-step task's step directory)."""
        try:
            from acx.interpreter import _artifacts  # written by the docker engineer
        except ImportError:
            return
        self.phase("collect_artifacts")
        target = into or self.attempt_dir
        try:
            target.mkdir(parents=True, exist_ok=True)
            outcome = await _artifacts.collect(session, self.plan, target, scrub=self.ctx.scrub)
        except Exception as exc:
            t.add("fatal", "collect", "artifact_transfer_failed", self._msg(exc))
            return
        t.issues.extend(outcome.issues)
        if outcome.blocks_evaluation:  # A6: a failed preparation or transfer is never evaluated
            t.run_ok = False
        t.artifacts["declared_artifacts"] = outcome.declared_artifacts
        if outcome.manifest_path is not None:
            t.artifacts["manifest"] = str(Path(outcome.manifest_path).name)

    async def _evaluate(self, t: _Try, session: Session | None, *, switch: bool) -> None:
        ctx, plan = self.ctx, self.plan
        assert t.result is not None and t.prepared is not None
        current = self._baseline(plan.environment)
        if switch and session is not None:
            try:
                current = await self._switch(t, session, plan.evaluation_network_policy, current, "evaluate")
            except _Abort:
                return
        self.phase("evaluate")
        budget = plan.evaluation_timeout_seconds
        scope_cm = session.env_scope(self.eval_env) if session is not None else _nullscope()
        user_cm = _user(session, plan.evaluation_user)
        # Scorers that grade with the run's models (model_graded's `grader` role) call through the
        # gateway in a session of their own: the agent's per-attempt limits are not spent on them.
        judge = ctx.models.open(self.task.task_id, self.attempt, t.number, "evaluate") if ctx.models else None
        with _deadline(budget) as scope, scope_cm, user_cm, session_scope(judge):
            try:
                t.evaluated = await ctx.benchmark.evaluate(self.task, t.prepared, t.result, ctx.request, plan, session)
            except Exception as exc:
                severity = "fatal" if isinstance(exc, DriverError) else "error"
                t.add(
                    severity,
                    "evaluate",
                    self._code(exc, "environment_failed") if severity == "fatal" else "evaluate_failed",
                    self._msg(exc),
                )
        if judge is not None:
            judge.close()
            if judge.calls:  # the gateway's own record of the grading calls (attempts, timing, usage)
                from acx.interpreter._fs import atomic_write_json

                record_dir = self.record_dir or self.attempt_dir
                record_dir.mkdir(parents=True, exist_ok=True)
                atomic_write_json(
                    record_dir / "judge_calls.json",
                    ctx.scrub.tree({"schema_version": "acx.model_calls.v1", "calls": judge.transcript()}),
                )
        if scope.cancelled_caught:
            t.telemetry["evaluation_timed_out"] = True
            fallback = ctx.benchmark.evaluation_timeout_metrics
            t.add("error", "evaluate", "evaluation_timeout", f"evaluation exceeded its budget of {budget} s")
            t.evaluated = msgspec.structs.replace(t.result, metrics=dict(fallback or {}))
        if switch and session is not None:
            try:
                await self._switch(t, session, self._baseline(plan.environment), current, "cleanup")
            except _Abort:
                pass

    async def _fresh_evaluation(self, t: _Try) -> None:
        plan = self.plan
        env = plan.evaluation_environment
        if env is None:
            t.add(
                "fatal",
                "evaluate",
                "evaluation_setup_failed",
                "fresh evaluation without an evaluation_environment",
            )
            return
        startup = (
            resolve_map(env.evaluation_environment_env_variables, self.ctx.environ)
            if env.evaluation_environment_env_variables is not None
            else resolve_map(env.env_variables, self.ctx.environ)
        )
        self.ctx.scrub.add(
            startup,
            raw=env.evaluation_environment_env_variables
            if env.evaluation_environment_env_variables is not None
            else env.env_variables,
            environ=self.ctx.environ,
        )
        baseline = env.evaluation_baseline_network_policy or env.baseline_network_policy or _PUBLIC
        async with self.ctx.limits.provider_slot(env.id):
            session = await self._open(t, env, "evaluate", baseline, startup)
            if session is None:
                return
            try:
                try:
                    from acx.interpreter import _artifacts
                except ImportError:
                    _artifacts = None  # type: ignore[assignment]
                if _artifacts is not None and plan.collect_artifacts:
                    self.phase("restore_artifacts")
                    restored = await _artifacts.restore(session, plan, self.attempt_dir)
                    t.issues.extend(restored)
                    if any(i.severity in ("fatal", "error") for i in restored):
                        return
                await self._evaluate_fresh_in(t, session, env, baseline)
            finally:
                await self._release(t, session)

    async def _evaluate_fresh_in(
        self, t: _Try, session: Session, env: EnvironmentSpec, baseline: NetworkPolicy
    ) -> None:
        plan = self.plan
        try:
            current = await self._switch(t, session, plan.evaluation_network_policy, baseline, "evaluate")
        except _Abort:
            return
        await self._evaluate(t, session, switch=False)
        try:
            await self._switch(t, session, baseline, current, "cleanup")
        except _Abort:
            pass


def _user(session: Session | None, user: str | None) -> Any:
    """The stage user's scope (Harbor's ``[agent].user`` / ``[verifier].user``); nothing to enter
    when the plan names none (the image's default user)."""
    if session is None or user is None:
        return _nullscope()
    return session.user_scope(user)


def _overrides(harness: Any, name: str) -> bool:
    """Whether ``harness`` has its own ``name`` hook (not :class:`BaseHarness`'s no-op)."""
    return getattr(type(harness), name, None) is not getattr(BaseHarness, name)


class _Abort(Exception):
    """A phase recorded a fatal issue; skip the rest of the stage."""


class _nullscope:
    cancelled_caught = False

    def __enter__(self) -> _nullscope:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _deadline(seconds: float | None) -> Any:
    """A cancel scope with a relative deadline; None = no deadline (T1): then no scope at all (a
    scope without a deadline would catch nothing), only its ``cancelled_caught = False``."""
    if seconds is None or not math.isfinite(seconds):
        return _nullscope()
    return trio.move_on_after(seconds)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _step_dir_name(name: str) -> str:
    """``steps/<name>/`` as Harbor names it; a name that is not plain gets the safe hashed form."""
    return name if _PLAIN_NAME.fullmatch(name) else task_dir_name(name)


def step_view(plan: ExecutionPlan, index: int) -> ExecutionPlan:
    """The plan as step ``index`` of a multi-step task runs it: the step's budgets, users and
    verifier variables; the agent is installed once, before the first step."""
    step = plan.steps[index]
    env = plan.environment
    if step.evaluation_env_variables is not None:
        env = msgspec.structs.replace(env, evaluation_env_variables=step.evaluation_env_variables)
    return msgspec.structs.replace(
        plan,
        step=index,
        environment=env,
        run_timeout_seconds=step.run_timeout_seconds,
        evaluation_timeout_seconds=step.evaluation_timeout_seconds,
        run_user=step.run_user,
        evaluation_user=step.evaluation_user,
        run_network_policy=step.run_network_policy or plan.run_network_policy,
        evaluation_network_policy=step.evaluation_network_policy or plan.evaluation_network_policy,
        install_timeout_seconds=plan.install_timeout_seconds if index == 0 else None,
        artifacts=[*plan.artifacts, *step.artifacts],
        artifact_collect=[*plan.artifact_collect, *step.artifact_collect],
    )
