"""A try's evaluation: in the run sandbox (``reuse``, under the evaluation policy), without one
(``none``), or in a fresh sandbox with the collected artifacts restored (``fresh``); under
``evaluation_timeout_seconds``, the judge's model calls in a gateway session of their own. Also the
evaluation checkpoint written before it (A9)."""

from __future__ import annotations

import msgspec

from acx.drivers import Session
from acx.errors import DriverError
from acx.interpreter import _checkpoint
from acx.interpreter._attempt_state import Abort, AttemptState, Try, deadline, nullscope, user_scope
from acx.interpreter._envvars import resolve_map
from acx.interpreter._fs import atomic_write_json
from acx.interpreter._models import session_scope
from acx.interpreter._sandbox import Sandboxes
from acx.ir import EnvironmentSpec, NetworkPolicy, to_builtins

__all__ = ["Evaluation"]


class Evaluation:
    """Evaluates one try (a multi-step task: one step) by its plan's evaluation mode."""

    def __init__(self, state: AttemptState, sandboxes: Sandboxes) -> None:
        self.s = state
        self.sandboxes = sandboxes

    async def evaluate(self, t: Try, session: Session | None, *, switch: bool) -> None:
        ctx, plan = self.s.ctx, self.s.plan
        assert t.result is not None and t.prepared is not None
        current = self.s.baseline(plan.environment)
        if switch and session is not None:
            try:
                current = await self.sandboxes.switch(t, session, plan.evaluation_network_policy, current, "evaluate")
            except Abort:
                return
        self.s.phase("evaluate")
        budget = plan.evaluation_timeout_seconds
        scope_cm = session.env_scope(self.s.eval_env) if session is not None else nullscope()
        user_cm = user_scope(session, plan.evaluation_user)
        # Scorers that grade with the run's models (model_graded's `grader` role) call through the
        # gateway in a session of their own: the agent's per-attempt limits are not spent on them.
        judge = ctx.models.open(self.s.task.task_id, self.s.attempt, t.number, "evaluate") if ctx.models else None
        with deadline(budget) as scope, scope_cm, user_cm, session_scope(judge):
            try:
                t.evaluated = await ctx.benchmark.evaluate(
                    self.s.task, t.prepared, t.result, ctx.request, plan, session
                )
            except Exception as exc:
                severity = "fatal" if isinstance(exc, DriverError) else "error"
                t.add(
                    severity,
                    "evaluate",
                    self.s.code(exc, "environment_failed") if severity == "fatal" else "evaluate_failed",
                    self.s.msg(exc),
                )
        if judge is not None:
            judge.close()
            if judge.calls:  # the gateway's own record of the grading calls (attempts, timing, usage)
                record_dir = self.s.record_dir or self.s.attempt_dir
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
                await self.sandboxes.switch(t, session, self.s.baseline(plan.environment), current, "cleanup")
            except Abort:
                pass

    async def fresh(self, t: Try) -> None:
        plan = self.s.plan
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
            resolve_map(env.evaluation_environment_env_variables, self.s.ctx.environ)
            if env.evaluation_environment_env_variables is not None
            else resolve_map(env.env_variables, self.s.ctx.environ)
        )
        self.s.ctx.scrub.add(
            startup,
            raw=env.evaluation_environment_env_variables
            if env.evaluation_environment_env_variables is not None
            else env.env_variables,
            environ=self.s.ctx.environ,
        )
        baseline = env.evaluation_baseline_network_policy or self.s.baseline(env)
        async with self.s.ctx.limits.provider_slot(env.id):
            session = await self.sandboxes.open(t, env, "evaluate", baseline, startup)
            if session is None:
                return
            try:
                try:
                    from acx.interpreter import _artifacts
                except ImportError:
                    _artifacts = None  # type: ignore[assignment]
                if _artifacts is not None and plan.collect_artifacts:
                    self.s.phase("restore_artifacts")
                    restored = await _artifacts.restore(session, plan, self.s.attempt_dir)
                    t.issues.extend(restored)
                    if any(i.severity in ("fatal", "error") for i in restored):
                        return
                await self._fresh_in(t, session, env, baseline)
            finally:
                await self.sandboxes.release(t, session)

    async def _fresh_in(self, t: Try, session: Session, env: EnvironmentSpec, baseline: NetworkPolicy) -> None:
        plan = self.s.plan
        try:
            current = await self.sandboxes.switch(t, session, plan.evaluation_network_policy, baseline, "evaluate")
        except Abort:
            return
        await self.evaluate(t, session, switch=False)
        try:
            await self.sandboxes.switch(t, session, baseline, current, "cleanup")
        except Abort:
            pass

    async def save_checkpoint(self, t: Try) -> None:
        """The evaluation checkpoint (A9): written once, before evaluation, so a failed scoring
        never changes it. Not written when declared artifacts left no manifest (nothing to verify
        a recovery against). Failing to write it costs only the recovery: a warning."""
        result, prepared = t.result, t.prepared
        assert result is not None and prepared is not None
        if self.s.plan.collect_artifacts and not t.artifacts.get("manifest"):
            return
        self.s.phase("save_evaluation_checkpoint")
        ctx = self.s.ctx
        attempt_dir = self.s.attempt_dir
        issues = to_builtins(t.issues)  # as of now: the try goes on to add the evaluation's

        def save() -> None:
            data = _checkpoint.build(
                run_id=ctx.store.run_id,
                task=self.s.task,
                attempt=self.s.attempt,
                plan=self.s.plan,
                result=result,
                prepared=prepared,
                artifacts=t.artifacts,
                attempt_dir=attempt_dir,
                inputs=_checkpoint.fingerprints(ctx.benchmark, self.s.task, ctx.request.benchmark),
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
            t.add("warning", "collect", "checkpoint_failed", f"evaluation checkpoint not written: {self.s.msg(exc)}")
