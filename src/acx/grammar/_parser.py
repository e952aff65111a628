"""The ``.acx`` parser: text → frozen AST (``acx.grammar._ast``) or syntax diagnostics.

The lark parser (LALR, contextual lexer) is built once per process (``lru_cache``) and cached on
disk under the user cache directory when that is writable, so a warm ``acx check`` pays ~2 ms
instead of ~60 ms for grammar construction. The AST is built by callbacks during the parse; spans
come from the first and last token of each node (the grammar keeps keyword and bracket tokens),
which gives what ``propagate_positions`` would at half the cost. Lark types never leave this
package: every lark error becomes an :class:`acx.errors.AcxSyntaxError` holding one diagnostic
per mistake.

Recovery (one error per mistake, no cascades): for a missing value or a missing ',' the parser
inserts the token that was missing and continues, so later mistakes in the same file are reported
too; any other error stops the file after one diagnostic. An AST is only returned when the file
has no errors, so placeholder tokens never reach the lowering.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import contextvars
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput, VisitError
from lark.lexer import PatternStr

from acx.diagnostics import Diagnostic, Span, not_utf8
from acx.errors import AcxInternalError, AcxSyntaxError
from acx.grammar import _ast as A
from acx.grammar._errors import translate
from acx.inputs import (
    MAX_ACX_BYTES,
    MAX_INT_DIGITS,
    MAX_NESTING_DEPTH,
    InputFileError,
    input_file_error,
    read_regular_file,
)

__all__ = [
    "DURATION_UNITS",
    "SIZE_UNITS_MIB",
    "parse",
    "parse_file",
    "parser_cache_path",
    "read_source",
    "source_overlay",
]

_GRAMMAR = Path(__file__).with_name("acx.lark")
_MAX_ERRORS = 25

#: Seconds per duration unit.
DURATION_UNITS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: MiB per size unit (decimal units are exact fractions of a MiB).
SIZE_UNITS_MIB: dict[str, float] = {
    "B": 1 / 2**20,
    "KB": 1e3 / 2**20,
    "MB": 1e6 / 2**20,
    "GB": 1e9 / 2**20,
    "TB": 1e12 / 2**20,
    "KiB": 1 / 1024,
    "MiB": 1.0,
    "GiB": 1024.0,
    "TiB": 1024.0**2,
}

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]+)")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_INTERP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*")
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "$": "$"}


class _ParseState(threading.local):
    """Per-parse state the cached parser's callbacks write to (the parser is shared, parses are not)."""

    comments: list[Token] | None = None
    file: str = "<string>"
    diagnostics: list[Diagnostic] | None = None
    depth: int = 0


_STATE = _ParseState()


class _TooDeep(Exception):
    """Raised by the lexer when brackets nest past MAX_NESTING_DEPTH (before any tree is built)."""

    def __init__(self, token: Token) -> None:
        self.token = token


def _collect_comment(token: Token) -> Token:
    if _STATE.comments is not None:
        _STATE.comments.append(token)
    return token


def _open_bracket(token: Token) -> Token:
    # The AST builder and the lowering recurse per nesting level: bound the depth while lexing.
    _STATE.depth += 1
    if _STATE.depth > MAX_NESTING_DEPTH:
        raise _TooDeep(token)
    return token


def _close_bracket(token: Token) -> Token:
    _STATE.depth -= 1
    return token


