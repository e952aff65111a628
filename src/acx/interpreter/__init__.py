"""The acx interpreter: runs a compiled program with trio against environment drivers.

Public API::

    result = trio.run(run_orchestration, orchestration, programs, environ=os.environ, ...)

``programs`` are :class:`RequestProgram` s (components, selected tasks, ``plan_attempt``, driver);
:mod:`acx.api` builds them from a spec (compile + plan) or from a compiled ``plan.json``. The result is an
:class:`OrchestrationResult` with one :class:`RequestOutcome` per request, in declaration order.
"""

from acx.interpreter._events import ProgressEvent
from acx.interpreter._host_keys import keys_kept_from_agents
from acx.interpreter._orchestrator import (
    OrchestrationResult,
    RequestOutcome,
    RequestProgram,
    plan_audit,
    preflight,
    run_orchestration,
)

__all__ = [
    "OrchestrationResult",
    "ProgressEvent",
    "RequestOutcome",
    "RequestProgram",
    "keys_kept_from_agents",
    "plan_audit",
    "preflight",
    "run_orchestration",
]
