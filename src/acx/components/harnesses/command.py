"""``command``: runs a configured command as the agent.

The prompt is written to ``prompt_file`` (relative to the command's cwd) and passed on stdin; the
answer is the command's stdout, or the content of ``answer_file`` when set. The command's budget
is the plan's run budget T (the command is killed in the sandbox at T; the interpreter's watchdog
is T + compensation); its cwd is ``cwd`` or the environment workdir; its variables are the run
scope's (``environment.run_env_variables``) over public ones, plus these defaults:

``ACX_TASK_ID``, ``ACX_ATTEMPT``, ``ACX_PROMPT_FILE``, ``ACX_DEADLINE_SECONDS`` (the agent is told
its budget), ``ACX_SPEC_DIR`` (the directory of the spec file, so a command can name an agent
bundled beside the spec: ``"python3 $ACX_SPEC_DIR/agents/my_agent.py"``).

When a model is configured the agent reaches it only through the run's model gateway: it gets
``OPENAI_BASE_URL``/``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY`` and
``ACX_MODEL_ID``/``ACX_MODEL_PROTOCOL``/``ACX_MODEL_BASE_URL``/``ACX_MODEL_API_KEY`` pointing at
the gateway with a per-attempt token (dead once the attempt's harness ends) — never the real base
URL or key. Under ``no-network``/``allowlist`` the planner allows exactly the gateway.
"""

from __future__ import annotations

import posixpath
import time
from typing import Any, ClassVar

from acx.components._base import BaseHarness
from acx.components._configs import CommandHarnessConfig
from acx.components._context import HarnessContext
from acx.components.harnesses._common import agent_exit_issues
from acx.errors import DriverError
from acx.ir import ExecutionIssue, RunRequest, RunResult

__all__ = ["CommandHarness", "model_env"]


def model_env(req: RunRequest, session: Any = None) -> dict[str, str]:
    """Model variables for the agent process: the gateway's URLs and the attempt's token (see the
    module docstring). Empty when the run has no model or no gateway session is active."""
    if session is None:
        from acx.models import current_session

        session = current_session()
    if session is None:
        # No gateway (no model endpoint configured): the model id alone is no secret.
        return {"ACX_MODEL_ID": req.model.id} if req.model.id else {}
    env: dict[str, str] = session.env()
    return env


class CommandHarness(BaseHarness):
    id: ClassVar[str] = "command"
    description: ClassVar[str] = (
        "Runs a configured command as the agent: prompt on stdin and in a file, answer from stdout or a file."
    )
    config_class = CommandHarnessConfig
    parallel_attempts_safe: ClassVar[bool] = True

    config: CommandHarnessConfig

    def model_location(self, req: RunRequest) -> str:
        """The agent command calls models from inside the sandbox when the ``agent`` role has an
        endpoint (``model.base_url`` or ``model.roles.agent``). Other roles alone (a ``grader``
        for the scorers) give the agent nothing: it gets no gateway token and no egress for it."""
        return "sandbox" if (req.model.base_url or "agent" in req.model.roles) else "none"

    #: Directory of the spec file (set by the CLI); exported to the command as ACX_SPEC_DIR.
    spec_dir: str | None = None

    def _path(self, name: str) -> str:
        c = self.config
        if posixpath.isabs(name) or not c.cwd:
            return name
        return posixpath.join(c.cwd, name)

    def agent_env(self, ctx: HarnessContext, models: dict[str, str]) -> dict[str, str]:
        """The agent command's variables beyond the ACX_* defaults: the model's (a subclass adds
        its own, e.g. ``installed_agent``'s definitions and aliases)."""
        return models

    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        c = self.config
        session, prepared, req, plan = ctx.session, ctx.prepared, ctx.request, ctx.plan
        assert session is not None
        prompt = prepared.input.prompt
        if prepared.input.system_prompt:
            prompt = f"{prepared.input.system_prompt}\n\n{prompt}"
        env = {
            "ACX_TASK_ID": prepared.task_id,
            "ACX_ATTEMPT": str(plan.attempt),
            **self.agent_env(ctx, model_env(req, ctx.models)),
        }
        if self.spec_dir:
            env["ACX_SPEC_DIR"] = self.spec_dir
        if plan.run_timeout_seconds is not None:
            env["ACX_DEADLINE_SECONDS"] = f"{plan.run_timeout_seconds:g}"
        if c.prompt_file:
            await session.write_text(self._path(c.prompt_file), prompt)
            env["ACX_PROMPT_FILE"] = c.prompt_file
        argv: Any = ["bash", "-c", c.command] if isinstance(c.command, str) else list(c.command)
        started = time.monotonic()
        res = await session.exec(
            argv, cwd=c.cwd, env=env, timeout=plan.run_timeout_seconds, stdin=prompt.encode("utf-8")
        )
        issues: list[ExecutionIssue] = []
        telemetry = {
            "returncode": res.returncode,
            "duration_seconds": round(time.monotonic() - started, 3),
            "stdout_bytes": len(res.stdout.encode()),
            "stderr_bytes": len(res.stderr.encode()),
            "output_truncated": res.output_truncated,
        }
        issues.extend(agent_exit_issues(res, "the agent command", plan.run_timeout_seconds, telemetry))
        answer, answer_issues = await self.read_answer(ctx, res, telemetry)
        issues.extend(answer_issues)
        if answer is not None and c.strip_output:
            answer = answer.strip()
        return RunResult(task_id=prepared.task_id, final_answer=answer, issues=issues, telemetry=telemetry)

    async def read_answer(
        self, ctx: HarnessContext, res: Any, telemetry: dict[str, Any]
    ) -> tuple[str | None, list[ExecutionIssue]]:
        """The agent's answer (before ``strip_output``) and the issues of reading it: stdout, or
        ``answer_file`` when set (``installed_agent`` adds its ``answer`` extractor)."""
        c = self.config
        session = ctx.session
        assert session is not None
        issues: list[ExecutionIssue] = []
        answer: str | None = res.stdout
        if c.answer_file:
            try:
                answer = await session.read_text(self._path(c.answer_file))
            except (FileNotFoundError, IsADirectoryError, DriverError) as exc:
                # The agent's mistake, not the harness's: this task has no answer (an error), the
                # request's score stands. A driver failure other than a missing/odd file is fatal.
                if isinstance(exc, DriverError) and exc.code != "not_a_file":
                    raise
                answer = None
                what = "wrote no answer file" if isinstance(exc, FileNotFoundError) else "left no readable file at"
                issues.append(
                    ExecutionIssue(
                        severity="error",
                        phase="run",
                        code="output_missing",
                        message=f"the agent {what} {c.answer_file}",
                    )
                )
        return answer, issues
