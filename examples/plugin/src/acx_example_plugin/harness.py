"""``word_counter``: answers by running a counting command in the task's sandbox."""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec

from acx.components import BaseHarness, HarnessConfig, HarnessContext
from acx.ir import ExecutionIssue, RunResult


class WordCounterConfig(HarnessConfig, frozen=True, kw_only=True):
    """Params of ``word_counter``."""

    command: Annotated[str, msgspec.Meta(description="shell command that counts words on stdin")] = "wc -w"


class WordCounterHarness(BaseHarness):
    """Pipes the prompt into a counting command inside the sandbox; its stdout is the answer."""

    description: ClassVar[str] = "Counts words with a shell command in the sandbox (example plugin)."
    config_class = WordCounterConfig
    parallel_attempts_safe: ClassVar[bool] = True

    config: WordCounterConfig

    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        session, prepared, plan = ctx.session, ctx.prepared, ctx.plan
        assert session is not None
        res = await session.exec(
            self.config.command, shell=True, stdin=prepared.input.prompt.encode(), timeout=plan.run_timeout_seconds
        )
        issues = []
        if not res.ok:
            issues.append(
                ExecutionIssue(
                    severity="error",
                    phase="run",
                    code="agent_failed",
                    message=f"`{self.config.command}` exited with {res.returncode}",
                )
            )
        return RunResult(
            task_id=prepared.task_id,
            attempt=plan.attempt,
            category=prepared.category,
            final_answer=res.stdout.strip(),
            issues=issues,
        )
