"""Terminus 2's reply format and prompts, for the ``terminus`` harness (pure: no I/O).

Terminus 2 (Harbor's reference agent) asks the model for one JSON object per turn::

    {"analysis": "...", "plan": "...",
     "commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}, ...],
     "task_complete": false}

``analysis``, ``plan`` and ``commands`` are required; ``duration`` defaults to 1 s and
``task_complete`` to false. Text around the object is tolerated with a warning; a reply without
a usable object is a parse error the model is told about (the turn runs no command). The
wording of the prompts is acx's own; the format, the defaults and the loop's rules (a completion
is confirmed by a second ``task_complete``, observations are the terminal's new output) follow
Harbor's ``terminus-json-plain`` agent so that models tuned on it behave the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Command",
    "Reply",
    "answers_request",
    "bare_handoff",
    "completion_check",
    "estimate_tokens",
    "first_prompt",
    "handoff",
    "is_special_key",
    "limit_output",
    "new_output",
    "parse_error_feedback",
    "parse_reply",
    "questions_prompt",
    "short_handoff",
    "short_summary_prompt",
    "summary_request",
    "unwind",
    "warning_feedback",
]

#: Screen characters the fallback handoffs show (the end of the visible screen).
FALLBACK_SCREEN_CHARS = 1000
#: Tokens the context-overflow path frees by dropping the latest exchanges before it asks for a
#: summary (Terminus's margin for the summary request and its answer).
UNWIND_FREE_TOKENS = 4000

#: A command's wait is capped (Terminus caps it at 60 s: poll again rather than wait long).
MAX_DURATION = 60.0
DEFAULT_DURATION = 1.0
REQUIRED = ("analysis", "plan", "commands")

_FORMAT = """\
You are an AI agent solving a command-line task in a Linux terminal. Each turn you see the task and \
what the terminal shows, and you answer with a batch of keystrokes to type into it.

Reply with one JSON object and nothing else:

{{
  "analysis": "what the terminal shows and what is left to do",
  "plan": "what the next commands do and why",
  "commands": [
    {{"keystrokes": "ls -la\\n", "duration": 0.1}},
    {{"keystrokes": "cd project\\n", "duration": 0.1}}
  ],
  "task_complete": false
}}

- "analysis", "plan" and "commands" are required; "task_complete" (default false) says the task is done.
- "keystrokes" are typed verbatim: end a command with a newline ("\\n") to run it. Special keys use \
tmux names: "C-c" interrupts, "C-d" sends end-of-file.
- "duration" is how many seconds to wait after the keystrokes before the next command (default 1, \
at most 60): about 0.1 for quick commands (cd, ls, cat), longer for builds and long scripts. Prefer \
short waits; to wait longer, send {{"keystrokes": "", "duration": 10}} next turn.
- "commands" may be empty (just wait). The JSON must be valid: escape quotes and backslashes.

Task:
{instruction}

