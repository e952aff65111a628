"""What the command-running harnesses share: turning an agent command's ExecResult into issues."""

from __future__ import annotations

from typing import Any

from acx.ir import ExecutionIssue

__all__ = ["agent_exit_issues", "tail"]


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
