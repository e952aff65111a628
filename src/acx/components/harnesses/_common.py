"""What the command-running harnesses share: turning an agent command's ExecResult into issues."""

from __future__ import annotations

from typing import Any

from acx.ir import ExecutionIssue

__all__ = ["agent_exit_issues", "has_agent_model", "tail"]


def has_agent_model(model: Any) -> bool:
    """True when ``model`` (a request's ``ModelSpec``) gives the ``agent`` role a model: the
    top-level model (``model.id``/``model.base_url``) or ``model.roles.agent``. The same rule as
    :func:`acx.models.roles_for` (which refuses an incomplete one, E0471) and the compiler's E0306,
    so a harness never refuses per task what the compiler accepted."""
    return bool(model.id or model.base_url or "agent" in model.roles)


def tail(text: str, n: int = 800) -> str:
    """The last ``n`` characters of ``text`` (stderr excerpts in issue messages)."""
    return text if len(text) <= n else "…" + text[-n:]


def agent_exit_issues(res: Any, what: str, budget: float | None, telemetry: dict[str, Any]) -> list[ExecutionIssue]:
    """A timeout (``harness_timeout``) or a non-zero exit (``agent_exit_nonzero``) of the agent
    command ``what`` as run-phase error issues; marks ``telemetry["timed_out"]``."""
    if res.timed_out:
        telemetry["timed_out"] = True
        return [
            ExecutionIssue(
                severity="error",
                phase="run",
                code="harness_timeout",
                message=f"{what} exceeded its budget of {budget} s",
            )
        ]
    if res.returncode != 0:
        return [
            ExecutionIssue(
                severity="error",
                phase="run",
                code="agent_exit_nonzero",
                message=f"{what} exited with {res.returncode}: {tail(res.stderr)}",
            )
        ]
    return []
