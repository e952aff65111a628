"""``openai_chat``: one chat completion per task (AgentCompass's single-call semantics).

The messages are the task's system prompt (or ``system_prompt``) and prompt; the task's tool
*definitions* are passed along (never executed); the answer is the reply's content. The call goes
through the run's model gateway in-process (``acx.models.current_session()``): its protocol is
``model.api_protocol`` (default ``openai-chat``; the client translates for the others), its
retries are the model layer's one retry layer, and it is recorded in the attempt's transcript,
trajectory and usage. Called outside a run (a unit test, a plugin), it opens a private gateway
session for the call. The sandbox gets no network access for the model: the call is made from
the host.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, ClassVar

import msgspec

from acx.components._base import BaseHarness
from acx.components._configs import HarnessConfig
from acx.components._context import HarnessContext
from acx.components.harnesses._common import has_agent_model
from acx.ir import ExecutionIssue, PreparedTask, RunRequest, RunResult

__all__ = ["OpenAIChatConfig", "OpenAIChatHarness"]

#: Model failures after retries that make the attempt FATAL (AgentCompass model_exception_issue).
_FATAL_STATUSES = {401, 402, 403, 429}


def _issue(severity: str, code: str, message: str) -> ExecutionIssue:
    return ExecutionIssue(severity=severity, phase="run", code=code, message=message)  # type: ignore[arg-type]


def _tools(prepared: PreparedTask) -> list[dict[str, Any]]:
    """Task tool definitions in the OpenAI function shape (the Claude shape is accepted too)."""
    out = []
    for t in prepared.input.tools:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "function" and isinstance(t.get("function"), dict):
            out.append(t)
            continue
        params = t.get("parameters") or t.get("input_schema") or {"type": "object", "properties": {}}
        fn = {"name": t.get("name", ""), "description": t.get("description", ""), "parameters": params}
        out.append({"type": "function", "function": fn})
    return out


class OpenAIChatConfig(HarnessConfig, frozen=True, kw_only=True):
    """A single OpenAI-compatible chat completion per task."""

    system_prompt: Annotated[str | None, msgspec.Meta(description="system message")] = None
    max_tokens: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None, msgspec.Meta(description="completion token cap")
    ] = None
    temperature: Annotated[
        Annotated[float, msgspec.Meta(ge=0)] | None, msgspec.Meta(description="sampling temperature")
    ] = None
    request_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, description="HTTP request timeout")] = 600.0


class OpenAIChatHarness(BaseHarness):
    id: ClassVar[str] = "openai_chat"
    description: ClassVar[str] = "One chat completion per task, through the run's model gateway."
    config_class = OpenAIChatConfig
    calls_model: ClassVar[bool] = True
    parallel_attempts_safe: ClassVar[bool] = True

    config: OpenAIChatConfig

    def _request(self, prepared: PreparedTask) -> Any:
        from acx.models import ChatRequest

        messages: list[dict[str, Any]] = []
        system = self.config.system_prompt or prepared.input.system_prompt
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prepared.input.prompt})
        params: dict[str, Any] = {}
        if self.config.max_tokens is not None:
            params["max_tokens"] = self.config.max_tokens
        if self.config.temperature is not None:
            params["temperature"] = self.config.temperature
        return ChatRequest(messages=messages, tools=_tools(prepared), params=params)

    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        prepared, req = ctx.prepared, ctx.request
        if not has_agent_model(req.model):  # the agent role: model.id/base_url or model.roles.agent
            return RunResult(
                task_id=prepared.task_id,
                issues=[
                    ExecutionIssue(
                        severity="fatal",
                        phase="setup",
                        code="model_failed",
                        message="openai_chat needs a model (model.id and model.base_url, or model.roles.agent)",
                    )
                ],
            )
        models = ctx.models
        if models is None:
            return await self._standalone(prepared, req)
        return await self._call(models, prepared)

    async def _standalone(self, prepared: PreparedTask, req: RunRequest) -> RunResult:
        """Outside a run: a private in-process gateway session for this one call."""
        import os

        from acx.models import Gateway, actf_trajectory, limits_for, roles_for

        gateway = Gateway(roles_for(req, os.environ))
        try:
            models = gateway.open_session(prepared.task_id, limits_for(req))
            result = await self._call(models, prepared)
            models.close()
            traj = actf_trajectory(models.calls)
            return result if traj is None else _with(result, trajectory=traj)
        finally:
            await gateway.aclose()

    async def _call(self, models: Any, prepared: PreparedTask) -> RunResult:
        import trio

        from acx.models import ModelCallError

        started = time.monotonic()
        budget = self.config.request_timeout_seconds
        try:
            with trio.fail_after(budget):
                resp = await models.complete(self._request(prepared))
        except trio.TooSlowError:
            return RunResult(
                task_id=prepared.task_id,
                issues=[
                    _issue("error", "model_timeout", f"the model call exceeded request_timeout_seconds = {budget:g}")
                ],
            )
        except ModelCallError as exc:
            if exc.kind == "limit_exceeded":
                # The gateway records the refusal; the interpreter adds the limit_exceeded issue.
                return RunResult(task_id=prepared.task_id)
            fatal = exc.status in _FATAL_STATUSES or (exc.status or 0) >= 500 or exc.kind == "auth"
            code = "model_timeout" if exc.kind == "timeout" else "model_failed"
            return RunResult(
                task_id=prepared.task_id, issues=[_issue("fatal" if fatal else "error", code, exc.message)]
            )
        latency = round(time.monotonic() - started, 3)
        issues = []
        if not resp.content and not resp.tool_calls:
            issues.append(_issue("warning", "model_empty_output", "the model returned an empty message"))
        raw_result = {
            "content": resp.content,
            "reasoning_content": resp.reasoning,
            "stop_reason": resp.finish_reason,
            "usage": resp.usage.to_dict() if resp.usage is not None else None,
            "tool_calls": [{"id": t.id, "name": t.name, "arguments": t.raw_arguments} for t in resp.tool_calls],
        }
        return RunResult(
            task_id=prepared.task_id,
            final_answer=resp.content,
            issues=issues,
            artifacts={"raw_result": raw_result},
            telemetry={"latency_seconds": latency, "llm_infer_ms": int(latency * 1000), "usage": raw_result["usage"]},
        )


def _with(result: RunResult, **changes: Any) -> RunResult:
    import msgspec

    return msgspec.structs.replace(result, **changes)
