"""``acx fmt``: print an AST in the one canonical style, with its comments.

Canonical style: two-space indent, one statement per line (no ``;``), ``key = value``, blocks
always open on the header line and close on their own line (``{}`` when empty), lists and map
values of plain fields inline (``{ a = 1, b = 2 }``) when they fit in 100 columns and hold no
comment, else one item per line (lists with a trailing comma), at most
one blank line between statements (kept where the author had one), ``//`` comments written ``#``.

Comments are not part of the AST; they are re-attached by position. A comment before a statement
stays before it; a comment after a statement on its line stays there; a comment inside a
multi-line list stays before the next item; a comment in a place with no line of its own (inside a
call, between a key and ``=``) moves to the line before its statement. No comment is ever dropped,
and the output formats to itself (``fmt(fmt(x)) == fmt(x)``, tested with hypothesis).
"""

from __future__ import annotations

import re

from acx.grammar import _ast as A

__all__ = [
    "KEYWORDS",
    "VALUE_KEYWORDS",
    "block_string",
    "format_source",
    "is_block_string",
    "print_module",
    "quote_string",
    "render_value",
]

_WIDTH = 100
_INDENT = "  "
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*")
#: Words that cannot be written as a bare key at the start of a statement.
KEYWORDS = frozenset({"import", "let", "for"})
#: Words that cannot be written as a bare name in value position.
VALUE_KEYWORDS = frozenset({"true", "false", "null"})

Pos = tuple[int, int]


def _escaped(parts: tuple[str | A.Interp, ...], *, block: bool) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, A.Interp):
            out.append("${" + part.name + "}")
            continue
        for i, ch in enumerate(part):
            if ch == "$" and part.startswith("${", i):
                out.append("$$")  # `$${` is a literal `${`; the `{` follows as itself
            elif ch == '"' and (not block or part.startswith('"""', i)):
                out.append('\\"')  # in a block only a run of three quotes needs breaking up
            elif ch == "\\":
                out.append("\\\\")
            elif ch == "\n" and not block:
                out.append("\\n")
            elif ch == "\n":
                out.append("\n")
            elif ch == "\t":
                out.append("\\t")
            elif ch == "\r":
                out.append("\\r")
            elif ord(ch) < 0x20 or ch in "\x7f\x85\u2028\u2029" or 0xD800 <= ord(ch) <= 0xDFFF:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
    return "".join(out)


def quote_string(parts: tuple[str | A.Interp, ...]) -> str:
    return '"' + _escaped(parts, block=False) + '"'


def is_block_string(parts: tuple[str | A.Interp, ...]) -> bool:
    """Strings of several lines that end with a newline print as a \"\"\" block."""
    text = "".join(p for p in parts if isinstance(p, str))
    return (
        "\n" in text
        and isinstance(parts[-1], str)
        and parts[-1].endswith("\n")
        and not any((ord(ch) < 0x20 and ch not in "\n\t") or ch in "\x7f\x85\u2028\u2029" for ch in text)
    )


def block_string(parts: tuple[str | A.Interp, ...], depth: int) -> list[str]:
    """``\"\"\"`` block lines; content and closing delimiter one level deeper than ``depth``."""
    pad = _INDENT * (depth + 1)
    body = _escaped(parts, block=True)[:-1].split("\n")
    return ['"""', *[pad + line if line else "" for line in body], pad + '"""']