Terminal now:
{terminal_state}
"""


@dataclass(frozen=True)
class Command:
    keystrokes: str
    duration: float


@dataclass(frozen=True)
class Reply:
    commands: list[Command] = field(default_factory=list)
    task_complete: bool = False
    analysis: str = ""
    plan: str = ""
    #: Why the reply is unusable ("" when it parsed).
    error: str = ""
    warnings: list[str] = field(default_factory=list)


def first_prompt(instruction: str, terminal_state: str) -> str:
    return _FORMAT.format(instruction=instruction, terminal_state=terminal_state)


def completion_check(terminal_output: str) -> str:
    """The observation after a first ``task_complete``: the model must confirm it."""
    return (
        f"Terminal now:\n{terminal_output}\n\nYou marked the task complete. Once confirmed, your work is "
        'graded and cannot be changed. If it is really done, reply again with "task_complete": true; '
        "otherwise keep working."
    )


def parse_error_feedback(reply: Reply) -> str:
    extra = f"\nWarnings: {'; '.join(reply.warnings)}" if reply.warnings else ""
    return f"Your previous reply could not be used: {reply.error}{extra}\n\nReply with one valid JSON object."


def warning_feedback(reply: Reply, observation: str) -> str:
    return f"Your previous reply had problems: {'; '.join(reply.warnings)}\n\n{observation}"


def _object_span(text: str) -> tuple[int, int] | None:
    """Where the first complete JSON object in ``text`` starts and ends (braces balanced outside
    strings), or None."""
    start = text.find("{")
    while start != -1:
        depth, in_str, escaped = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return start, i + 1
        start = text.find("{", start + 1)
    return None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _command(i: int, raw: Any, warnings: list[str]) -> Command | str:
    if not isinstance(raw, dict):
        return f"commands[{i}] is not an object"
    keys = raw.get("keystrokes")
    if not isinstance(keys, str):
        return f'commands[{i}] has no "keystrokes" string'
    duration = raw.get("duration", DEFAULT_DURATION)
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0:
        warnings.append(f"commands[{i}].duration is not a non-negative number; waited {DEFAULT_DURATION:g} s")
        duration = DEFAULT_DURATION
    return Command(keys, min(float(duration), MAX_DURATION))


def is_special_key(keys: str) -> bool:
    """A tmux key name (C-c, C-d, M-x, Enter, Escape…): sent as that key, not as text."""
    return keys in ("Enter", "Escape", "Tab", "BSpace", "Up", "Down", "Left", "Right") or (
        len(keys) == 3 and keys[:2] in ("C-", "M-")
    )


def parse_reply(text: str) -> Reply:
    """The model's reply as commands, or the error and warnings to tell it about."""
    span = _object_span(text)
    if span is None:
        return Reply(error="no JSON object found in the reply")
    warnings: list[str] = []
    if text[: span[0]].strip():
        warnings.append("text before the JSON object")
    if text[span[1] :].strip():
        warnings.append("text after the JSON object")
    try:
        doc = json.loads(text[span[0] : span[1]])
    except ValueError as exc:
        return Reply(error=f"invalid JSON ({exc})", warnings=warnings)
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        return Reply(error=f"missing required field(s): {', '.join(missing)}", warnings=warnings)
    if not isinstance(doc["commands"], list):
        return Reply(error='"commands" is not a list', warnings=warnings)
    commands: list[Command] = []
    for i, raw in enumerate(doc["commands"]):
        got = _command(i, raw, warnings)
        if isinstance(got, str):
            return Reply(error=got, warnings=warnings)
        commands.append(got)
    for i, cmd in enumerate(commands[:-1]):
        # Typed, but the next command's keys land on the same line: almost always a mistake.
        if cmd.keystrokes and not cmd.keystrokes.endswith("\n") and not is_special_key(cmd.keystrokes):
            warnings.append(f"commands[{i}] does not end with a newline but another command follows it")
    complete = _flag(doc.get("task_complete", False))
    if complete is None:
        warnings.append('"task_complete" is not a boolean; taken as false')
        complete = False
    return Reply(
        commands=commands,
        task_complete=complete,
        analysis=str(doc.get("analysis") or ""),
        plan=str(doc.get("plan") or ""),
        warnings=warnings,
    )


