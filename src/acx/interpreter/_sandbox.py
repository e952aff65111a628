"""An attempt's sandboxes: the driver's request for one, opening it under its budget (journaled
first, so a killed run's sandboxes are found on ``--resume``), switching its network policy, and
releasing it in a shielded scope bounded by the cleanup grace period."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import uuid

import msgspec
import trio

from acx.drivers import OpenRequest, Session
from acx.errors import AcxUserError, DriverError
from acx.interpreter._attempt_state import Abort, AttemptState, Try, nullscope
from acx.ir import EnvironmentSpec, NetworkPolicy

__all__ = ["Sandboxes"]

log = logging.getLogger("acx.interpreter")

_HOST = socket.gethostname()
_PROCESS_TOKEN = uuid.uuid4().hex[:6]
_SESSION_COUNTER = itertools.count(1)
_PID = os.getpid()


def _no_write() -> None:
    """Nothing to write: waiting for a group commit makes the earlier journal line durable."""


class Sandboxes:
    """Opens, re-polices and releases the sandboxes of one attempt."""

    def __init__(self, state: AttemptState) -> None:
        self.s = state

    def request(
        self,
        env: EnvironmentSpec,
        role: str,
        policy: NetworkPolicy,
        startup_env: dict[str, str],
        image: str | None = None,
    ) -> OpenRequest:
        """The driver's request for one sandbox; ``image`` (the install cache's derived image)
        replaces the environment's image or build."""
        ctx = self.s.ctx
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
            "acx.task": self.s.task.task_id[:63],
            "acx.attempt": str(self.s.attempt),
            "acx.session": session_id,
            "acx.role": role,
            "acx.pid": str(os.getpid()),
            "acx.host": _HOST,
        }
        if self.s.plan.execution.keep_environment:
            # Kept on purpose: garbage collection (`acx gc`, the docker orphan sweep) leaves it alone.
            labels["acx.keep"] = "true"
        build_context = self.s.task.metadata.get("environment_dir") if isinstance(self.s.task.metadata, dict) else None
        return OpenRequest(
            session_id=session_id,
            labels=labels,
            setup=env.setup if image is None else msgspec.structs.replace(env.setup, image=image),
            resources=resources or env.resources,
            network_policy=ctx.bind_policy(policy),
            startup_env=startup_env,
            build_context=build_context if image is None else None,
            state_dir=self.s.ctx.store.attempt_dir_str(self.s.task.task_id, self.s.attempt),
        )

    async def open(
        self,
        t: Try,
        env: EnvironmentSpec,
        role: str,
        policy: NetworkPolicy,
        startup_env: dict[str, str] | None = None,
        image: str | None = None,
    ) -> Session | None:
        ctx = self.s.ctx
        self.s.phase("open_environment" if role == "run" else "evaluate_environment")
        req = self.request(env, role, policy, self.s.public_env if startup_env is None else startup_env, image)
        await ctx.limits.wait_open_turn(env.id)
        # A killed run's sandboxes must be found on --resume. A driver that finds its own again
        # (host_process directories, docker labels) needs only the journal line; for any other, the
        # line is durable (a group commit) before the sandbox exists.
        store = ctx.store
        discoverable = ctx.driver.sessions_discoverable
        store.session_opened(
            req.session_id,
            {"provider": env.id, "task_id": self.s.task.task_id, "attempt": self.s.attempt, "role": role, "pid": _PID},
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
            with trio.fail_after(budget) if budget else nullscope():
                session = await ctx.driver.open(req)
        except trio.TooSlowError:
            t.add("fatal", "setup", "environment_timeout", f"environment open exceeded {budget} s")
        except AcxUserError as exc:
            t.add("fatal", "setup", "environment_unsupported", self.s.msg(exc))
        except Exception as exc:
            t.add("fatal", "setup", self.s.code(exc, "environment_failed"), self.s.msg(exc))
            if isinstance(exc, DriverError) and exc.infrastructure_lost:  # its node died while it opened
                t.infra_lost = True
            if getattr(exc, "code", None) == "release_failed":
                # The failed open could not remove what it had made (issue 11.13): a record, like a
                # failed release, for --resume and `acx results show`.
                record = {"provider": env.id, "task_id": self.s.task.task_id, "attempt": self.s.attempt}
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
        record = {"provider": self.s.plan.environment.id, "task_id": self.s.task.task_id, "attempt": self.s.attempt}
        self.s.ctx.store.record_session(session.id, {**record, "pid": _PID, "state": state})

    async def release(self, t: Try, session: Session) -> None:
        ctx = self.s.ctx
        if session.infrastructure_lost:
            t.infra_lost = True
        # One scope: shielded from the caller's cancellation, bounded by the cleanup grace period.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + ctx.grace):
            self.s.phase("release")
            if self.s.plan.execution.keep_environment:
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
                    f"environment release failed; resource record retained: {self.s.msg(exc)}",
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

    async def switch(
        self, t: Try, session: Session, policy: NetworkPolicy | None, current: NetworkPolicy, phase: str
    ) -> NetworkPolicy:
        if policy is None or policy == current:
            return current
        try:
            await session.set_network_policy(self.s.ctx.bind_policy(policy))
        except Exception as exc:
            # A sandbox lost with its infrastructure (a cluster node) keeps the driver's own code
            # (node_lost): the loss is not the policy's, and is retried as a loss.
            lost = isinstance(exc, DriverError) and exc.infrastructure_lost
            code = self.s.code(exc, "network_policy_failed") if lost else "network_policy_failed"
            t.add("fatal", phase, code, self.s.msg(exc))
            raise Abort from exc
        return policy
