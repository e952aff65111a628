"""The one object a harness receives at run time: :class:`HarnessContext`.

It replaces the five positional arguments harnesses used to get (state, session, prepared task,
request, plan) and adds what an agent needs to behave well under a budget: the deadline of its
run stage (so it always knows how much time it has left), the attempt's model access through the
run's gateway, and an event emitter for progress events. Built by the interpreter per attempt
try; harness authors never construct one except in tests (``HarnessContext.for_test``).

No trio import at module level (plan-time code imports this module): the clock is read inside
the methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acx.ir import ExecutionPlan, PreparedTask, RunRequest, TaskSpec

if TYPE_CHECKING:
    from acx.drivers import Session

__all__ = ["HarnessContext"]


def _no_events(event: str, payload: dict[str, Any]) -> None:
    return None


@dataclass
class HarnessContext:
    """Everything a harness's run-time methods get (see ``BaseHarness``).

    ``deadline`` is on trio's clock (``trio.current_time()``), ``None`` when the run stage has no
    budget. ``remaining()`` is what is left of it; harnesses clip every command they run to it so a
    command never outlives the stage (T3). ``models`` is the attempt's gateway session
    (``acx.models.GatewaySession``) or ``None`` when the run has no model.
    """

    session: Session | None
    prepared: PreparedTask
    request: RunRequest
    plan: ExecutionPlan
    task: TaskSpec | None = None
    attempt: int = 1
    deadline: float | None = None
    models: Any = None
    #: ``emit(event, payload)``: a progress event of this attempt (``harness_event`` in progress.jsonl).
    emit: Callable[[str, dict[str, Any]], None] = field(default=_no_events)
    #: What ``start_session`` returned; handed back to the later methods.
    state: Any = None
    #: ``install_agent`` runs for the install cache: in a throwaway sandbox whose file system
    #: becomes the image of every attempt with the same cache key, so nothing task-specific
    #: (``ACX_TASK_ID``) may go into it.
    install_layer: bool = False

    @property
    def task_id(self) -> str:
        return self.prepared.task_id

    def remaining(self) -> float | None:
        """Seconds left of the run stage's budget (never negative); ``None`` = no budget."""
        if self.deadline is None:
            return None
        import trio

        return max(0.0, self.deadline - trio.current_time())

    def clip(self, seconds: float | None) -> float | None:
        """``seconds`` clipped to the remaining budget (``None`` = no limit of its own)."""
        left = self.remaining()
        if left is None:
            return seconds
        if seconds is None:
            return left
        return min(seconds, left)

    @classmethod
    def for_test(
        cls,
        session: Session | None,
        prepared: PreparedTask,
        request: RunRequest,
        plan: ExecutionPlan,
        *,
        budget: float | None = None,
        models: Any = None,
    ) -> HarnessContext:
        """A context outside the interpreter (unit tests, plugin authors' tests); the deadline is
        ``budget`` seconds from now on trio's clock, so call it inside ``trio.run``."""
        deadline = None
        if budget is not None:
            import trio

            deadline = trio.current_time() + budget
        return cls(session=session, prepared=prepared, request=request, plan=plan, deadline=deadline, models=models)