def limit_output(text: str, max_bytes: int) -> str:
    """``text`` within ``max_bytes`` (UTF-8): its head and tail, the elided byte count stated."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    half = max_bytes // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... output limited to {max_bytes} bytes; {omitted} interior bytes omitted ...]\n{tail}"


def new_output(previous: str | None, current: str, screen: str) -> tuple[str, str]:
    """What the model is shown after a batch: the terminal's new lines since ``previous`` (the
    whole scrollback at the last look), else the visible screen. Returns (observation, the
    scrollback to compare with next time)."""
    if previous is None:
        return f"Current terminal screen:\n{screen}", current
    before = previous.rstrip()
    if before and before in current and current.rstrip() != before:
        # From the start of the last line seen: a prompt line that got a command typed after it.
        cut = current.index(before) + (before.rfind("\n") if "\n" in before else 0)
        fresh = current[cut:]
        if fresh.strip():
            return f"New terminal output:\n{fresh}", current
    return f"Current terminal screen:\n{screen}", current


# ---- context summarization (the wording is acx's own; the three-step hand-off is Terminus 2's) ---


def summary_request(instruction: str) -> str:
    """Step 1: asked at the end of the conversation so far."""
    return (
        "Your context is nearly full, so another agent will take over this task from here. Write down "
        "everything it needs to continue without you.\n\n"
        f"The task:\n{instruction}\n\n"
        "Cover, in detail:\n"
        "1. What you did: each significant command and what it showed.\n"
        "2. What you found out: files and their locations, configuration, errors, the state of the system.\n"
        "3. Problems you hit and how you got past them (or did not).\n"
        "4. Where things stand now: what is done and what is left.\n\n"
        "Answer in plain text (not the JSON reply format): the other agent sees only what you write here."
    )


def questions_prompt(instruction: str, summary: str, screen: str) -> str:
    """Step 2, in a fresh conversation: the new agent reads the summary and asks what it misses."""
    return (
        "You are taking over a command-line task from another agent, which left you its notes.\n\n"
        f"The task:\n{instruction}\n\n"
        f"The other agent's notes:\n{summary}\n\n"
        f"The terminal now shows:\n{screen}\n\n"
        "Before you start, ask the other agent about anything the notes leave open on the state of the "
        "work: at least five questions, more if you need them. It will answer once, and then you are on "
        "your own, so ask everything now. Answer in plain text."
    )


def answers_request(questions: str) -> str:
    """Step 3, back in the full conversation (after the summary): answer the new agent."""
    return f"The agent taking over asks the following. Answer each question fully, one by one:\n\n{questions}"


def handoff(answers: str) -> str:
    """The fresh conversation's next user message: the answers, and back to work."""
    return (
        f"The other agent answered:\n\n{answers}\n\n"
        "Carry on with the task from where it stopped. There are no more questions: from now on reply "
        "with the JSON format described in the first message, as before."
    )


def short_summary_prompt(instruction: str, screen: str) -> str:
    """The fallback when the three-step hand-off failed: one short call without the history."""
    return (
        f"A command-line task is under way:\n{instruction}\n\n"
        f"The end of its terminal screen:\n{screen[-FALLBACK_SCREEN_CHARS:]}\n\n"
        "In two or three sentences, say what the next steps should be."
    )


def short_handoff(instruction: str, summary: str) -> str:
    return f"{instruction}\n\nNotes on the next steps: {summary}"


def bare_handoff(instruction: str, screen: str) -> str:
    """The last fallback, with no model call: the task and the end of the screen."""
    return f"{instruction}\n\nThe terminal's screen ends with:\n{screen[-FALLBACK_SCREEN_CHARS:]}"


def _chars(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)


def estimate_tokens(messages: list[dict[str, Any]], *, per_char: float = 0.25) -> int:
    """Tokens of ``messages`` at ``per_char`` tokens a character (the ratio of the model's last
    count; about four characters a token when no usage calibrates it)."""
    return round(_chars(messages) * per_char)


def unwind(messages: list[dict[str, Any]], *, budget: int, per_char: float) -> tuple[list[dict[str, Any]], int]:
    """``messages`` (ending with an assistant turn) without their latest exchanges (a user
    message and the reply to it, in pairs) until their estimated tokens fit ``budget``; the
    first exchange (the task and the first reply) always stays. Returns the kept messages and how many were dropped."""
    kept = list(messages)
    while len(kept) > 2 and estimate_tokens(kept, per_char=per_char) > budget:
        kept = kept[:-2]
    return kept, len(messages) - len(kept)
