"""The run stage of a try: ``prepare_task`` and the run policy, the agent's install (in its
sandbox, or the driver's install cache), the harness under its watchdog (``T + compensation``) or a
harness-free ``run_task`` under ``T``, the harness's result collected, the artifacts collected
(still under the run policy, A5)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from acx.components import BaseHarness, HarnessContext
from acx.drivers import Session
from acx.errors import DriverError
from acx.interpreter._attempt_state import Abort, AttemptState, Try, deadline, user_scope
from acx.interpreter._keyed import keyed_digest
from acx.interpreter._models import merge_into_result, session_scope
from acx.interpreter._sandbox import Sandboxes
from acx.ir import ExecutionIssue, PreparedTask, RunResult

__all__ = ["AgentInstall", "RunStage"]


class AgentInstall:
    """The ``install_agent`` phase: in the attempt's run sandbox, or once per install key into
    the image the driver caches (``plan.install_cache_key``)."""

    def __init__(self, state: AttemptState, sandboxes: Sandboxes) -> None:
        self.s = state
        self.sandboxes = sandboxes

    async def in_sandbox(self, t: Try, session: Session, hctx: HarnessContext) -> bool:
        """The ``install_agent`` phase: its own budget B from the plan (the harness clips its
        commands to ``hctx.deadline``, killing them in the sandbox at B); the watchdog adds the
        run's timer compensation for a harness that overruns it. False = the agent must not run."""
        plan = self.s.plan
        budget = plan.install_timeout_seconds
        assert budget is not None
        self.s.phase("install_agent")
        watchdog = budget + plan.run_timer_compensation_seconds
        hctx.deadline = trio.current_time() + budget
        issues: list[ExecutionIssue] = []
        with (
            trio.move_on_after(watchdog) as scope,
            session.env_scope(self.s.run_env),
            user_scope(session, plan.run_user),
        ):
            try:
                issues = await self.s.ctx.harness.install_agent(hctx)
            except Exception as exc:
                t.add("fatal", "setup", self.s.code(exc, "install_failed"), self.s.msg(exc))
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

    async def cached(self, t: Try) -> str | None:
        """The install cache (``plan.install_cache_key``): the image with the agent installed, from
        the driver (``Driver.cached_install``: built once per key, under the run stage's network
        policy, user and variables). None when the driver cannot cache after all (a warning; the
        attempt installs in its own sandbox) or the install failed (its issues; nothing runs)."""
        ctx, plan = self.s.ctx, self.s.plan
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
        self.s.phase("install_agent")
        key = await self._key()
        baseline = self.s.baseline(plan.environment)
        req = self.sandboxes.request(plan.environment, "run", plan.run_network_policy or baseline, self.s.public_env)

        async def install(session: Session) -> bool:
            hctx = self.s.harness_context(PreparedTask(task_id=self.s.task.task_id), session, None)
            hctx.install_layer = True
            return await self.in_sandbox(t, session, hctx)

        started = time.monotonic()
        budget = plan.environment.setup.build_timeout_seconds
        try:
            got = await ctx.driver.cached_install(req, key, install)
        except trio.TooSlowError:
            t.add("fatal", "setup", "environment_timeout", f"opening the install sandbox exceeded {budget} s")
            return None
        except Exception as exc:
            t.add("fatal", "setup", self.s.code(exc, "install_failed"), self.s.msg(exc))
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
            ctx.emit("harness_event", task_id=self.s.task.task_id, attempt=self.s.attempt, payload=payload)
        return got.image

    async def _key(self) -> str:
        """The plan's install key with what only the run knows: the uploads' content (hashed in a
        worker thread), the values of the variables the install sees, and its user."""
        plan = self.s.plan
        content = await trio.to_thread.run_sync(self.s.ctx.harness.install_content_key)
        data = msgspec.json.encode(
            {
                "plan": plan.install_cache_key,
                "content": content,
                "run_env": self.s.run_env,
                "public_env": self.s.public_env,
                "user": plan.run_user,
            },
            order="sorted",
        )
        # Keyed: the variables' values may be secrets, and the key is written to result.json and
        # an image tag (acx.interpreter._keyed says why a plain hash is not enough).
        return keyed_digest(data)


