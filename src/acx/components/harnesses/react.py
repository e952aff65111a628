"""``react``: the built-in tool-calling agent loop.

It runs on the host and acts through the attempt's driver session, so it works on every driver
and the sandbox needs no network for the model: every call goes through the run's model gateway
in-process (limits, retries, transcript, usage, cost). Each turn the model gets the conversation
and the tools (``bash``, ``python``, ``edit``, ``submit``); the tool calls of a turn run
(concurrently by default) and their observations — head and tail of long output, the elided
count stated — go back as tool messages.

The episode ends when the model calls ``submit``, or a limit stops it, each with its own issue:
``max_turns`` (``limit_exceeded``), the run budget (``run_timeout``; every command is clipped to
the budget left), the gateway's token / call / cost limits (``limit_exceeded``, added by the
interpreter from the gateway's refusals), too many malformed tool calls
(``malformed_tool_calls``). The answer is what ``submit`` got (QA tasks) or the sandbox state
(tasks judged by a verifier; ``submit`` just ends the episode) — see ``answer`` in the config.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from acx.components._base import BaseHarness
from acx.components._configs import ReactConfig
from acx.components._network_notice import with_network_notice
from acx.components.harnesses._common import has_agent_model
from acx.components.harnesses._react_tools import TOOL_SPECS, Observation, ToolError, run_tool, truncate
from acx.ir import ExecutionIssue, RunResult

if TYPE_CHECKING:
    from acx.components._context import HarnessContext

__all__ = ["DEFAULT_SYSTEM_PROMPT", "PROMPT_TEMPLATES", "ReactHarness"]

DEFAULT_SYSTEM_PROMPT = (
    "You are an autonomous agent solving a task inside a Linux sandbox. Work step by step: inspect "
    "before you change things, run commands to check your work, and keep going until the task is "
    "done. Use the tools; every reply must call at least one tool. When you are finished, call "
    "submit exactly once."
)

#: First user message by kind of task; ``prompt_template`` in the config overrides it.
PROMPT_TEMPLATES: dict[str, str] = {
    "submit": "{prompt}\n\nWhen you have the answer, call submit with it (just the answer, no explanation).",
    "sandbox": (
        "{prompt}\n\nYour work is judged by the state you leave in the sandbox (files, programs, "
        "services), checked after you finish. When the task is done, call submit (its text is not graded)."
    ),
}

NO_TOOL_CALL = "Your reply called no tool. Continue the task with a tool call; when you are done, call submit."


def _issue(severity: str, code: str, message: str) -> ExecutionIssue:
    return ExecutionIssue(severity=severity, phase="run", code=code, message=message)  # type: ignore[arg-type]


@dataclass
class _Episode:
    messages: list[dict[str, Any]]
    turns: int = 0
    format_errors: int = 0
    tool_calls: int = 0
    answer: str | None = None
    submitted: bool = False
    stop: str = "running"
    issues: list[ExecutionIssue] = field(default_factory=list)
    last_content: str | None = None
    #: The attempt's MCP servers (``McpHub``), None when it has none.
    mcp: Any = None


class ReactHarness(BaseHarness):
    id: ClassVar[str] = "react"
    description: ClassVar[str] = (
        "The built-in tool-calling agent: bash, python, a file editor and submit, through the run's model gateway."
    )
    config_class = ReactConfig
    calls_model: ClassVar[bool] = True
    #: Gives the agent the task's MCP servers (Harbor ``mcp_servers``; docs/agents.md).
    supports_mcp: ClassVar[bool] = True
    parallel_attempts_safe: ClassVar[bool] = True

    config: ReactConfig

    # ---- the prompt ----------------------------------------------------------------------------
    def answer_mode(self, ctx: HarnessContext) -> str:
        """``submit`` (the answer is submit's text) or ``sandbox`` (the sandbox state is judged)."""
        if self.config.answer != "auto":
            return self.config.answer
        return "sandbox" if ctx.plan.evaluation_environment_mode in ("reuse", "fresh") else "submit"

    def first_messages(self, ctx: HarnessContext) -> list[dict[str, Any]]:
        system = self.config.system_prompt or DEFAULT_SYSTEM_PROMPT
        if ctx.prepared.input.system_prompt:
            system = f"{system}\n\n{ctx.prepared.input.system_prompt}"
        template = self.config.prompt_template or PROMPT_TEMPLATES[self.answer_mode(ctx)]
        # The notice comes from the sandbox's real run policy (the plan), not from a guess.
        prompt = with_network_notice(ctx.prepared.input.prompt, ctx.plan)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": template.replace("{prompt}", prompt)},
        ]

    def tools(self, mcp: Any = None) -> list[dict[str, Any]]:
        own = [TOOL_SPECS[name] for name in self.config.tools]
        return own if mcp is None else [*own, *mcp.tool_specs()]

    # ---- the loop ------------------------------------------------------------------------------
    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        if not has_agent_model(ctx.request.model):  # the agent role: model.id/base_url or model.roles.agent
            return RunResult(
                task_id=ctx.task_id,
                issues=[
                    ExecutionIssue(
                        severity="fatal",
                        phase="setup",
                        code="model_failed",
                        message="the react harness needs a model (model.id and model.base_url, or model.roles.agent)",
                    )
                ],
            )
        if ctx.models is None:
            return await self._standalone(ctx)
        return await self._episode(ctx, ctx.models)

    async def _standalone(self, ctx: HarnessContext) -> RunResult:
        """Outside a run (a unit test, a plugin): a private in-process gateway for the episode."""
        import os

        import msgspec

        from acx.models import Gateway, actf_trajectory, limits_for, roles_for

        gateway = Gateway(roles_for(ctx.request, os.environ))
        try:
            models = gateway.open_session(ctx.task_id, limits_for(ctx.request))
            result = await self._episode(ctx, models)
            models.close()
            traj = actf_trajectory(models.calls, models.tool_results)
            return result if traj is None else msgspec.structs.replace(result, trajectory=traj)
        finally:
            await gateway.aclose()

    async def _episode(self, ctx: HarnessContext, models: Any) -> RunResult:
        from acx.components.harnesses._mcp_config import servers_for

        servers = servers_for(self.config.mcp_servers, ctx.task.metadata if ctx.task is not None else {})
        if not servers:
            return await self._loop(ctx, models, _Episode(messages=self.first_messages(ctx)))
        return await self._with_mcp(ctx, models, servers)

    async def _with_mcp(self, ctx: HarnessContext, models: Any, servers: list[Any]) -> RunResult:
        """The episode with the attempt's MCP servers connected around it (docs/agents.md)."""
        import msgspec
        import trio

        from acx.components.harnesses._mcp import McpHub, McpUnavailable

        cwd = self.config.cwd or (ctx.session.workdir if ctx.session is not None else None)
        try:
            hub = McpHub(servers, ctx, python=self.config.python, cwd=cwd)
        except McpUnavailable as exc:
            issue = ExecutionIssue(severity="fatal", phase="setup", code="mcp_unavailable", message=str(exc))
            return RunResult(task_id=ctx.task_id, issues=[issue])
        ep = _Episode(messages=self.first_messages(ctx), mcp=hub)
        async with trio.open_nursery() as nursery:
            await hub.start(nursery)
            ep.issues += [_issue("warning", "mcp_server_failed", f) for f in hub.failures]
            try:
                result = await self._loop(ctx, models, ep)
            finally:
                await hub.aclose()
        servers_seen = {name: len(s.tools) for name, s in hub.servers.items()}
        failures = sum(1 for i in ep.issues if i.code in ("mcp_server_failed", "mcp_tool_failed"))
        telemetry = {**result.telemetry, "mcp": {"servers": servers_seen, "failures": failures}}
        return msgspec.structs.replace(result, telemetry=telemetry)

    async def _loop(self, ctx: HarnessContext, models: Any, ep: _Episode) -> RunResult:
        started = time.monotonic()
        while ep.stop == "running":
            if ep.turns >= self.config.max_turns:
                ep.stop = "max_turns"
                ep.issues.append(
                    _issue("error", "limit_exceeded", f"the agent reached max_turns = {self.config.max_turns}")
                )
                break
            await self._turn(ctx, models, ep)
        telemetry = {
            "react": {
                "turns": ep.turns,
                "tool_calls": ep.tool_calls,
                "format_errors": ep.format_errors,
                "stop_reason": ep.stop,
                "answer_mode": self.answer_mode(ctx),
            },
            "duration_seconds": round(time.monotonic() - started, 3),
        }
        if ep.stop == "run_timeout":
            telemetry["timed_out"] = True
        answer = ep.answer if ep.submitted else None
        if not ep.submitted and self.answer_mode(ctx) == "submit" and ep.stop == "max_turns":
            answer = None  # no submission is no answer; the benchmark scores it
        return RunResult(task_id=ctx.task_id, final_answer=answer, issues=ep.issues, telemetry=telemetry)

    async def _turn(self, ctx: HarnessContext, models: Any, ep: _Episode) -> None:
        import trio

        from acx.models import ChatRequest, ModelCallError

        left = ctx.remaining()
        if left is not None and left <= 0:
            self._out_of_time(ctx, ep)
            return
        ep.turns += 1
        request = ChatRequest(messages=list(ep.messages), tools=self.tools(ep.mcp))
        try:
            if left is None:  # no budget: no cancel scope of its own (the gateway bounds the call)
                resp = await models.complete(request)
            else:
                with trio.fail_after(left):
                    resp = await models.complete(request)
        except trio.TooSlowError:
            self._out_of_time(ctx, ep)
            return
        except ModelCallError as exc:
            self._model_failed(ep, exc)
            return
        ep.messages.append(resp.assistant_message())
        ep.last_content = resp.content
        ctx.emit("agent_turn", {"turn": ep.turns, "tool_calls": [t.name for t in resp.tool_calls]})
        if not resp.tool_calls:
            self._correct(ep, NO_TOOL_CALL)
            return
        observations = await self._run_calls(ctx, models, resp.tool_calls, ep.mcp)
        for call, obs in zip(resp.tool_calls, observations, strict=True):
            ep.messages.append({"role": "tool", "tool_call_id": call.id, "content": obs.content})
            failed = obs.meta.pop("mcp_failed", None)
            if failed is not None:  # the model saw the tool error; the attempt keeps the reason
                ep.issues.append(_issue("warning", "mcp_tool_failed", failed))
            if obs.submitted is not None and not ep.submitted:
                ep.submitted, ep.answer = True, obs.submitted
        # A malformed call was answered with a correction (its observation); the count is bounded.
        ep.format_errors += sum(1 for o in observations if o.meta.get("malformed"))
        ep.tool_calls += len(observations)
        if any(o.meta.get("budget_exhausted") for o in observations):
            self._out_of_time(ctx, ep)
        elif ep.submitted:
            ep.stop = "submitted"
        elif ep.format_errors > self.config.max_format_errors:
            self._too_many_format_errors(ep)

    async def _run_calls(self, ctx: HarnessContext, models: Any, calls: list[Any], mcp: Any) -> list[Observation]:
        import trio

        results: list[Observation | None] = [None] * len(calls)

        async def one(i: int) -> None:
            results[i] = await self._run_call(ctx, models, calls[i], mcp)

        if self.config.parallel_tool_calls and len(calls) > 1:
            async with trio.open_nursery() as nursery:
                for i in range(len(calls)):
                    nursery.start_soon(one, i)
        else:
            for i in range(len(calls)):
                await one(i)
        return [r for r in results if r is not None]

    async def _run_call(self, ctx: HarnessContext, models: Any, call: Any, mcp: Any) -> Observation:
        started = time.monotonic()
        try:
            is_mcp = mcp is not None and mcp.owns(call.name)
            if call.name not in self.config.tools and not is_mcp:
                names = [*self.config.tools, *(mcp.tool_names() if mcp is not None else [])]
                raise ToolError(f"unknown tool {call.name!r}; the tools are: {', '.join(names)}")
            if call.arguments is None:
                raise ToolError(
                    f"{call.name}: the arguments are not a JSON object ({truncate(call.raw_arguments, 200)!r}); "
                    "call the tool again with valid JSON arguments"
                )
            if is_mcp:
                relayed = await mcp.call(call.name, call.arguments)
                meta = {**relayed.meta, **({"mcp_failed": relayed.failed} if relayed.failed else {})}
                obs = Observation(relayed.content, meta)
            else:
                obs = await run_tool(
                    ctx,
                    call.name,
                    call.arguments,
                    timeout=self.config.command_timeout_seconds,
                    cwd=self.config.cwd or (ctx.session.workdir if ctx.session is not None else None),
                    python=self.config.python,
                )
        except ToolError as exc:
            obs = Observation(f"[error] {exc}", {"malformed": True})
        obs.content = truncate(obs.content, self.config.max_observation_chars)
        recorded = {k: v for k, v in obs.meta.items() if k != "mcp_failed"}
        models.record_tool_result(
            call.id, obs.content, duration_ms=int((time.monotonic() - started) * 1000), tool=call.name, **recorded
        )
        return obs

    # ---- endings -------------------------------------------------------------------------------
    def _correct(self, ep: _Episode, message: str) -> None:
        ep.format_errors += 1
        if ep.format_errors > self.config.max_format_errors:
            self._too_many_format_errors(ep)
            return
        ep.messages.append({"role": "user", "content": message})

    def _too_many_format_errors(self, ep: _Episode) -> None:
        ep.stop = "malformed_tool_calls"
        ep.issues.append(
            _issue(
                "error",
                "malformed_tool_calls",
                f"the agent made more than max_format_errors = {self.config.max_format_errors} malformed "
                "replies (no tool call, unknown tool or unparseable arguments)",
            )
        )

    def _out_of_time(self, ctx: HarnessContext, ep: _Episode) -> None:
        ep.stop = "run_timeout"
        budget = ctx.plan.run_timeout_seconds
        what = f"of {budget:g} s " if budget is not None else ""
        ep.issues.append(
            _issue("error", "run_timeout", f"the agent's run budget {what}ran out after {ep.turns} turn(s)")
        )

    def _model_failed(self, ep: _Episode, exc: Any) -> None:
        if exc.kind == "limit_exceeded":
            # The gateway recorded the refusal; the interpreter adds the limit_exceeded issue.
            ep.stop = "limit_exceeded"
            return
        ep.stop = "model_failed"
        fatal = exc.kind == "auth" or exc.status in (401, 402, 403)
        code = "model_timeout" if exc.kind == "timeout" else "model_failed"
        ep.issues.append(_issue("fatal" if fatal else "error", code, exc.message))
