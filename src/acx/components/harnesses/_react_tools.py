"""The tools of the ``react`` agent: their model-facing specs and their implementations over a
driver ``Session`` (so they work on every driver).

Every tool returns an :class:`Observation`: the text the model sees (already truncated head +
tail, with the elided count stated) plus facts for the trajectory (exit code, timeout). A tool
never raises for the agent's mistakes (a missing file, an ambiguous ``old_str``): those are
observations that say what to do. Driver failures (a sandbox that died) propagate.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acx.components._context import HarnessContext

__all__ = ["TOOL_SPECS", "Observation", "ToolError", "run_tool", "truncate"]

#: Files larger than this are not read into the conversation by the editor.
MAX_EDIT_FILE_BYTES = 2 * 1024 * 1024


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOL_SPECS: dict[str, dict[str, Any]] = {
    "bash": _fn(
        "bash",
        "Run a bash command in the task's sandbox (a fresh shell each time; cd does not persist). "
        "Returns stdout, stderr and the exit code.",
        {"command": {"type": "string", "description": "the bash command to run"}},
        ["command"],
    ),
    "python": _fn(
        "python",
        "Run a Python program in the task's sandbox (a fresh interpreter each time). Print what you want to see.",
        {"code": {"type": "string", "description": "the Python source to run"}},
        ["code"],
    ),
    "edit": _fn(
        "edit",
        "View, create and edit files in the sandbox. view: a file with line numbers (optionally "
        "view_range [start, end]) or a directory listing; create: write file_text to path; "
        "str_replace: replace the one occurrence of old_str with new_str; insert: insert new_str "
        "after line insert_line (0 = at the top).",
        {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string", "description": "absolute, or relative to the working directory"},
            "file_text": {"type": "string"},
            "old_str": {"type": "string"},
            "new_str": {"type": "string"},
            "insert_line": {"type": "integer"},
            "view_range": {"type": "array", "items": {"type": "integer"}},
        },
        ["command", "path"],
    ),
    "submit": _fn(
        "submit",
        "Submit your final answer and end the task. Call it once, when you are done.",
        {"answer": {"type": "string", "description": "your final answer"}},
        ["answer"],
    ),
}


class ToolError(Exception):
    """A malformed call (unknown tool, bad or missing arguments): answered with a correction."""


@dataclass
class Observation:
    content: str
    meta: dict[str, Any] = field(default_factory=dict)
    #: Set by ``submit``: the episode ends with this answer.
    submitted: str | None = None


def truncate(text: str, limit: int) -> str:
    """``text`` with its middle elided when longer than ``limit`` characters: head and tail kept,
    the number of elided characters stated (the model must know something is missing)."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 80)
    head, tail = keep // 2, keep - keep // 2
    elided = len(text) - head - tail
    return f"{text[:head]}\n[... {elided} characters elided ...]\n{text[len(text) - tail :]}"


def _require(args: dict[str, Any], name: str, kind: type, tool: str) -> Any:
    if name not in args:
        raise ToolError(f"{tool}: missing argument {name!r}")
    value = args[name]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise ToolError(f"{tool}: argument {name!r} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _exec_text(res: Any, budget: float | None) -> tuple[str, dict[str, Any]]:
    parts = []
    if res.stdout:
        parts.append(res.stdout)
    if res.stderr:
        parts.append(f"[stderr]\n{res.stderr}")
    meta: dict[str, Any] = {"exit_code": res.returncode}
    if res.timed_out:
        meta["timed_out"] = True
        parts.append(
            f"[the command timed out after {budget:g} s and was killed; the output above is partial. "
            "Run long jobs in the background or with a shorter scope.]"
        )
    elif res.returncode != 0:
        parts.append(f"[exit code {res.returncode}]")
    if res.output_truncated:
        parts.append("[the output was cut by the sandbox's output limit]")
    return ("\n".join(parts) if parts else "[no output]"), meta


async def _exec(
    ctx: HarnessContext, argv: list[str], stdin: bytes | None, timeout: float, cwd: str | None
) -> Observation:
    budget = ctx.clip(timeout)
    if budget is not None and budget <= 0.05:
        return Observation(
            "[not run: the task's time budget is used up]", {"exit_code": None, "budget_exhausted": True}
        )
    assert ctx.session is not None
    res = await ctx.session.exec(argv, cwd=cwd, timeout=budget, stdin=stdin)
    text, meta = _exec_text(res, budget)
    return Observation(text, meta)


def _abs(path: str, cwd: str | None) -> str:
    if posixpath.isabs(path):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd or "/", path))