class RunStage:
    """Runs the run stage of one try in its run sandbox (a multi-step task: of one step)."""

    def __init__(self, state: AttemptState, sandboxes: Sandboxes, install: AgentInstall) -> None:
        self.s = state
        self.sandboxes = sandboxes
        self.install = install

    async def run(self, t: Try, session: Session) -> None:
        ctx, plan, task = self.s.ctx, self.s.plan, self.s.task
        req = ctx.request
        self.s.phase("prepare_task")
        try:
            t.prepared = await ctx.benchmark.prepare_task(task, session, req, plan)
        except Exception as exc:
            code = self.s.code(exc, "environment_failed") if isinstance(exc, DriverError) else "setup_failed"
            t.add("fatal", "setup", code, self.s.msg(exc))
            return
        baseline = self.s.baseline(plan.environment)
        try:
            t.net = await self.sandboxes.switch(t, session, plan.run_network_policy, baseline, "setup")
        except Abort:
            return
        T = plan.run_timeout_seconds
        if ctx.benchmark.harness_free:
            await self._harness_free(t, session, T)
        else:
            await self._harness(t, session, T)

    async def end_run_policy(self, t: Try, session: Session) -> None:
        """Back to the baseline policy — after artifact collection, which (with anything the agent
        left running) stays under the run stage's policy (A5)."""
        if t.net is None:
            return
        try:
            await self.sandboxes.switch(t, session, self.s.baseline(self.s.plan.environment), t.net, "cleanup")
        except Abort:
            pass
        t.net = None

    async def _harness_free(self, t: Try, session: Session, T: float | None) -> None:
        ctx = self.s.ctx
        assert t.prepared is not None
        self.s.phase("run_task")
        with deadline(T) as scope, session.env_scope(self.s.run_env), user_scope(session, self.s.plan.run_user):
            try:
                t.result = await ctx.benchmark.run_task(self.s.task, t.prepared, ctx.request, self.s.plan, session)
            except Exception as exc:
                t.add("fatal", "run", "run_failed", self.s.msg(exc))
        if scope.cancelled_caught:
            t.telemetry["timed_out"] = True
            t.add("error", "run", "run_timeout", f"run_task exceeded its budget of {T} s")
            t.result = t.result or RunResult(task_id=self.s.task.task_id)
        if t.result is not None and any(i.severity == "fatal" for i in t.result.issues):
            t.run_ok = False  # a FATAL issue of the run stage skips evaluation (docs/running.md)

    async def _harness(self, t: Try, session: Session, T: float | None) -> None:
        ctx, plan = self.s.ctx, self.s.plan
        harness = ctx.harness
        assert t.prepared is not None
        models = ctx.models.open(self.s.task.task_id, self.s.attempt, t.number) if ctx.models is not None else None
        hctx = self.s.harness_context(t.prepared, session, models)
        self.s.phase("start_harness")
        try:
            hctx.state = await harness.start_session(hctx)
        except Exception as exc:
            t.add("fatal", "setup", "harness_setup_failed", self.s.msg(exc))
            if models is not None:
                models.close()
            return
        partial: RunResult | None = None
        watchdog = None if T is None else T + plan.run_timer_compensation_seconds
        try:
            if plan.install_timeout_seconds is not None and not t.installed:
                t.telemetry["install_cached"] = False
                if not await self.install.in_sandbox(t, session, hctx):
                    return  # a fatal install issue: the agent never runs (close_session still does)
            self.s.phase("run_harness")
            # The agent's own budget is T from now (its deadline); the watchdog adds the
            # compensation for a harness that overruns it.
            hctx.deadline = None if T is None else trio.current_time() + T
            with (
                deadline(watchdog) as scope,
                session.env_scope(self.s.run_env),
                user_scope(session, plan.run_user),
                session_scope(models),
            ):
                try:
                    partial = await harness.execute_task(hctx)
                except Exception as exc:  # a sandbox that died keeps its own code (sandbox_stopped)
                    t.add("fatal", "run", self.s.code(exc, "harness_failed"), self.s.msg(exc))
            if scope.cancelled_caught:
                t.telemetry["timed_out"] = True
                t.add(
                    "error",
                    "run",
                    "run_timeout",
                    f"harness exceeded its watchdog of {watchdog} s (T={T} + compensation)",
                )
            # Saved output is collected even after a timeout, with public vars only, unscaled budget.
            self.s.phase("collect_harness_result")
            # A harness without its own collect_result or close_session needs no deadline for it
            # (the base ones return at once): two cancel scopes fewer per attempt.
            if _overrides(harness, "collect_result"):
                with trio.move_on_after(plan.runresult_collect_timeout_seconds) as cscope:
                    try:
                        partial = await harness.collect_result(hctx, partial)
                    except Exception as exc:
                        t.add("fatal", "collect", "collect_failed", self.s.msg(exc))
                if cscope.cancelled_caught:
                    t.add(
                        "error",
                        "collect",
                        "collect_timeout",
                        f"collecting the harness result exceeded {plan.runresult_collect_timeout_seconds} s",
                    )
        finally:
            if _overrides(harness, "close_session"):
                with trio.CancelScope(shield=True, deadline=trio.current_time() + self.s.ctx.grace):
                    try:
                        await harness.close_session(hctx)
                    except Exception as exc:
                        t.add("warning", "cleanup", "harness_cleanup_failed", self.s.msg(exc))
            if models is not None:
                models.close()  # its tokens die with the harness: nothing in the sandbox can call on
        # An empty answer is the benchmark's to judge, not an infrastructure error.
        t.result = partial or RunResult(task_id=self.s.task.task_id)
        if any(i.severity == "fatal" for i in t.result.issues):
            # A harness that reports a FATAL issue itself (e.g. the oracle of a task with no
            # solution) ran nothing worth grading: like a raised one, it skips evaluation.
            t.run_ok = False
        if models is not None:
            t.result, t.transcript_sha256 = await merge_into_result(
                t.result, models, self.s.record_dir or self.s.attempt_dir, ctx.scrub
            )

    async def collect_artifacts(self, t: Try, session: Session, into: Path | None = None) -> None:
        """Into the attempt's directory (``into``: a multi-step task's step directory)."""
        try:
            from acx.interpreter import _artifacts  # written by the docker engineer
        except ImportError:
            return
        self.s.phase("collect_artifacts")
        target = into or self.s.attempt_dir
        try:
            target.mkdir(parents=True, exist_ok=True)
            outcome = await _artifacts.collect(session, self.s.plan, target, scrub=self.s.ctx.scrub)
        except Exception as exc:
            t.add("fatal", "collect", "artifact_transfer_failed", self.s.msg(exc))
            return
        t.issues.extend(outcome.issues)
        if outcome.blocks_evaluation:  # A6: a failed preparation or transfer is never evaluated
            t.run_ok = False
        t.artifacts["declared_artifacts"] = outcome.declared_artifacts
        if outcome.manifest_path is not None:
            t.artifacts["manifest"] = str(Path(outcome.manifest_path).name)


def _overrides(harness: Any, name: str) -> bool:
    """Whether ``harness`` has its own ``name`` hook (not :class:`BaseHarness`'s no-op)."""
    return getattr(type(harness), name, None) is not getattr(BaseHarness, name)
