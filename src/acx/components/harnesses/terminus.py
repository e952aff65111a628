"""``terminus``: Terminus 2, Harbor's reference terminal agent, as a built-in harness.

Like Harbor's, the loop runs on the host and calls the model through the run's gateway (so the
sandbox needs no network); it acts through one ``tmux`` terminal in the sandbox. Each turn the
model answers in Terminus's JSON format (``_terminus``): its keystroke batch is typed into the
terminal, each keystroke string followed by its ``duration`` wait, and the model next sees the
terminal's new output. A reply that is not usable JSON runs nothing and is answered with what is
wrong. ``task_complete: true`` is asked to be confirmed; a second one in a row ends the episode.

Endings: confirmed completion (``stop_reason`` ``completed``), ``max_turns`` (``limit_exceeded``),
the run budget (``run_timeout``), a model failure (``model_failed``), the terminal's shell exiting
(``session_ended``). The sandbox state is the result (tasks judged by a verifier); Terminus has
no answer channel, so the attempt's answer is empty.

The sandbox needs ``tmux`` (and ``bash``): without it the attempt stops at once with a FATAL
``harness_setup_failed`` saying so (Harbor installs tmux with the image's package manager, which
an offline sandbox cannot; bake it into the image).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from acx.components._base import BaseHarness
from acx.components._configs import TerminusConfig
from acx.components._network_notice import with_network_notice
from acx.components.harnesses import _terminus
from acx.components.harnesses._common import has_agent_model, tail
from acx.errors import DriverError
from acx.ir import ExecutionIssue, RunResult

if TYPE_CHECKING:
    from acx.components._context import HarnessContext

__all__ = ["TerminusHarness"]

#: Longer keystroke strings go through a tmux paste buffer: a send-keys command has a size limit
#: (about 16 KiB in tmux ≥ 1.9, less in older builds).
_SEND_KEYS_MAX = 4096
_TMUX_TIMEOUT = 30.0
_WINDOW = "terminus"


def _issue(severity: str, phase: str, code: str, message: str) -> ExecutionIssue:
    return ExecutionIssue(severity=severity, phase=phase, code=code, message=message)  # type: ignore[arg-type]


def _terminus_chars(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)


def _context_failed(ep: _Episode, message: str) -> None:
    """A context overflow the episode cannot summarize its way out of ends it (an error issue)."""
    ep.stop = "model_failed"
    ep.issues.append(_issue("error", "run", "model_failed", message))


@dataclass
class _Episode:
    messages: list[dict[str, Any]]
    #: The task as the model first saw it (the hand-off prompts repeat it).
    instruction: str = ""
    turns: int = 0
    parse_errors: int = 0
    commands: int = 0
    pending_completion: bool = False
    stop: str = "running"
    issues: list[ExecutionIssue] = field(default_factory=list)
    #: The model's token count of the conversation at its last answer (prompt + completion), and
    #: the conversation's characters then; None when it reported no usage or after a hand-off.
    context_tokens: int | None = None
    counted_chars: int = 0
    #: Tokens a character, from the latest usage (estimates of conversations the model did not count).
    per_char: float = 0.25
    #: One record per summarization (telemetry.terminus.summarizations).
    summaries: list[dict[str, Any]] = field(default_factory=list)
    #: Set by a hand-off: the next answered call's trajectory step says it starts the fresh conversation.
    handoff: dict[str, Any] | None = None


class _Terminal:
    """One tmux session in the sandbox, on a socket of its own (attempts sharing a host —
    host_process — do not see each other's server)."""

    def __init__(self, ctx: HarnessContext, config: TerminusConfig) -> None:
        self.ctx = ctx
        self.config = config
        self.socket = f"acx-terminus-{secrets.token_hex(6)}"
        self.previous: str | None = None

    async def tmux(self, *args: str, stdin: bytes | None = None) -> Any:
        session = self.ctx.session
        assert session is not None
        return await session.exec(["tmux", "-L", self.socket, *args], timeout=_TMUX_TIMEOUT, stdin=stdin)

    async def start(self) -> str | None:
        """Start the shell; None, or why it could not start."""
        session = self.ctx.session
        assert session is not None
        probe = await session.exec(["sh", "-c", "command -v tmux && command -v bash"], timeout=_TMUX_TIMEOUT)
        if not probe.ok:
            return "the sandbox has no tmux (or no bash); terminus types into a tmux terminal"
        c = self.config
        cwd = c.cwd or session.workdir
        argv = ["new-session", "-d", "-s", _WINDOW, "-x", str(c.pane_width), "-y", str(c.pane_height)]
        if cwd:
            argv += ["-c", cwd]
        res = await self.tmux(*argv, "bash --login")
        if not res.ok:
            return f"tmux new-session failed: {tail(res.stderr or res.stdout)}"
        # The whole scrollback is compared between looks: a long output must not scroll out of it.
        await self.tmux("set-option", "-g", "history-limit", str(c.history_limit))
        return None

    async def alive(self) -> bool:
        return bool((await self.tmux("has-session", "-t", _WINDOW)).ok)

    async def type(self, keys: str) -> None:
        if not keys:
            return
        if _terminus.is_special_key(keys) or len(keys.encode("utf-8")) <= _SEND_KEYS_MAX:
            # One argument: tmux types it as text unless it is a key name (C-c, Enter…); a newline
            # character is Enter to the shell.
            res = await self.tmux("send-keys", "-t", _WINDOW, "--", keys)
            if res.ok:
                return
        buffer = f"acx-{secrets.token_hex(4)}"
        await self.tmux("load-buffer", "-b", buffer, "-", stdin=keys.encode("utf-8"))
        await self.tmux("paste-buffer", "-d", "-b", buffer, "-t", _WINDOW)

    async def capture(self, whole: bool) -> str:
        args = ["capture-pane", "-p", "-t", _WINDOW] + (["-S", "-"] if whole else [])
        res = await self.tmux(*args)
        return str(res.stdout or "")

    async def observe(self) -> str:
        scrollback = await self.capture(whole=True)
        screen = await self.capture(whole=False)
        shown, self.previous = _terminus.new_output(self.previous, scrollback, screen)
        return _terminus.limit_output(shown, self.config.max_output_bytes)

    async def stop(self) -> None:
        session = self.ctx.session
        assert session is not None
        try:
            await self.tmux("kill-server")
            # A server whose shell exited leaves its socket file behind; on host_process that
            # would pile up in the user's tmux directory, one per attempt.
            sock = f'"${{TMUX_TMPDIR:-/tmp}}/tmux-$(id -u)/{self.socket}"'
            await session.exec(["sh", "-c", f"rm -f {sock}"], timeout=_TMUX_TIMEOUT)
        except (DriverError, OSError):
            pass  # no tmux, or the sandbox is already gone: nothing left to stop


class TerminusHarness(BaseHarness):
    id: ClassVar[str] = "terminus"
    description: ClassVar[str] = (
        "Terminus 2 (Harbor's reference agent): keystroke batches in Terminus's JSON format typed into a "
        "tmux terminal in the sandbox, through the run's model gateway."
    )
    config_class = TerminusConfig
    calls_model: ClassVar[bool] = True
    requires_model: ClassVar[bool] = True
    parallel_attempts_safe: ClassVar[bool] = True

    config: TerminusConfig

    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        if not has_agent_model(ctx.request.model):
            return RunResult(
                task_id=ctx.task_id,
                issues=[_issue("fatal", "setup", "model_failed", "the terminus harness needs a model")],
            )
        if ctx.models is None:
            return RunResult(
                task_id=ctx.task_id,
                issues=[_issue("fatal", "setup", "harness_setup_failed", "terminus runs inside an acx run only")],
            )
        terminal = _Terminal(ctx, self.config)
        started = time.monotonic()
        why = await terminal.start()
        if why is not None:
            await terminal.stop()
            return RunResult(
                task_id=ctx.task_id,
                issues=[_issue("fatal", "setup", "harness_setup_failed", why)],
                telemetry={"terminus": {"stop_reason": "no_terminal"}},
            )
        try:
            prompt = with_network_notice(ctx.prepared.input.prompt, ctx.plan)
            first = _terminus.first_prompt(prompt, await terminal.observe())
            ep = _Episode(messages=[{"role": "user", "content": first}], instruction=prompt)
            await self._loop(ctx, ctx.models, terminal, ep)
            screen = await terminal.capture(whole=True) if ep.stop != "session_ended" else ""
        finally:
            await terminal.stop()
        telemetry: dict[str, Any] = {
            "terminus": {
                "turns": ep.turns,
                "commands": ep.commands,
                "parse_errors": ep.parse_errors,
                "stop_reason": ep.stop,
                "summarization_count": sum(1 for r in ep.summaries if r["method"] != "failed"),
                "summarizations": ep.summaries,
            },
            "duration_seconds": round(time.monotonic() - started, 3),
        }
        if screen:
            telemetry["agent_logs"] = {"terminal": _terminus.limit_output(screen, self.config.max_log_bytes)}
        if ep.stop == "run_timeout":
            telemetry["timed_out"] = True
        return RunResult(task_id=ctx.task_id, final_answer=None, issues=ep.issues, telemetry=telemetry)

    # ---- the loop ------------------------------------------------------------------------------
    async def _loop(self, ctx: HarnessContext, models: Any, terminal: _Terminal, ep: _Episode) -> None:
        while ep.stop == "running":
            if ep.turns >= self.config.max_turns:
                ep.stop = "max_turns"
                ep.issues.append(
                    _issue("error", "run", "limit_exceeded", f"the agent reached max_turns = {self.config.max_turns}")
                )
                return
            if not await terminal.alive():
                ep.stop = "session_ended"
                return
            await self._turn(ctx, models, terminal, ep)

    async def _call(self, ctx: HarnessContext, models: Any, ep: _Episode, messages: list[dict[str, Any]]) -> Any:
        """One model call within the run budget: the answer, or None when the budget ran out (the
        episode then stops). A failed call raises ``ModelCallError``."""
        import trio

        from acx.models import ChatRequest

        left = ctx.remaining()
        if left is not None and left <= 0:
            self._out_of_time(ctx, ep)
            return None
        request = ChatRequest(messages=list(messages))
        try:
            if left is None:
                return await models.complete(request)
            with trio.fail_after(left):
                return await models.complete(request)
        except trio.TooSlowError:
            self._out_of_time(ctx, ep)
            return None

    async def _turn(self, ctx: HarnessContext, models: Any, terminal: _Terminal, ep: _Episode) -> None:
        from acx.models import ModelCallError

        left = ctx.remaining()
        if left is not None and left <= 0:
            self._out_of_time(ctx, ep)
            return
        c = self.config
        if c.summarize and c.proactive_summarization_threshold > 0 and len(ep.messages) > 2:
            free = c.context_limit - self._tokens_in_use(ep)
            if free < c.proactive_summarization_threshold:
                await self._summarize(ctx, models, terminal, ep, trigger="proactive", free_tokens=free)
                if ep.stop != "running":
                    return
        ep.turns += 1
        try:
            resp = await self._call(ctx, models, ep, ep.messages)
        except ModelCallError as exc:
            if exc.kind != "context_length":
                self._model_failed(ep, exc)
                return
            if not await self._recover(ctx, models, terminal, ep, exc):
                return
            try:
                resp = await self._call(ctx, models, ep, ep.messages)
            except ModelCallError as again:
                if again.kind == "context_length":
                    _context_failed(
                        ep,
                        "the conversation still exceeds the model's context after summarization "
                        f"(summarization {len(ep.summaries)}): {again.message}",
                    )
                else:
                    self._model_failed(ep, again)
                return
        if resp is None:
            return
        if ep.handoff is not None:
            models.annotate(resp, context_management={"type": "handoff", **ep.handoff})
            ep.handoff = None
        ep.messages.append({"role": "assistant", "content": resp.content or ""})
        # What the conversation holds now, as the model counted it (None: it reported no usage).
        ep.context_tokens = (resp.usage.prompt_tokens + resp.usage.completion_tokens) if resp.usage else None
        ep.counted_chars = _terminus_chars(ep.messages)
        if ep.context_tokens and ep.counted_chars:
            ep.per_char = ep.context_tokens / ep.counted_chars
        reply = _terminus.parse_reply(resp.content or "")
        ctx.emit("agent_turn", {"turn": ep.turns, "commands": len(reply.commands), "parse_error": bool(reply.error)})
        if reply.error:
            ep.parse_errors += 1
            ep.messages.append({"role": "user", "content": _terminus.parse_error_feedback(reply)})
            return
        if not await self._type(ctx, terminal, reply, ep):
            return
        observation = await terminal.observe()
        if reply.task_complete:
            if ep.pending_completion:
                ep.stop = "completed"
                return
            ep.pending_completion = True
            observation = _terminus.completion_check(observation)
        else:
            ep.pending_completion = False
            if reply.warnings:
                observation = _terminus.warning_feedback(reply, observation)
        ep.messages.append({"role": "user", "content": observation})

    # ---- context summarization -----------------------------------------------------------------
    def _tokens_in_use(self, ep: _Episode) -> int:
        """Tokens of the conversation before the pending user message: the model's count at its
        last answer when it reported usage, else an estimate from the characters."""
        history = ep.messages[:-1]
        if ep.context_tokens is not None and ep.counted_chars == _terminus_chars(history):
            return ep.context_tokens
        return _terminus.estimate_tokens(history, per_char=ep.per_char)

    async def _recover(self, ctx: HarnessContext, models: Any, terminal: _Terminal, ep: _Episode, exc: Any) -> bool:
        """The model said the conversation no longer fits its context: summarize (True: the
        turn's call is made again, in the fresh conversation) or end the attempt."""
        if not self.config.summarize:
            _context_failed(
                ep,
                f"the conversation exceeds the model's context after {ep.turns - 1} turn(s) and "
                f"summarize is false: {exc.message}",
            )
            return False
        if len(ep.messages) <= 2:
            _context_failed(
                ep, f"the first prompt alone exceeds the model's context (nothing to summarize): {exc.message}"
            )
            return False
        await self._summarize(ctx, models, terminal, ep, trigger="context_length", free_tokens=None)
        return ep.stop == "running"

    async def _summarize(
        self,
        ctx: HarnessContext,
        models: Any,
        terminal: _Terminal,
        ep: _Episode,
        *,
        trigger: str,
        free_tokens: int | None,
    ) -> None:
        """Terminus 2's hand-off: the conversation so far (without its pending user message, which
        the hand-off replaces) is summarized; a fresh agent reads the summary and the terminal and
        asks what it misses; the full conversation answers; the episode continues in a conversation
        of the first prompt, the questions and a last user message with the answers.

        After a context overflow the latest exchanges are dropped first (to free
        ``UNWIND_FREE_TOKENS`` below what last fit), and a failed hand-off falls back to a short
        summary from the task and the screen alone, then to the task and the screen with no
        summary. A failed proactive hand-off leaves the conversation as it was (a warning)."""
        from acx.models import ModelCallError

        n = len(ep.summaries) + 1
        instruction = ep.instruction
        history = ep.messages[:-1]
        dropped = 0
        if trigger == "context_length":
            fit = ep.context_tokens if ep.context_tokens is not None else self.config.context_limit
            budget = min(self.config.context_limit, fit) - _terminus.UNWIND_FREE_TOKENS
            history, dropped = _terminus.unwind(history, budget=budget, per_char=ep.per_char)
        record: dict[str, Any] = {"summarization": n, "turn": ep.turns, "trigger": trigger}
        if free_tokens is not None:
            record["free_tokens"] = free_tokens
        if dropped:
            record["messages_dropped"] = dropped
        note = {"type": "summarization", "summarization": n, "trigger": trigger}

        async def ask(part: str, messages: list[dict[str, Any]]) -> str | None:
            resp = await self._call(ctx, models, ep, messages)
            if resp is None:
                return None
            models.annotate(resp, context_management={**note, "part": part})
            return str(resp.content or "")

        failure = ""
        try:
            summary_req = _terminus.summary_request(instruction)
            summary = await ask("summary", [*history, {"role": "user", "content": summary_req}])
            if summary is None:
                return
            screen = await terminal.capture(whole=False)
            questions_msg = _terminus.questions_prompt(instruction, summary, screen)
            questions = await ask("questions", [{"role": "user", "content": questions_msg}])
            if questions is None:
                return
            answers = await ask(
                "answers",
                [
                    *history,
                    {"role": "user", "content": summary_req},
                    {"role": "assistant", "content": summary},
                    {"role": "user", "content": _terminus.answers_request(questions)},
                ],
            )
            if answers is None:
                return
            fresh = [
                history[0],
                {"role": "user", "content": questions_msg},
                {"role": "assistant", "content": questions},
                {"role": "user", "content": _terminus.handoff(answers)},
            ]
            self._handed_off(ep, fresh, {**record, "method": "handoff"})
            return
        except ModelCallError as exc:
            if self._ends_attempt(exc):
                self._model_failed(ep, exc)
                return
            failure = exc.message
        if trigger == "proactive":
            ep.summaries.append({**record, "method": "failed", "error": failure})
            ep.issues.append(
                _issue(
                    "warning",
                    "run",
                    "model_failed",
                    f"proactive summarization {n} failed ({failure}); the episode continued unsummarized",
                )
            )
            return
        screen = await terminal.capture(whole=False)
        try:
            short = await ask(
                "short_summary", [{"role": "user", "content": _terminus.short_summary_prompt(instruction, screen)}]
            )
            if short is None:
                return
            last = _terminus.short_handoff(instruction, short)
            method = "short_summary"
        except ModelCallError as exc:
            if self._ends_attempt(exc):
                self._model_failed(ep, exc)
                return
            last = _terminus.bare_handoff(instruction, screen)
            method = "screen_only"
            failure = f"{failure}; then {exc.message}"
        record = {**record, "method": method, "error": failure}
        self._handed_off(ep, [*history, {"role": "user", "content": last}], record)

    def _handed_off(self, ep: _Episode, messages: list[dict[str, Any]], record: dict[str, Any]) -> None:
        ep.messages = messages
        ep.summaries.append(record)
        ep.handoff = {"summarization": record["summarization"], "method": record["method"]}
        ep.pending_completion = False
        # The fresh conversation's size is estimated until the model's next answer counts it.
        ep.context_tokens = None

    @staticmethod
    def _ends_attempt(exc: Any) -> bool:
        """A failure no fallback can get past (the gateway refuses calls, the key is bad)."""
        return exc.kind in ("limit_exceeded", "auth", "refused", "cancelled") or exc.status in (401, 402, 403)

    async def _type(self, ctx: HarnessContext, terminal: _Terminal, reply: _terminus.Reply, ep: _Episode) -> bool:
        """Type the batch, each command followed by its wait (clipped to the budget left); False
        when the budget ran out."""
        import trio

        for cmd in reply.commands:
            await terminal.type(cmd.keystrokes)
            ep.commands += 1
            left = ctx.remaining()
            wait = cmd.duration if left is None else min(cmd.duration, max(left, 0.0))
            await trio.sleep(wait)
            if left is not None and left <= cmd.duration:
                self._out_of_time(ctx, ep)
                return False
        return True

    # ---- endings -------------------------------------------------------------------------------
    def _out_of_time(self, ctx: HarnessContext, ep: _Episode) -> None:
        ep.stop = "run_timeout"
        budget = ctx.plan.run_timeout_seconds
        what = f"of {budget:g} s " if budget is not None else ""
        ep.issues.append(
            _issue("error", "run", "run_timeout", f"the agent's run budget {what}ran out after {ep.turns} turn(s)")
        )

    def _model_failed(self, ep: _Episode, exc: Any) -> None:
        if exc.kind == "limit_exceeded":
            ep.stop = "limit_exceeded"  # the gateway recorded it; the interpreter adds the issue
            return
        ep.stop = "model_failed"
        fatal = exc.kind == "auth" or exc.status in (401, 402, 403)
        code = "model_timeout" if exc.kind == "timeout" else "model_failed"
        ep.issues.append(_issue("fatal" if fatal else "error", "run", code, exc.message))
