"""Evaluation-only recovery (A9): an attempt evaluated from its checkpoint (``--resume``,
``--reuse``, ``acx regrade``) — no sandbox for the agent, no harness, no agent command — or why its
checkpoint was refused (then the attempt runs again, or under ``--recovery strict`` never)."""

from __future__ import annotations

import logging
import time

import msgspec

from acx.interpreter import _checkpoint
from acx.interpreter._attempt_state import AttemptState, Try, issue
from acx.interpreter._evaluation import Evaluation
from acx.interpreter._store import read_json
from acx.ir import ExecutionIssue, RunResult, status_from_issues

__all__ = ["AttemptRecovery"]

log = logging.getLogger("acx.interpreter")


class AttemptRecovery:
    """Finds and checks one attempt's evaluation checkpoint, and evaluates from it."""

    def __init__(self, state: AttemptState, evaluation: Evaluation) -> None:
        self.s = state
        self.evaluation = evaluation
        #: Set by :meth:`find`: the checkpoint to evaluate from, or why there is none.
        self.checkpoint: _checkpoint.Recovery | None = None
        self.refused: str | None = None

    def find(self) -> bool:
        """Look for this attempt's checkpoint in the request's recovery source and check it; True
        when the attempt will be evaluated from it (its directory must then be left as it is)."""
        policy = self.s.ctx.recovery
        if policy is None:
            return False
        key = (self.s.task.task_id, self.s.attempt)
        path = _checkpoint.find(policy.source, *key)
        # Only an evaluation that failed or never ran is redone from a checkpoint; an attempt left
        # out of a reuse for another reason (corrupt artifacts, a retry) runs again.
        evaluated = path is not None and (path.parent / "result.json").exists()
        if evaluated and not policy.no_agent and key not in policy.eval_failed:
            path = None
        if path is None:
            if key in policy.eval_failed:
                mode = self.s.plan.evaluation_environment_mode
                self.refused = (
                    f"evaluation mode {mode!r} evaluates in the run sandbox, which is gone: the attempt reruns"
                    if mode not in _checkpoint.RECOVERABLE_MODES
                    else "its evaluation failed and it has no evaluation checkpoint: the attempt reruns"
                )
            elif policy.no_agent:
                mode = self.s.plan.evaluation_environment_mode
                self.refused = (
                    # Say why: a reuse-mode attempt completed its agent phase but never gets one.
                    f"no evaluation checkpoint: evaluation mode {mode!r} evaluates in the run sandbox, "
                    "which is gone (only none/fresh attempts are recoverable)"
                    if mode not in _checkpoint.RECOVERABLE_MODES
                    else "no evaluation checkpoint (the agent phase did not complete, or the run predates them)"
                )
            return False
        inputs = _checkpoint.fingerprints(self.s.ctx.benchmark, self.s.task, self.s.ctx.request.benchmark)
        outcome = _checkpoint.check(
            path,
            task=self.s.task,
            attempt=self.s.attempt,
            plan=self.s.plan,
            inputs=inputs,
            allow_evaluation_changes=policy.no_agent,
            scrub=self.s.ctx.scrub,
        )
        if isinstance(outcome, str):
            self.refused = self.s.ctx.scrub(outcome)
            log.warning(
                "task %s attempt %d: evaluation checkpoint not used: %s",
                self.s.task.task_id,
                self.s.attempt,
                self.refused,
                extra={"request": self.s.ctx.name},
            )
            return False
        self.checkpoint = outcome
        return True

    @property
    def strictly_refused(self) -> bool:
        """Refused under ``--recovery strict``: marked, never run (:meth:`strictly_refused_result`)."""
        policy = self.s.ctx.recovery
        return self.refused is not None and policy is not None and policy.strict and not policy.no_agent

    def refusal_issue(self) -> ExecutionIssue | None:
        if self.refused is None:
            return None
        if self.s.ctx.recovery is not None and self.s.ctx.recovery.no_agent:
            return issue("error", "run", "not_recoverable", f"not regraded: {self.refused}")
        return issue("warning", "setup", "checkpoint_refused", f"evaluation-only recovery refused: {self.refused}")

    async def recover(self, recovery: _checkpoint.Recovery) -> RunResult:
        """Evaluate from the checkpoint: no sandbox for the agent, no harness, no agent command."""
        t = Try(0)
        self.s.ctx.emit(
            "attempt_started",
            task_id=self.s.task.task_id,
            category=self.s.task.category,
            attempt=self.s.attempt,
            payload={"try": 1, "recovered": True},
        )
        self.s.phase("recover_evaluation")
        started = time.monotonic()
        try:
            _checkpoint.restore_into(recovery, self.s.attempt_dir)
            data = read_json(self.s.attempt_dir / _checkpoint.CHECKPOINT_NAME)
        except (OSError, ValueError) as exc:  # the copy from the source run failed (disk, permissions)
            t.add("error", "evaluate", "evaluation_setup_failed", f"cannot restore the checkpoint: {self.s.msg(exc)}")
            return self.s.final(t)
        t.result, t.prepared = recovery.result, recovery.prepared
        recorded = data.get("artifacts") or {}
        if recorded.get("declared_artifacts") is not None:
            t.artifacts["declared_artifacts"] = recorded["declared_artifacts"]
        if recorded.get("manifest"):
            t.artifacts["manifest"] = recorded["manifest"]["name"]
        t.issues.extend(msgspec.convert(data.get("run_issues") or [], list[ExecutionIssue]))
        policy = self.s.ctx.recovery
        t.telemetry["recovered_from"] = {
            "run_id": data.get("source_run_id"),
            "kind": policy.kind if policy is not None else "resume",
            "changed_evaluation_inputs": list(recovery.changed),
        }
        log.info(
            "task %s attempt %d: run stage restored from checkpoint (%s)",
            self.s.task.task_id,
            self.s.attempt,
            data.get("source_run_id"),
            extra={"request": self.s.ctx.name},
        )
        async with self.s.ctx.limits.attempts:
            if self.s.plan.evaluation_environment_mode == "fresh":
                await self.evaluation.fresh(t)
            else:
                await self.evaluation.evaluate(t, None, switch=False)
        t.telemetry["wall_seconds"] = round(time.monotonic() - started, 3)
        return self.s.final(t)

    def say_refused(self, *, strict: bool) -> None:
        self.s.ctx.emit(
            "recovery_refused",
            task_id=self.s.task.task_id,
            category=self.s.task.category,
            attempt=self.s.attempt,
            payload={"reason": self.refused, "strict": strict},
        )

    def strictly_refused_result(self) -> RunResult:
        """``--recovery strict``: the refusal is the attempt's result (``eval_error``, so a later
        ``--resume`` picks it up again); the agent is not paid for twice."""
        assert self.refused is not None
        message = (
            f"evaluation-only recovery refused (--recovery strict): {self.refused}; the agent was not run "
            "again — restore the changed input, or resume with --recovery rerun to run the agent again"
        )
        refusal = issue("error", "evaluate", "recovery_refused", message)
        self.say_refused(strict=True)
        return RunResult(
            task_id=self.s.task.task_id,
            attempt=self.s.attempt,
            category=self.s.task.category,
            issues=[refusal],
            status=status_from_issues([refusal]),
        )

    def unrecoverable(self) -> RunResult:
        """acx regrade: an attempt without a usable checkpoint is recorded, never run."""
        refusal = self.refusal_issue() or issue("error", "run", "not_recoverable", "not regraded")
        return RunResult(
            task_id=self.s.task.task_id,
            attempt=self.s.attempt,
            category=self.s.task.category,
            issues=[refusal],
            status=status_from_issues([refusal]),
        )