def parser_cache_path() -> str | None:
    """Where lark caches the built parser, or None when no writable cache directory exists."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "acx")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    if not os.access(directory, os.W_OK):
        return None
    return os.path.join(directory, "acx-grammar.lark-cache")


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    options: dict[str, Any] = {
        "parser": "lalr",
        "lexer": "contextual",
        "maybe_placeholders": False,
        "lexer_callbacks": {
            "COMMENT": _collect_comment,
            **dict.fromkeys(("LBRACE", "LSQB", "LPAR"), _open_bracket),
            **dict.fromkeys(("RBRACE", "RSQB", "RPAR"), _close_bracket),
        },
        # The AST is built during the LALR parse (no intermediate tree), and every node's span
        # runs from its first to its last token, which the grammar keeps (named terminals).
        # That replaces lark's propagate_positions: same spans, half the parse time.
        "transformer": _AstBuilder(),
    }
    cache = parser_cache_path()
    text = _GRAMMAR.read_text(encoding="utf-8")
    try:
        return Lark(text, cache=cache or False, **options)
    except OSError:
        # A cache file that cannot be written (read-only home, race): build without it.
        return Lark(text, **options)


def _pattern_of(name: str) -> str | None:
    try:
        term = _lark().get_terminal(name)
    except KeyError:
        return None
    pattern = term.pattern
    return pattern.value if isinstance(pattern, PatternStr) else None


def _plain_parse(text: str) -> Any:
    """Parse without recovery or comment collection (the syntax-error catalog replays examples)."""
    saved = (_STATE.comments, _STATE.file, _STATE.diagnostics, _STATE.depth)
    _STATE.comments, _STATE.file, _STATE.diagnostics, _STATE.depth = None, "<example>", [], 0
    try:
        return _lark().parse(text)
    finally:
        _STATE.comments, _STATE.file, _STATE.diagnostics, _STATE.depth = saved


#: Catalog label → the token whose insertion repairs the mistake (safe: nothing else changes).
_INSERTIONS: dict[str, tuple[str, str]] = {
    "missing_value": ("NAME", "__acx_missing__"),
    "list_comma": ("COMMA", ","),
    "call_comma": ("COMMA", ","),
}


class _Recovery:
    """``on_error`` handler: record the diagnostic, insert the missing token where that is safe."""

    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.text = text
        self.diagnostics: list[Diagnostic] = []
        self.seen: set[int] = set()

    def record(self, exc: UnexpectedInput) -> str | None:
        self.seen.add(id(exc))
        diag, label = translate(exc, file=self.file, text=self.text, parse=_plain_parse, pattern_of=_pattern_of)
        self.diagnostics.append(diag)
        return label

    def __call__(self, exc: UnexpectedInput) -> bool:
        label = self.record(exc)
        if len(self.diagnostics) >= _MAX_ERRORS:
            return False
        insert = _INSERTIONS.get(label or "")
        token = getattr(exc, "token", None)
        if insert is None or token is None or token.type == "$END":
            return False
        ip = exc.interactive_parser
        try:
            ip.feed_token(Token(insert[0], insert[1]))
            ip.feed_token(token)
        except UnexpectedInput:
            return False
        return True


#: Recently parsed texts: the AST is immutable, so one parse serves every reader of the same text
#: (``acx check`` reads a file twice; the language server re-reads unchanged imports per keystroke).
_PARSED: collections.OrderedDict[tuple[str, str], A.Module] = collections.OrderedDict()
_PARSED_MAX = 16
_PARSED_LOCK = threading.Lock()


def parse(text: str, file: str = "<string>") -> A.Module:
    """Parse ``.acx`` source. Raises :class:`AcxSyntaxError` with every syntax diagnostic."""
    key = (file, text)
    with _PARSED_LOCK:
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
            return hit
    module = _parse(text, file)
    with _PARSED_LOCK:
        _PARSED[key] = module
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    return module


def _parse(text: str, file: str) -> A.Module:
    recovery = _Recovery(file, text)
    comments: list[Token] = []
    string_errors: list[Diagnostic] = []
    _STATE.comments, _STATE.file, _STATE.diagnostics, _STATE.depth = comments, file, string_errors, 0
    body: tuple[A.Stmt, ...] | None
    try:
        # With an inline transformer, lark returns what `start` returns (typed as a Tree).
        body = _lark().parse(text, on_error=recovery)  # type: ignore[assignment]
    except _TooDeep as exc:
        raise AcxSyntaxError(
            f"lists, maps, blocks and calls nest more than {MAX_NESTING_DEPTH} levels deep",
            code="E0219",
            span=_tok_span(file, exc.token),
            help=f"the nesting limit is {MAX_NESTING_DEPTH} levels (docs/errors.md#E0219); "
            "flatten the structure (name inner parts with `let`)",
        ) from None
    except UnexpectedInput as exc:
        if id(exc) not in recovery.seen:
            recovery.record(exc)
        body = None
    except VisitError as exc:  # a bug in the AST builder, not the user's input
        raise AcxInternalError(f"AST builder failed on rule {exc.rule}: {exc.orig_exc}") from exc.orig_exc
    finally:
        _STATE.comments, _STATE.diagnostics = None, None
    diagnostics = sorted(
        [*recovery.diagnostics, *string_errors],
        key=lambda d: (d.span.line, d.span.col) if d.span is not None else (0, 0),
    )
    if diagnostics or body is None:
        raise AcxSyntaxError(diagnostics=diagnostics)
    return A.Module(
        file=file,
        body=body,
        comments=tuple(A.Comment(str(t).rstrip(), t.line or 1, t.column or 1) for t in comments),
    )


def parse_file(path: str) -> A.Module:
    return parse(read_source(path), path)


#: Unsaved editor buffers by real path (``acx lsp``): read instead of the file on disk.
_OVERLAY: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("acx_source_overlay", default=None)


@contextlib.contextmanager
def source_overlay(texts: Mapping[str, str]) -> Iterator[None]:
    """Within the block, :func:`read_source` returns ``texts[realpath]`` for the files it names.

    The language server checks an unsaved buffer (and the open buffers it imports) through the
    same code path as ``acx check``; keys may be any spelling of the path."""
    token = _OVERLAY.set({os.path.realpath(k): v for k, v in texts.items()})
    try:
        yield
    finally:
        _OVERLAY.reset(token)


def read_source(path: str, *, at: Span | None = None) -> str:
    """The text of the ``.acx`` file ``path`` (a BOM is dropped), or an E0120 naming the file.

    ``at``: where the file was asked for (an import), shown as the error's span; a file that is
    not UTF-8 is blamed at the line and column of its first undecodable byte instead. Inside
    :func:`source_overlay` an overlaid path is read from there."""
    overlay = _OVERLAY.get()
    if overlay:
        text = overlay.get(os.path.realpath(path))
        if text is not None:
            return text[1:] if text.startswith("\ufeff") else text
    try:
        data = read_regular_file(path, max_bytes=MAX_ACX_BYTES)
    except InputFileError as exc:
        raise input_file_error(AcxSyntaxError, exc, span=at) from None
    except FileNotFoundError:
        raise AcxSyntaxError(
            f"file not found: {path}",
            code="E0120",
            span=at,
            path=path,
            help="check the path (relative to the working directory)",
        ) from None
    except OSError as exc:
        raise AcxSyntaxError(
            f"cannot read {path}: {exc.strerror or exc}",
            code="E0120",
            span=at,
            path=path,
            help="check that the file exists and is readable",
        ) from None
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # tolerate a BOM
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(AcxSyntaxError, "E0120", data, bom + exc.start, path) from None


def _tok_span(file: str, tok: Token) -> Span:
    return Span(file, tok.line or 1, tok.column or 1, tok.end_line, tok.end_column)


def _join(first: Span, last: Span) -> Span:
    return Span(first.file, first.line, first.col, last.end_line, last.end_col)


class _AstBuilder(Transformer[Token, Any]):
    """Callbacks of the LALR parse → ``acx.grammar._ast`` nodes; string errors are collected."""

    # -- helpers ---------------------------------------------------------------------------
    @property
    def file(self) -> str:
        return _STATE.file

    def span(self, item: Any) -> Span:
        if isinstance(item, Token):
            return _tok_span(self.file, item)
        return item.span  # type: ignore[no-any-return]

    def between(self, first: Any, last: Any) -> Span:
        return _join(self.span(first), self.span(last))

    def name(self, tok: Token) -> A.Name:
        return A.Name(str(tok), _tok_span(self.file, tok))

    # -- structure -------------------------------------------------------------------------
    def start(self, children: list[Any]) -> tuple[A.Stmt, ...]:
        return children[0]  # type: ignore[no-any-return]

    def body(self, children: list[Any]) -> tuple[A.Stmt, ...]:
        return tuple(children)

    def import_stmt(self, children: list[Any]) -> A.Import:
        kw, path = children
        return A.Import(path, self.between(kw, path))

    def let_stmt(self, children: list[Any]) -> A.Let:
        kw, name, value = children
        return A.Let(self.name(name), value, self.between(kw, value))

    def for_stmt(self, children: list[Any]) -> A.For:
        kw, var, iterable, _lb, body, rb = children
        return A.For(self.name(var), iterable, body, self.between(kw, rb))

    def assign(self, children: list[Any]) -> A.Assign:
        key, value = children
        return A.Assign(key, value, self.between(key, value))

    def block(self, children: list[Any]) -> A.Block:
        kind = children[0]
        label = children[1] if len(children) == 5 else None
        return A.Block(self.name(kind), label, children[-2], self.between(kind, children[-1]))

    def short_block(self, children: list[Any]) -> A.Block:
        kind, label = children
        return A.Block(self.name(kind), label, None, self.between(kind, label))

    def bare_key(self, children: list[Any]) -> A.Key:
        tok = children[0]
        return A.Key(str(tok), False, _tok_span(self.file, tok))

    def quoted_key(self, children: list[Any]) -> A.Key:
        s: A.Str = children[0]
        if not s.is_plain:
            self._error("E0105", "a key cannot contain ${...} interpolation", s.span, "write the key literally")
        return A.Key(s.plain, True, s.span)

    def name_label(self, children: list[Any]) -> A.Name:
        return self.name(children[0])

    def string_label(self, children: list[Any]) -> A.Str:
        return children[0]  # type: ignore[no-any-return]

    # -- values ----------------------------------------------------------------------------
    def string(self, children: list[Any]) -> A.Str:
        tok = children[0]
        span = _tok_span(self.file, tok)
        if tok.type == "MLSTRING":
            return A.Str(self._decode_block(str(tok)[3:-3], span), span)
        return A.Str(self._decode(str(tok)[1:-1], lambda off: (span.line, span.col + 1 + off)), span)

    def _decode_block(self, raw: str, span: Span) -> tuple[str | A.Interp, ...]:
        """A ``\"\"\"`` string: the text between the opening line and the closing ``\"\"\"``,
        with the closing delimiter's indentation removed from every line; it ends with a newline
        (like a YAML ``|`` block, so `.acx`/YAML twins stay equal)."""
        lines = raw.replace("\r\n", "\n").split("\n")  # CRLF files: the text keeps plain newlines
        help = 'start the text on the line after the opening """ and put the closing """ on its own line'
        if len(lines) < 2 or lines[0].strip(" \t"):
            self._error("E0115", 'a multi-line string starts on the line after its opening """', span, help)
            return ("",)
        if lines[-1].strip(" \t"):
            self._error("E0115", 'the closing """ of a multi-line string must be on its own line', span, help)
            return ("",)
        indent = lines[-1]
        kept: list[str] = []
        origins: list[tuple[int, int]] = []  # source (line, col) of each kept line's first char
        for i, line in enumerate(lines[1:-1], start=1):
            if line.startswith(indent):
                kept.append(line[len(indent) :])
            elif not line.strip(" \t"):
                kept.append("")  # a blank line may be indented less than the closing delimiter
            else:
                at = Span(span.file, span.line + i, 1, span.line + i, len(line) + 1)
                self._error(
                    "E0115",
                    'this line is indented less than the closing """ of its multi-line string',
                    at,
                    'indent every line of the string at least as far as the closing """',
                )
                kept.append(line.lstrip(" \t"))
            origins.append((span.line + i, len(indent) + 1))
        starts = [0]
        for text in kept:
            starts.append(starts[-1] + len(text) + 1)

        def pos(offset: int) -> tuple[int, int]:
            row = bisect.bisect_right(starts, offset) - 1
            line, col = origins[min(row, len(origins) - 1)]
            return line, col + offset - starts[row]

        return self._decode("\n".join(kept) + "\n", pos)

    def number(self, children: list[Any]) -> A.Num:
        tok = children[0]
        text = str(tok)
        if len(text.lstrip("-")) > MAX_INT_DIGITS and not any(c in text for c in ".eE"):
            self._error(
                "E0219",
                f"an integer of {len(text):,} digits (the limit is {MAX_INT_DIGITS})",
                _tok_span(self.file, tok),
                "no acx field takes a number this large; quote it if it is meant as text",
            )
            return A.Num(0, _tok_span(self.file, tok))
        value: int | float = float(text) if any(c in text for c in ".eE") else int(text)
        return A.Num(value, _tok_span(self.file, tok))

    def duration(self, children: list[Any]) -> A.Duration:
        tok = children[0]
        seconds = sum(float(n) * DURATION_UNITS[u] for n, u in _DURATION_PART.findall(str(tok)))
        return A.Duration(str(tok), seconds, _tok_span(self.file, tok))

    def size(self, children: list[Any]) -> A.Size:
        tok = children[0]
        match = _SIZE_RE.fullmatch(str(tok))
        assert match is not None  # the SIZE terminal guarantees the shape
        mib = float(match.group(1)) * SIZE_UNITS_MIB[match.group(2)]
        return A.Size(str(tok), mib, _tok_span(self.file, tok))

    def true(self, children: list[Any]) -> A.Bool:
        return A.Bool(True, self.span(children[0]))

    def false(self, children: list[Any]) -> A.Bool:
        return A.Bool(False, self.span(children[0]))

    def null(self, children: list[Any]) -> A.Null:
        return A.Null(self.span(children[0]))

    def list_lit(self, children: list[Any]) -> A.ListV:
        items = tuple(c for c in children[1:-1] if not isinstance(c, Token))
        return A.ListV(items, self.between(children[0], children[-1]))

    def map_lit(self, children: list[Any]) -> A.MapV:
        lb, body, rb = children
        return A.MapV(body, self.between(lb, rb))

    def call(self, children: list[Any]) -> A.Call:
        func = children[0]
        args = tuple(c for c in children[1:-1] if not isinstance(c, Token))
        return A.Call(self.name(func), args, self.between(func, children[-1]))

    def ref(self, children: list[Any]) -> A.Ref:
        tok = children[0]
        return A.Ref(str(tok), _tok_span(self.file, tok))

    # -- strings ---------------------------------------------------------------------------
    def _error(self, code: str, message: str, span: Span, help: str) -> None:
        if _STATE.diagnostics is not None:
            _STATE.diagnostics.append(Diagnostic(code=code, message=message, span=span, help=help))

    def _decode(self, raw: str, pos: Callable[[int], tuple[int, int]]) -> tuple[str | A.Interp, ...]:
        """Unescape and split ``${name}`` interpolations; ``$${`` is a literal ``${``.

        ``pos`` maps an offset in ``raw`` to its source (line, col), for the spans of errors."""
        parts: list[str | A.Interp] = []
        buf: list[str] = []
        i, n = 0, len(raw)

        def at(offset: int, width: int = 1) -> Span:
            line, col = pos(offset)
            return Span(self.file, line, col, line, col + width)

        while i < n:
            c = raw[i]
            if c == "\\":
                nxt = raw[i + 1] if i + 1 < n else ""
                if nxt in _ESCAPES:
                    buf.append(_ESCAPES[nxt])
                    i += 2
                elif nxt == "u" and _HEX4.fullmatch(raw[i + 2 : i + 6]):
                    code = int(raw[i + 2 : i + 6], 16)
                    low = raw[i + 8 : i + 12] if raw.startswith("\\u", i + 6) else ""
                    if 0xD800 <= code <= 0xDBFF and _HEX4.fullmatch(low) and 0xDC00 <= int(low, 16) <= 0xDFFF:
                        # A UTF-16 surrogate pair (as JSON writes astral characters): one character.
                        buf.append(chr(0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)))
                        i += 12
                    elif 0xD800 <= code <= 0xDFFF:
                        self._error(
                            "E0105",
                            f"invalid escape '\\u{raw[i + 2 : i + 6]}': a lone UTF-16 surrogate is not a character",
                            at(i, 6),
                            "write the character itself, or a high+low surrogate pair (e.g. \\uD83D\\uDE00)",
                        )
                        i += 6
                    else:
                        buf.append(chr(code))
                        i += 6
                else:
                    self._error(
                        "E0105",
                        f"invalid escape '\\{nxt}' in a string",
                        at(i, 2),
                        'valid escapes: \\" \\\\ \\n \\t \\r \\$ \\uXXXX',
                    )
                    i += 2
            elif raw.startswith("$${", i):
                buf.append("${")
                i += 3
            elif raw.startswith("${", i):
                close = raw.find("}", i + 2)
                name = raw[i + 2 : close] if close >= 0 else ""
                if close < 0 or not _INTERP_NAME.fullmatch(name):
                    self._error(
                        "E0105",
                        "malformed interpolation: expected ${name}",
                        at(i, 2 if close < 0 else close - i + 1),
                        "interpolate a let or loop name as ${name}; write a literal '${' as '$${'",
                    )
                    i += 2
                    continue
                if buf:
                    parts.append("".join(buf))
                    buf = []
                parts.append(A.Interp(name, at(i, close - i + 1)))
                i = close + 1
            else:
                buf.append(c)
                i += 1
        if buf:
            parts.append("".join(buf))
        return tuple(parts)
