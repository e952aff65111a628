"""What the parts of an attempt share: the request's context, the attempt's state (its task, its
plan — a multi-step task's step view while a step runs — and resolved variables), one try's
mutable record, and the scopes the phases run in."""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from acx.components import HarnessContext
from acx.drivers import Driver, Session
from acx.errors import AcxRuntimeError
from acx.interpreter._envvars import resolve_map
from acx.interpreter._events import ProgressEvent
from acx.interpreter._limits import Limits
from acx.interpreter._metrics import validate_observations
from acx.interpreter._store import RunStore
from acx.ir import (
    EnvironmentSpec,
    ExecutionIssue,
    ExecutionPlan,
    NetworkPolicy,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskSpec,
    status_from_issues,
)
from acx.secrets import Scrubber

__all__ = [
    "Abort",
    "AttemptState",
    "RequestContext",
    "Try",
    "deadline",
    "issue",
    "nullscope",
    "user_scope",
]

_PUBLIC = NetworkPolicy()


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


def issue(severity: str, phase: str, code: str, message: str = "") -> ExecutionIssue:
    return ExecutionIssue(severity=severity, phase=phase, code=code, message=message[:2000])  # type: ignore[arg-type]


@dataclass
class Try:
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
        self.issues.append(issue(severity, phase, code, message))
        if severity == "fatal":
            self.run_ok = False


class AttemptState:
    """One logical attempt as its parts see it. ``plan``, ``eval_env`` and ``record_dir`` are a
    step's while a step of a multi-step task runs: the parts read them at use, never keep them."""

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

    def msg(self, exc: BaseException) -> str:
        text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        help = getattr(exc, "fields", {}).get("help") if isinstance(exc, AcxRuntimeError) else None
        if help:  # what to do, as the driver said it (e.g. how to build a missing image)
            text = f"{text} (help: {help})"
        return self.ctx.scrub(f"{type(exc).__name__}: {text}")

    @staticmethod
    def code(exc: BaseException, default: str) -> str:
        """A driver's own issue code (``image_not_found``, ``environment_no_image``) over the
        generic one; the generic ``runtime_failed``/``environment_failed`` defaults add nothing."""
        code = getattr(exc, "code", None) if isinstance(exc, AcxRuntimeError) else None
        return code if isinstance(code, str) and code not in ("runtime_failed", "environment_failed") else default

    # ---- what the phases share ---------------------------------------------------------------
    def baseline(self, env: EnvironmentSpec) -> NetworkPolicy:
        return env.baseline_network_policy or _PUBLIC

    def final(self, t: Try) -> RunResult:
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

    def harness_context(self, prepared: PreparedTask, session: Session, models: Any) -> HarnessContext:
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


class Abort(Exception):
    """A phase recorded a fatal issue; skip the rest of the stage."""


class nullscope:
    cancelled_caught = False

    def __enter__(self) -> nullscope:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def deadline(seconds: float | None) -> Any:
    """A cancel scope with a relative deadline; None = no deadline (T1): then no scope at all (a
    scope without a deadline would catch nothing), only its ``cancelled_caught = False``."""
    if seconds is None or not math.isfinite(seconds):
        return nullscope()
    return trio.move_on_after(seconds)


def user_scope(session: Session | None, user: str | None) -> Any:
    """The stage user's scope (Harbor's ``[agent].user`` / ``[verifier].user``); nothing to enter
    when the plan names none (the image's default user)."""
    if session is None or user is None:
        return nullscope()
    return session.user_scope(user)