def _num(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _key(key: A.Key) -> str:
    if _NAME_RE.fullmatch(key.name) and key.name not in KEYWORDS:
        return key.name
    return quote_string((key.name,))


def _start(span: object) -> Pos:
    return (span.line, span.col)  # type: ignore[attr-defined]


def _end(span: object) -> Pos:
    line = span.end_line if span.end_line is not None else span.line  # type: ignore[attr-defined]
    col = span.end_col if span.end_col is not None else span.col  # type: ignore[attr-defined]
    return (line, col)


def _comment_text(text: str) -> str:
    return "#" + text[2:] if text.startswith("//") else text


def render_value(value: A.Value) -> str:
    """A value on one line (for messages and inline contexts); maps render inline."""
    return _Printer(()).inline(value) or _Printer(()).flat(value)


class _Printer:
    def __init__(self, comments: tuple[A.Comment, ...]) -> None:
        self.comments = sorted(comments, key=lambda c: (c.line, c.col))
        self.cursor = 0

    # -- comments ------------------------------------------------------------------------------
    def take_before(self, pos: Pos) -> list[A.Comment]:
        taken: list[A.Comment] = []
        while self.cursor < len(self.comments):
            c = self.comments[self.cursor]
            if (c.line, c.col) >= pos:
                break
            taken.append(c)
            self.cursor += 1
        return taken

    def take_trailing(self, line: int, before: Pos | None) -> A.Comment | None:
        if self.cursor < len(self.comments):
            c = self.comments[self.cursor]
            if c.line == line and (before is None or (c.line, c.col) < before):
                self.cursor += 1
                return c
        return None

    def has_comment_before(self, pos: Pos) -> bool:
        return (
            self.cursor < len(self.comments)
            and (
                self.comments[self.cursor].line,
                self.comments[self.cursor].col,
            )
            < pos
        )

    # -- statements ----------------------------------------------------------------------------
    def body(self, stmts: tuple[A.Stmt, ...], depth: int, close: Pos | None) -> list[str]:
        pad = _INDENT * depth
        out: list[str] = []
        last_line: int | None = None
        for i, stmt in enumerate(stmts):
            start = _start(stmt.span)
            leading = self.take_before(start)
            first_line = leading[0].line if leading else start[0]
            if last_line is not None and first_line > last_line + 1:
                out.append("")
            prev = None
            for c in leading:
                if prev is not None and c.line > prev + 1:
                    out.append("")
                out.append(pad + _comment_text(c.text))
                prev = c.line
            if leading and start[0] > leading[-1].line + 1:
                out.append("")
            lines = self.stmt(stmt, depth)
            hoisted = self.take_before(_end(stmt.span))
            out.extend(pad + _comment_text(c.text) for c in hoisted)
            nxt = _start(stmts[i + 1].span) if i + 1 < len(stmts) else close
            trailing = self.take_trailing(_end(stmt.span)[0], nxt)
            if trailing is not None:
                lines[-1] += "  " + _comment_text(trailing.text)
            out.extend(lines)
            last_line = _end(stmt.span)[0]
        if close is not None:
            dangling = self.take_before(close)
            if dangling and out and last_line is not None and dangling[0].line > last_line + 1:
                out.append("")
            out.extend(pad + _comment_text(c.text) for c in dangling)
        return out

    def stmt(self, stmt: A.Stmt, depth: int) -> list[str]:
        pad = _INDENT * depth
        if isinstance(stmt, A.Import):
            return [pad + "import " + quote_string(stmt.path.parts)]
        if isinstance(stmt, A.Let):
            return self.with_value(pad + f"let {stmt.name.value} = ", stmt.value, depth)
        if isinstance(stmt, A.Assign):
            return self.with_value(pad + _key(stmt.key) + " = ", stmt.value, depth)
        if isinstance(stmt, A.For):
            head = self.with_value(pad + f"for {stmt.var.value} in ", stmt.iterable, depth)
            return self.braced(head, stmt.body, depth, _end(stmt.span))
        header = pad + stmt.kind.value
        if isinstance(stmt.label, A.Name):
            header += " " + stmt.label.value
        elif isinstance(stmt.label, A.Str):
            header += " " + quote_string(stmt.label.parts)
        if stmt.body is None:
            return [header]
        return self.braced([header], stmt.body, depth, _end(stmt.span))

    def braced(self, head: list[str], body: tuple[A.Stmt, ...], depth: int, end: Pos) -> list[str]:
        close = (end[0], max(1, end[1] - 1))  # the position of the closing '}'
        inner = self.body(body, depth + 1, close)
        if not inner:
            return [*head[:-1], head[-1] + " {}"]
        return [*head[:-1], head[-1] + " {", *inner, _INDENT * depth + "}"]

    # -- values --------------------------------------------------------------------------------
    def with_value(self, prefix: str, value: A.Value, depth: int) -> list[str]:
        text = self.inline(value)
        if text is not None and len(prefix) + len(text) <= _WIDTH:
            return [prefix + text]
        lines = self.multiline(value, depth)
        return [prefix + lines[0], *lines[1:]]

    def inline(self, value: A.Value) -> str | None:
        """One-line form, or None when the value must span lines (maps, commented lists)."""
        if isinstance(value, A.MapV):
            if self.has_comment_before(_end(value.span)) and value.span is not A.NO_SPAN:
                return None
            if not value.body:
                return "{}"
            # Small maps of plain fields stay on one line: `params = { temperature = 0.0 }`.
            fields: list[str] = []
            for stmt in value.body:
                if not isinstance(stmt, A.Assign):
                    return None
                text = self.inline(stmt.value)
                if text is None:
                    return None
                fields.append(f"{_key(stmt.key)} = {text}")
            return "{ " + ", ".join(fields) + " }"
        if isinstance(value, A.ListV):
            if self.has_comment_before(_end(value.span)) and value.span is not A.NO_SPAN:
                return None
            items = [self.inline(item) for item in value.items]
            if any(i is None for i in items):
                return None
            return "[" + ", ".join(i for i in items if i is not None) + "]"
        if isinstance(value, A.Str) and is_block_string(value.parts):
            return None
        return self.flat(value)

    def flat(self, value: A.Value) -> str:
        if isinstance(value, A.Str):
            return quote_string(value.parts)
        if isinstance(value, A.Num):
            return _num(value.value)
        if isinstance(value, A.Duration | A.Size):
            return value.text
        if isinstance(value, A.Bool):
            return "true" if value.value else "false"
        if isinstance(value, A.Null):
            return "null"
        if isinstance(value, A.Ref):
            return value.name
        if isinstance(value, A.Call):
            return value.func.value + "(" + ", ".join(self.flat(a) for a in value.args) + ")"
        if isinstance(value, A.ListV):
            return "[" + ", ".join(self.flat(i) for i in value.items) + "]"
        inner = "; ".join(" ".join(self.stmt(s, 0)) for s in value.body)
        return "{ " + inner + " }" if inner else "{}"

    def multiline(self, value: A.Value, depth: int) -> list[str]:
        if isinstance(value, A.MapV):
            return [
                ln.lstrip(" ") if i == 0 else ln
                for i, ln in enumerate(self.braced([""], value.body, depth, _end(value.span)))
            ]
        if isinstance(value, A.ListV):
            pad = _INDENT * (depth + 1)
            out = ["["]
            close = _end(value.span)
            for i, item in enumerate(value.items):
                out.extend(pad + _comment_text(c.text) for c in self.take_before(_start(item.span)))
                lines = self.with_value(pad, item, depth + 1)
                lines[-1] += ","
                nxt = _start(value.items[i + 1].span) if i + 1 < len(value.items) else close
                trailing = self.take_trailing(_end(item.span)[0], nxt)
                if trailing is not None:
                    lines[-1] += "  " + _comment_text(trailing.text)
                out.extend(lines)
            out.extend(pad + _comment_text(c.text) for c in self.take_before(close))
            out.append(_INDENT * depth + "]")
            return out
        if isinstance(value, A.Str) and is_block_string(value.parts):
            return block_string(value.parts, depth)
        return [self.flat(value)]


def print_module(module: A.Module) -> str:
    """The canonical text of ``module`` (comments included); ends with one newline."""
    printer = _Printer(module.comments)
    lines = printer.body(module.body, 0, None)
    previous = _end(module.body[-1].span)[0] if module.body else None
    for c in printer.comments[printer.cursor :]:
        if lines and previous is not None and c.line > previous + 1:
            lines.append("")
        lines.append(_comment_text(c.text))
        previous = c.line
    return "\n".join(lines) + "\n" if lines else ""


def format_source(text: str, file: str = "<string>") -> str:
    """Parse and print ``text``; raises :class:`acx.errors.AcxSyntaxError` when it does not parse."""
    from acx.errors import AcxSyntaxError
    from acx.grammar._parser import parse

    module = parse(text, file)
    try:
        return print_module(module)
    except RecursionError:
        raise AcxSyntaxError(
            f"{file} nests lists, maps or blocks too deeply to format",
            code="E0132",
            help="flatten the structure (name inner parts with `let`)",
        ) from None
