"""``oracle``: runs a Harbor task's reference solution (``solution/solve.sh``) as the agent.

The solution directory is uploaded to ``/solution`` in the sandbox and ``bash
/solution/<script>`` runs in the task workdir under the run budget T, with the run scope's
variables. In a multi-step task, a step with its own ``steps/<name>/solution/`` runs its
``solve.sh``; the others run the task's. It needs a driver with an isolated filesystem (Harbor
tasks are refused on ``host_process`` at planning).
"""

from __future__ import annotations

import posixpath
import time
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec

from acx.components._base import BaseHarness
from acx.components._configs import HarnessConfig
from acx.components._context import HarnessContext
from acx.components.harnesses._common import agent_exit_issues
from acx.ir import ExecutionIssue, RunResult

__all__ = ["OracleHarness", "OracleHarnessConfig"]

SOLUTION_DIR = "/solution"


class OracleHarnessConfig(HarnessConfig, frozen=True, kw_only=True):
    """Runs a Harbor task's `solution/solve.sh`."""

    solve_script: Annotated[str, msgspec.Meta(description="path of the solution script inside the task dir")] = (
        "solution/solve.sh"
    )


class OracleHarness(BaseHarness):
    id: ClassVar[str] = "oracle"
    description: ClassVar[str] = "Runs a Harbor task's solution/solve.sh (reference solution)."
    config_class = OracleHarnessConfig

    config: OracleHarnessConfig

    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        session, prepared, plan = ctx.session, ctx.prepared, ctx.plan
        assert session is not None
        task_dir = prepared.metadata.get("task_dir")
        if not task_dir:
            return RunResult(
                task_id=prepared.task_id,
                issues=[
                    ExecutionIssue(
                        severity="fatal",
                        phase="setup",
                        code="input_missing",
                        message="the oracle harness needs a Harbor task (no task_dir in the prepared task)",
                    )
                ],
            )
        # A multi-step task's step with a solution/ of its own runs that one (Harbor's OracleAgent).
        script = Path(task_dir) / (prepared.metadata.get("solve_script") or self.config.solve_script)
        if not script.is_file():
            return RunResult(
                task_id=prepared.task_id,
                issues=[
                    ExecutionIssue(
                        severity="fatal",
                        phase="setup",
                        code="input_missing",
                        message="the task has no solution script "
                        f"{prepared.metadata.get('solve_script') or self.config.solve_script}",
                    )
                ],
            )
        local_dir = script.parent
        await session.upload_dir(str(local_dir), SOLUTION_DIR)
        remote = posixpath.join(SOLUTION_DIR, script.name)
        started = time.monotonic()
        res = await session.exec(["bash", remote], timeout=plan.run_timeout_seconds)
        telemetry = {"returncode": res.returncode, "duration_seconds": round(time.monotonic() - started, 3)}
        issues = agent_exit_issues(res, "solve.sh", plan.run_timeout_seconds, telemetry)
        return RunResult(task_id=prepared.task_id, final_answer=None, issues=issues, telemetry=telemetry)
