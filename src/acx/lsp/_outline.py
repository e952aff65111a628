"""A tolerant, linear outline of ``.acx`` text: where the cursor is, what is open around it.

The lark parser (``acx.grammar``) only answers for complete files; an editor asks about text that
is being typed. This scanner reads any text (half-written blocks, unterminated strings) in one
pass and reports the frames open at its end (blocks, map values, lists), what the next token would
be (a statement, a value for ``key``, a block label, an import path) and the lets, imports and
blocks it saw. Its cost is linear in the text it is given, so per-keystroke work stays bounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Block", "Frame", "Outline", "Token", "outline", "tokens"]

_TOKEN = re.compile(
    r'(?P<ml>"""(?:[^"\\]|\\.|"(?!""))*(?:"""|\Z))'
    r'|(?P<str>"(?:[^"\\\n]|\\.)*(?:"|$))'
    r"|(?P<comment>(?:#|//)[^\n]*)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*)"
    r"|(?P<punct>[{}\[\]()=;,])"
    r"|(?P<atom>[^\s{}\[\]()=;,\"#]+)"
    r"|(?P<ws>\s+)",
    re.M,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # name | str | ml | punct | atom
    text: str
    start: int
    end: int

    @property
    def closed(self) -> bool:
        """False for a string still being typed (no closing quote yet)."""
        if self.kind == "str":
            return len(self.text) >= 2 and self.text.endswith('"') and not self.text.endswith('\\"')
        if self.kind == "ml":
            return len(self.text) >= 6 and self.text.endswith('"""')
        return True


def tokens(text: str) -> list[Token]:
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "atom"
        if kind in ("ws", "comment"):
            continue
        out.append(Token(kind, m.group(), m.start(), m.end()))
    return out


@dataclass(slots=True)
class Frame:
    """An open ``{`` or ``[``: a block (``kind [label]``), a map or list value of ``key``, a loop."""

    what: str  # root | block | map | list | for | let
    kind: str | None = None
    label: str | None = None
    key: str | None = None
    start: int = 0


@dataclass(frozen=True, slots=True)
class Block:
    kind: str
    label: str | None
    #: offsets: the whole block, and its label (or kind) token
    start: int
    end: int
    name_start: int
    name_end: int
    depth: int


@dataclass(slots=True)
class Outline:
    frames: list[Frame]
    #: what the text's end expects: stmt | value | label | import | let | for | none
    expect: str
    #: the key whose value comes next (expect == value), or the block kind (expect == label)
    key: str | None
    lets: list[tuple[str, int, int, int]] = field(default_factory=list)  # name, start, end, depth
    imports: list[tuple[str, int, int]] = field(default_factory=list)  # path, start, end (the string)
    blocks: list[Block] = field(default_factory=list)
    loop_vars: list[str] = field(default_factory=list)


#: The ``key`` of a for loop's iterable (its ``{`` opens the loop body, not a map).
_FOR = "\0for"


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text.endswith('"') else text[1:]


def outline(text: str) -> Outline:
    """Scan ``text`` (typically the source up to the cursor) into an :class:`Outline`."""
    toks = tokens(text)
    frames = [Frame("root")]
    out = Outline(frames, "stmt", None)
    open_blocks: list[tuple[str, str | None, int, int, int]] = []  # per block frame
    i, n = 0, len(toks)
    mode, key = "stmt", None

    def peek(k: int = 0) -> Token | None:
        return toks[i + k] if i + k < n else None

    # Every branch either consumes a token or hands it to another mode that does; the bound makes
    # a mistake in that a partial outline instead of an editor that hangs on a keystroke.
    budget = 8 * n + 16
    while i < n:
        budget -= 1
        if budget < 0:
            mode = "none"
            break
        t = toks[i]
        top = frames[-1]
        if mode == "stmt" and top.what == "list":
            mode, key = "value", top.key
        if mode == "stmt":
            if t.kind == "punct":
                if t.text == "}" and len(frames) > 1:
                    closed = frames.pop()
                    if closed.what == "block" and open_blocks:
                        kind, label, start, ns, ne = open_blocks.pop()
                        out.blocks.append(Block(kind, label, start, t.end, ns, ne, len(frames)))
                i += 1
                continue
            if t.kind == "name":
                nxt = peek(1)
                if t.text == "import":
                    mode, i = "import", i + 1
                    continue
                if t.text == "let":
                    mode, i = "let", i + 1
                    continue
                if t.text == "for":
                    mode, i = "for", i + 1
                    continue
                if nxt is None:
                    mode, key, i = "label", t.text, i + 1
                    continue
                if nxt.kind == "punct" and nxt.text == "=":
                    mode, key, i = "value", t.text, i + 2
                    continue
                if nxt.kind == "punct" and nxt.text == "{":
                    frames.append(Frame("block", kind=t.text, start=t.start))
                    open_blocks.append((t.text, None, t.start, t.start, t.end))
                    i += 2
                    continue
                if nxt.kind in ("name", "str"):
                    after = peek(2)
                    label = nxt.text if nxt.kind == "name" else _unquote(nxt.text)
                    if after is not None and after.kind == "punct" and after.text == "{":
                        frames.append(Frame("block", kind=t.text, label=label, start=t.start))
                        open_blocks.append((t.text, label, t.start, nxt.start, nxt.end))
                        i += 3
                        continue
                    out.blocks.append(Block(t.text, label, t.start, nxt.end, nxt.start, nxt.end, len(frames)))
                    i += 2  # a short block (`harness none`)
                    if after is None:
                        mode = "none"
                    continue
            if t.kind == "str" and (nxt := peek(1)) is not None and nxt.text == "=":
                mode, key, i = "value", _unquote(t.text), i + 2
                continue
            i += 1  # a stray token: skip it (the parser reports it)
            continue
        if mode == "import":
            if t.kind == "str":
                out.imports.append((_unquote(t.text), t.start, t.end))
                mode = "stmt" if t.closed else "import"
                if not t.closed:
                    break
            else:
                mode = "stmt"
                continue
            i += 1
            continue
        if mode == "let":
            if t.kind == "name":
                out.lets.append((t.text, t.start, t.end, len(frames)))
                nxt = peek(1)
                if nxt is not None and nxt.text == "=":
                    mode, key, i = "value", None, i + 2
                    continue
            mode = "stmt" if i + 1 < n else "none"
            i += 1
            continue
        if mode == "for":
            if t.kind == "name" and t.text != "in":
                out.loop_vars.append(t.text)
                i += 1
                continue
            if t.text == "in":
                mode, key, i = "value", _FOR, i + 1
                continue
            mode = "stmt"
            continue
        # mode == value: one value, then back to statements
        if t.kind == "punct" and t.text == "{":
            frames.append(Frame("for" if key == _FOR else "map", key=key, start=t.start))
            mode, i = "stmt", i + 1
            continue
        if t.kind == "punct" and t.text == "[":
            frames.append(Frame("list", key=key, start=t.start))
            i += 1
            continue
        if t.kind == "punct" and t.text == "]":
            popped = frames.pop() if top.what == "list" else None
            mode = "stmt" if frames[-1].what != "list" else "value"
            i += 1
            if popped is not None and popped.key == _FOR and (nxt := peek()) is not None and nxt.text == "{":
                frames.append(Frame("for", start=nxt.start))  # `for x in [..] {`: the loop body
                i += 1
            continue
        if t.kind == "punct" and t.text == ",":
            i += 1
            continue
        if t.kind == "name" and (nxt := peek(1)) is not None and nxt.text == "(":
            depth, i = 0, i + 1
            while i < n:
                if toks[i].text == "(":
                    depth += 1
                elif toks[i].text == ")":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            if i >= n:
                mode = "none"
                break
            i += 1
            mode = "value" if frames[-1].what == "list" else "stmt"
            continue
        if t.kind == "punct" and t.text in ("}", ";", "=", "(", ")"):
            if top.what == "list":
                i += 1  # stray inside a list: statements would hand it straight back to values
            mode = "stmt"
            continue
        if not t.closed:
            mode = "none"
            break
        i += 1
        nxt = peek()
        if frames[-1].what == "list":
            continue
        if key == _FOR and nxt is not None and nxt.text == "{":
            frames.append(Frame("for", start=nxt.start))  # `for x in xs {`: the loop body
            i += 1
        mode = "stmt"
    if mode == "label" and not text[-1:].isspace():
        mode = "stmt"  # still typing the name itself: complete it as a key
    out.expect, out.key = mode, key
    for kind, label, start, ns, ne in open_blocks:
        out.blocks.append(Block(kind, label, start, len(text), ns, ne, 0))
    return out
