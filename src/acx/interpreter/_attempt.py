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

The parts, each a small class over the attempt's shared :class:`AttemptState`
(``_attempt_state``): ``Sandboxes`` (``_sandbox``: open, network policy, release), ``AgentInstall``
and ``RunStage`` (``_run_stage``), ``Evaluation`` (``_evaluation``: the three evaluation modes and the
checkpoint), ``AttemptRecovery`` (``_recovery``: evaluation-only recovery, A9). This module keeps
the retry loop, one try's order of phases and the steps of a multi-step task.
"""

from __future__ import annotations

import functools
import logging
import random
import re
import time
import uuid

import msgspec
import trio

from acx.drivers import Session
from acx.interpreter import _checkpoint
from acx.interpreter._attempt_state import AttemptState, RequestContext, Try, issue
from acx.interpreter._envvars import resolve_map
from acx.interpreter._evaluation import Evaluation
from acx.interpreter._fs import PRIVATE, atomic_write_json, task_dir_name
from acx.interpreter._recovery import AttemptRecovery
from acx.interpreter._run_stage import AgentInstall, RunStage
from acx.interpreter._sandbox import Sandboxes
from acx.ir import (
    ExecutionIssue,
    ExecutionPlan,
    PreparedTask,
    RunResult,
    StepPlan,
    TaskSpec,
    status_from_issues,
    to_builtins,
)
from acx.secrets import Scrubber

__all__ = ["AttemptRunner", "RequestContext", "Scrubber", "retry_reason", "step_view"]

log = logging.getLogger("acx.interpreter")


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


class AttemptRunner:
    """Runs one logical attempt of one task with its plan (retries included)."""

    def __init__(self, ctx: RequestContext, task: TaskSpec, attempt: int, plan: ExecutionPlan) -> None:
        self.s = AttemptState(ctx, task, attempt, plan)
        self.sandboxes = Sandboxes(self.s)
        self.install = AgentInstall(self.s, self.sandboxes)
        self.stage = RunStage(self.s, self.sandboxes, self.install)
        self.evaluation = Evaluation(self.s, self.sandboxes)
        self.recovery = AttemptRecovery(self.s, self.evaluation)

    def find_recovery(self) -> bool:
        """Look for this attempt's evaluation checkpoint (:meth:`AttemptRecovery.find`); True when
        the attempt will be evaluated from it (its directory must then be left as it is)."""
        return self.recovery.find()

    @property
    def strictly_refused(self) -> bool:
        """Refused under ``--recovery strict``: marked, never run."""
        return self.recovery.strictly_refused

    # ---- the retry loop ----------------------------------------------------------------------
    async def run(self) -> RunResult:
        rec = self.recovery
        if rec.checkpoint is None and self.s.ctx.recovery is not None and rec.refused is None:
            rec.find()
        if rec.checkpoint is not None:
            return await rec.recover(rec.checkpoint)
        if self.s.ctx.recovery is not None and self.s.ctx.recovery.no_agent:
            return rec.unrecoverable()
        if rec.strictly_refused:
            return rec.strictly_refused_result()
        refusal = rec.refusal_issue()
        if rec.refused is not None:  # the terminal says why this attempt pays for its agent again
            rec.say_refused(strict=False)
        result = await self._run_tries()
        extra = [refusal] if refusal is not None else []  # why the attempt ran again
        extra += self._declaration_issues()
        if extra:
            result = msgspec.structs.replace(result, issues=[*result.issues, *extra])
        return result

    def _declaration_issues(self) -> list[ExecutionIssue]:
        """What the task declares that acx does not honour (Harbor's ``mcp_servers``,
        ``healthcheck``, unknown keys…): said in every attempt's result, not only at load (H6)."""
        issues = [issue("warning", "setup", "task_declaration_ignored", m) for m in self.s.task.load_warnings]
        servers = self.s.task.metadata.get("mcp_servers") if isinstance(self.s.task.metadata, dict) else None
        harness = self.s.ctx.harness
        # Harbor's MCP servers go to the agent; a harness with no agent (oracle) needs none.
        if servers and not getattr(harness, "supports_mcp", False) and harness.id not in ("oracle", "none"):
            names = ", ".join(str(s.get("name")) for s in servers)
            message = (
                f"the task's MCP servers ({names}) are not given to the agent: the {harness.id} harness has no "
                'MCP support (react and installed_agent have; docs/agents.md "MCP servers")'
            )
            issues.append(issue("warning", "setup", "task_declaration_ignored", message))
        return issues

    async def _run_tries(self) -> RunResult:
        ex = self.s.plan.execution
        retries = 0
        node_losses = 0  # tries lost with their infrastructure: their own budget (issue 18 item 2)
        while True:
            async with self.s.ctx.limits.attempts:
                tried = await self._one_try(retries + node_losses)
            final = self.s.final(tried)
            reason = retry_reason(final.issues, ex.retry_pattern_list)
            if final.issues or retries or node_losses:
                # A clean try is in the journal and progress.jsonl already; run.log is for what went wrong.
                log.info(
                    "task %s attempt %d try %d: %s%s",
                    self.s.task.task_id,
                    self.s.attempt,
                    retries + node_losses + 1,
                    final.status,
                    "".join(f"; {i.severity} {i.phase}/{i.code}: {i.message[:200]}" for i in final.issues),
                    extra={"request": self.s.ctx.name},
                )
            if tried.infra_lost and any(i.severity in ("fatal", "error") for i in final.issues):
                # What went wrong went wrong with its node (an evaluation cut off by the loss too).
                reason = reason or "error with the sandbox's node lost"
                budget = self.s.ctx.driver.max_infrastructure_losses
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
            delay = backoff_seconds(retries, ex.retry_min_delay_seconds, ex.retry_max_delay_seconds, self.s.ctx.rng)
            self._retry(final, retries + node_losses + 1, reason, delay)
            self.s.phase("retry_wait")
            await trio.sleep(delay)
            retries += 1

    def _retry(self, final: RunResult, retry: int, reason: str, delay: float, scope: str = "attempt") -> None:
        self._archive_try(final, retry, reason, delay, scope)
        self.s.ctx.emit(
            "attempt_retry",
            task_id=self.s.task.task_id,
            attempt=self.s.attempt,
            payload={"retry": retry, "reason": reason, "delay_seconds": round(delay, 3)},
        )

    @staticmethod
    def _infra_exhausted(final: RunResult, lost: int, budget: int) -> RunResult:
        """The attempt's result once its sandbox was lost with its node once more than allowed."""
        exhausted = issue(
            "fatal",
            "run",
            "infrastructure_losses_exhausted",
            f"the attempt lost its sandbox with its node {lost} time(s); at most {budget} such loss(es) "
            "run it again (runtime.cluster.max_node_losses)",
        )
        issues = [*final.issues, exhausted]
        return msgspec.structs.replace(final, issues=issues, status=status_from_issues(issues))

    def _archive_try(self, final: RunResult, retry: int, reason: str, delay: float, scope: str = "attempt") -> None:
        """Keep the discarded try (A8): a retry record, and its files under ``retries/<id>/``."""
        retries_dir = self.s.attempt_dir / "retries"
        retries_dir.mkdir(parents=True, exist_ok=True)  # rare path: a retry
        stage = next((i.phase for i in final.issues if i.severity in ("fatal", "error")), "run")
        record = {
            "schema_version": "acx.retry.v1",
            "task_id": self.s.task.task_id,
            "category": self.s.task.category,
            "attempt": self.s.attempt,
            "retry": retry,
            "max_retries": self.s.plan.execution.max_retries,
            "retry_delay_seconds": round(delay, 3),
            "stage": stage,
            "scope": scope,
            "reason": reason,
            "issues": to_builtins(final.issues),
            "discarded_result": to_builtins(final),
        }
        name = f"{task_dir_name(self.s.task.task_id)}.attempt{self.s.attempt}.retry{retry}.{stage}.json"
        atomic_write_json(retries_dir / name, self.s.ctx.scrub.tree(record), mode=PRIVATE)
        leftovers = [p for p in self.s.attempt_dir.iterdir() if p.name not in ("retries",)]
        if leftovers:
            dest = retries_dir / uuid.uuid4().hex[:12]
            dest.mkdir()
            for p in leftovers:
                p.rename(dest / p.name)

    # ---- one try -----------------------------------------------------------------------------
    async def _one_try(self, number: int) -> Try:
        t = Try(number)
        ctx, plan = self.s.ctx, self.s.plan
        ctx.emit(
            "attempt_started",
            task_id=self.s.task.task_id,
            category=self.s.task.category,
            attempt=self.s.attempt,
            payload={"try": number + 1},
        )
        mode = plan.evaluation_environment_mode
        session: Session | None = None
        started = time.monotonic()
        async with ctx.limits.provider_slot(plan.environment.id):
            try:
                image = None
                if plan.install_cache_key is not None:
                    image = await self.install.cached(t)
                if t.run_ok:  # a failed cached install opens nothing: the agent cannot run
                    session = await self.sandboxes.open(
                        t, plan.environment, "run", self.s.baseline(plan.environment), image=image
                    )
                if session is not None and plan.steps:
                    await self._run_steps(t, session)
                elif session is not None:
                    await self.stage.run(t, session)
                    if t.run_ok and plan.collect_artifacts:
                        await self.stage.collect_artifacts(t, session)
                    await self.stage.end_run_policy(t, session)
                    if t.run_ok and mode == "reuse":
                        await self.evaluation.evaluate(t, session, switch=True)
            finally:
                if session is not None:
                    await self.sandboxes.release(t, session)
        if plan.steps:  # verified step by step in the run session: nothing left to evaluate
            pass
        elif t.run_ok and t.result is not None and mode in _checkpoint.RECOVERABLE_MODES:
            await self.evaluation.save_checkpoint(t)
        if t.run_ok and t.result is not None and mode == "none":
            await self.evaluation.evaluate(t, None, switch=False)
        elif t.run_ok and t.result is not None and mode == "fresh":
            await self.evaluation.fresh(t)
        t.telemetry["wall_seconds"] = round(time.monotonic() - started, 3)
        return t

    async def _run_steps(self, t: Try, session: Session) -> None:
        """A multi-step task: each step's prepare_task, agent run and evaluation in order in this one
        session (Harbor's MultiStepTrial), the plan seen through the step's view. The benchmark
        says whether the next step runs and combines the steps' results into the attempt's."""
        whole, eval_env = self.s.plan, self.s.eval_env
        results: list[RunResult] = []
        last = len(whole.steps) - 1
        try:
            for index, step in enumerate(whole.steps):
                st = Try(t.number)
                st.installed = t.installed  # the install cache's image already holds the agent
                self.s.plan = step_view(whole, index)
                self.s.eval_env = self._step_eval_env(step, eval_env)
                self.s.record_dir = self.s.attempt_dir / "steps" / _step_dir_name(step.name)
                self.s.ctx.emit(
                    "step_started",
                    task_id=self.s.task.task_id,
                    attempt=self.s.attempt,
                    payload={"step": step.name, "index": index + 1, "of": last + 1},
                )
                await self.stage.run(st, session)
                if st.run_ok and self.s.plan.collect_artifacts:  # after the step's agent, before its verifier
                    await self.stage.collect_artifacts(st, session, self.s.record_dir)
                await self.stage.end_run_policy(st, session)
                if st.run_ok and st.result is not None:
                    await self.evaluation.evaluate(st, session, switch=True)
                if t.prepared is None:
                    t.prepared = st.prepared
                results.append(self.s.final(st))
                if index < last and not self.s.ctx.benchmark.step_continues(self.s.task, self.s.plan, results[-1]):
                    break
        finally:
            self.s.plan, self.s.eval_env, self.s.record_dir = whole, eval_env, None
        t.prepared = t.prepared or PreparedTask(task_id=self.s.task.task_id, category=self.s.task.category)
        t.result = t.evaluated = self.s.ctx.benchmark.combine_steps(self.s.task, whole, results)

    def _step_eval_env(self, step: StepPlan, task_env: dict[str, str]) -> dict[str, str]:
        """A step's own verifier variables (resolved right before use, V1), else the task's."""
        if step.evaluation_env_variables is None:
            return task_env
        resolved = resolve_map(step.evaluation_env_variables, self.s.ctx.environ)
        self.s.ctx.scrub.add(resolved, raw=step.evaluation_env_variables, environ=self.s.ctx.environ)
        return resolved


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