def _numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(text.split("\n"), start))


async def _read(ctx: HarnessContext, path: str) -> str:
    assert ctx.session is not None
    data = await ctx.session.read_bytes(path, max_bytes=MAX_EDIT_FILE_BYTES + 1)
    if len(data) > MAX_EDIT_FILE_BYTES:
        raise ToolError(f"edit: {path} is larger than {MAX_EDIT_FILE_BYTES} bytes; use bash (head, sed -n) instead")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"edit: {path} is not UTF-8 text; use bash to inspect it") from exc


async def _edit(ctx: HarnessContext, args: dict[str, Any], cwd: str | None) -> Observation:
    assert ctx.session is not None
    session = ctx.session
    command = _require(args, "command", str, "edit")
    path = _abs(_require(args, "path", str, "edit"), cwd)
    if command == "view":
        if await session.is_dir(path):
            res = await session.exec(
                ["find", path, "-maxdepth", "2", "-not", "-path", "*/.*"], timeout=ctx.clip(30.0) or 30.0
            )
            return Observation(res.stdout or f"[{path} is empty]")
        if not await session.is_file(path):
            return Observation(f"[error] {path} does not exist")
        text = await _read(ctx, path)
        rng = args.get("view_range")
        if rng is not None:
            if not (isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int) for x in rng)):
                raise ToolError("edit: view_range must be [start, end] (line numbers; end -1 = to the end)")
            lines = text.split("\n")
            start, end = rng[0], (len(lines) if rng[1] == -1 else rng[1])
            if not 1 <= start <= max(1, len(lines)) or end < start:
                raise ToolError(f"edit: view_range {rng} is outside the file's {len(lines)} lines")
            return Observation(_numbered("\n".join(lines[start - 1 : end]), start))
        return Observation(_numbered(text))
    if command == "create":
        text = _require(args, "file_text", str, "edit")
        await session.exec(["mkdir", "-p", posixpath.dirname(path) or "/"], timeout=ctx.clip(30.0) or 30.0)
        await session.write_text(path, text)
        return Observation(f"[created {path} ({len(text)} characters)]")
    if command == "str_replace":
        old = _require(args, "old_str", str, "edit")
        new = args.get("new_str", "")
        if not isinstance(new, str):
            raise ToolError("edit: argument 'new_str' must be a string")
        if not await session.is_file(path):
            return Observation(f"[error] {path} does not exist")
        text = await _read(ctx, path)
        count = text.count(old) if old else 0
        if count != 1:
            what = "was not found" if count == 0 else f"occurs {count} times"
            return Observation(f"[error] old_str {what} in {path}; give a unique, exact excerpt (whitespace counts)")
        updated = text.replace(old, new, 1)
        await session.write_text(path, updated)
        line = text[: text.index(old)].count("\n") + 1
        snippet = updated.split("\n")[max(0, line - 3) : line + new.count("\n") + 3]
        return Observation(f"[edited {path}]\n" + _numbered("\n".join(snippet), max(1, line - 2)))
    if command == "insert":
        new = _require(args, "new_str", str, "edit")
        at = _require(args, "insert_line", int, "edit")
        if not await session.is_file(path):
            return Observation(f"[error] {path} does not exist")
        lines = (await _read(ctx, path)).split("\n")
        if not 0 <= at <= len(lines):
            raise ToolError(f"edit: insert_line {at} is outside 0..{len(lines)}")
        lines[at:at] = new.split("\n")
        await session.write_text(path, "\n".join(lines))
        return Observation(f"[inserted {new.count(chr(10)) + 1} line(s) after line {at} of {path}]")
    raise ToolError(f"edit: unknown command {command!r} (view, create, str_replace, insert)")


async def run_tool(
    ctx: HarnessContext, name: str, args: dict[str, Any], *, timeout: float, cwd: str | None, python: str
) -> Observation:
    """Run one tool call; :class:`ToolError` for a malformed one."""
    if name == "bash":
        return await _exec(ctx, ["bash", "-c", _require(args, "command", str, "bash")], None, timeout, cwd)
    if name == "python":
        code = _require(args, "code", str, "python")
        return await _exec(ctx, [python, "-"], code.encode("utf-8"), timeout, cwd)
    if name == "edit":
        return await _edit(ctx, args, cwd)
    if name == "submit":
        answer = args.get("answer", "")
        if not isinstance(answer, str):
            answer = str(answer)
        return Observation("[submitted]", submitted=answer)
    raise ToolError(f"unknown tool {name!r}")
