"""Syntax errors → friendly diagnostics.

Lark reports internal terminal names (``RBRACE``, ``LSQB``) and parser states; users need "missing
value after '='". Two tools do the translation: a catalog of malformed examples matched against
the failing parser state (``UnexpectedInput.match_examples``, the technique lark uses for its own
grammar language), and a few character-level checks for what never becomes a token (an
unterminated string, a YAML-style ``key: value``, an unknown unit). Every message names the place
and says what to write instead.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from acx.diagnostics import Diagnostic, Related, Span

__all__ = ["CATALOG", "SYNTAX_CODES", "CatalogEntry", "describe_terminal", "translate"]

#: Every syntax code this module emits, with a one-line meaning (docs/errors.md mirrors it).
SYNTAX_CODES: dict[str, str] = {
    "E0101": "unexpected token",
    "E0102": "unexpected character",
    "E0103": "unclosed bracket at end of file",
    "E0104": "unterminated string",
    "E0105": "invalid escape or interpolation in a string",
    "E0106": "missing value after '='",
    "E0107": "':' used instead of '='",
    "E0108": "unknown unit after a number",
    "E0109": "missing ',' between list items",
    "E0110": "unmatched closing bracket",
    "E0111": "missing '=' between a key and its value",
    "E0112": "malformed let, for or import statement",
    "E0113": "a value where a statement was expected",
    "E0114": "'=' after a complete statement",
    "E0115": 'malformed multi-line (""") string',
}


@dataclass(frozen=True)
class CatalogEntry:
    code: str
    message: str
    help: str
    examples: tuple[str, ...]


#: Malformed snippets → the message their failure state deserves. Each snippet must fail at
#: the state the entry describes (tests/grammar/test_errors.py checks that every snippet maps
#: to its own entry).
CATALOG: dict[str, CatalogEntry] = {
    "missing_value": CatalogEntry(
        "E0106",
        "missing value after '='",
        "write a value after '=': a string, number, duration, size, list, map or name",
        ("a = }", "a = ]", "a = ;", "a { b = }", "let a = }", "a = )", "a = =", "a { b = ; }"),
    ),
    "list_comma": CatalogEntry(
        "E0109",
        "missing ',' between list items",
        "separate list items with ',': [a, b]",
        (
            "a = [1 2]",
            'a = ["x" "y"]',
            "a = [x y]",
            "a = [1 x]",
            "a = [[] []]",
            "a = [{} {}]",
            "a = [1, 2 3]",
            "a = [1, x y]",
            'a = [1, "x" "y"]',
            "a = [1, [] []]",
        ),
    ),
    "call_comma": CatalogEntry(
        "E0109",
        "missing ',' between function arguments",
        "separate arguments with ','; env() and secret() take one string: env(\"NAME\")",
        ('a = f("x" "y")', "a = f(1 2)", "a = f(x y)", 'a = f(1, "x" "y")'),
    ),
    "unmatched_close": CatalogEntry(
        "E0110",
        "unmatched closing bracket",
        "remove it, or add the opening bracket it closes",
        ("}", "a = 1 }", "a { } }", "]", "a = 1 ]", ")", "a = 1 )"),
    ),
    "missing_equals": CatalogEntry(
        "E0111",
        "missing '=' between a key and its value",
        "fields are written `key = value`; blocks are written `kind [label] { ... }`",
        (
            "a 1",
            "a 1s",
            "a 1GiB",
            "a [1]",
            'a "x" 1',
            "a x 1",
            'a "x" "y"',
            'a x "y"',
            '"a" 1',
            '"a" {',
            "a x [",
            "a x =",
        ),
    ),
    "bad_let": CatalogEntry(
        "E0112",
        "malformed `let`: write `let NAME = value`",
        'a let binds a name to a value: let image = "python:3.12"',
        ("let = 1", "let 1", 'let "a" = 1', "let a 1", "let a {", "let a"),
    ),
    "bad_for": CatalogEntry(
        "E0112",
        "malformed `for`: write `for NAME in [ ... ] { ... }`",
        'a loop repeats its body per item: for m in ["a", "b"] { run "r-${m}" { ... } }',
        ("for in [1] {}", "for x [1] {}", "for x in [1] a", "for x in [1] }", "for x in {"),
    ),
    "bad_import": CatalogEntry(
        "E0112",
        'malformed `import`: write `import "relative/path.acx"`',
        "the imported path is a string relative to the importing file",
        ("import x", "import 1", "import {", "import"),
    ),
    "value_as_statement": CatalogEntry(
        "E0113",
        "a value where a statement was expected",
        "a statement is `key = value`, `kind [label] { ... }`, `let`, `for` or `import`",
        (
            "1",
            "1s",
            "1GiB",
            "true",
            "[1]",
            "a { 1 }",
            "a { true }",
            "a { [1] }",
            "=",
            "a { = }",
            "{",
            "a = 1 2",
            "a = 1 true",
            "a = 1 [1]",
            "a = 1 1s",
            "a = 1 {",
            "a { b = 1 2 }",
        ),
    ),
    "double_assign": CatalogEntry(
        "E0114",
        "unexpected '=': the statement before it is already complete",
        "did the previous line lose its value? every field is `key = value` on its own",
        ("a = b = 1", "a = 1 = 2", 'a = "x" = 1', "a { b = c = 1 }", "a = [] = 1"),
    ),
}

#: Human names of terminals (a PatternRE cannot describe itself).
_TERMINAL_LABELS: dict[str, str] = {
    "NAME": "a name",
    "STRING": "a string",
    "MLSTRING": "a string",
    "NUMBER": "a number",
    "DURATION": "a duration like 30m",
    "SIZE": "a size like 16GiB",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LSQB": "'['",
    "RSQB": "']'",
    "RPAR": "')'",
    "$END": "end of file",
}

_VALUE_ONLY = frozenset({"NUMBER", "DURATION", "SIZE", "TRUE", "FALSE", "NULL", "LSQB", "LBRACE"})
_VALUE_TERMINALS = frozenset(
    {"STRING", "MLSTRING", "NUMBER", "DURATION", "SIZE", "TRUE", "FALSE", "NULL", "LSQB", "LBRACE", "NAME"}
)


def describe_terminal(name: str, pattern_of: Callable[[str], str | None]) -> str:
    if name in _TERMINAL_LABELS:
        return _TERMINAL_LABELS[name]
    literal = pattern_of(name)
    return f"'{literal}'" if literal is not None else name.lower()


def _expected_text(accepts: Iterable[str], pattern_of: Callable[[str], str | None]) -> str:
    names = set(accepts)
    parts: list[str] = []
    if names & {"STRING", "NUMBER", "DURATION", "SIZE", "TRUE"} and "LSQB" in names:
        parts.append("a value")
        names -= _VALUE_TERMINALS  # names and `{` are values here too
    labels = sorted({describe_terminal(n, pattern_of) for n in names})
    parts.extend(labels)
    if not parts:
        return "nothing more"
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _token_text(token: Any) -> str:
    if token.type == "$END":
        return "end of file"
    text = str(token)
    if len(text) > 30:
        text = text[:27] + "..."
    return f"'{text}'"


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _end_span(file: str, text: str) -> Span:
    stripped = len(text.rstrip())
    pos = max(0, stripped - 1) if stripped else 0
    line, col = _line_col(text, pos)
    return Span(file, line, col + (1 if stripped else 0))


_OPEN = {"{": "}", "[": "]", "(": ")"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _unclosed_opener(text: str) -> int | None:
    """Offset of the innermost bracket still open at end of file (strings and comments skipped)."""
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] not in '"\n':
                i += 2 if text[i] == "\\" else 1
        elif c == "#" or text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif c in _OPEN:
            stack.append(i)
        elif c in _CLOSE and stack and text[stack[-1]] == _CLOSE[c]:
            stack.pop()
        i += 1
    return stack[-1] if stack else None


def _state_of(exc: UnexpectedInput) -> Any:
    """The LALR state and what it accepts (not the whole stack: nesting depth must not matter).

    The accepted set is computed against the whole stack, so it tells a list (`,` or `]`) from a
    block body (a statement or `}`) even where LALR merged the states themselves.
    """
    state = getattr(exc, "state", None)
    accepts = getattr(exc, "accepts", None) or getattr(exc, "expected", None) or ()
    return (getattr(state, "position", state), frozenset(accepts))


@functools.lru_cache(maxsize=4)
def _catalog_index(parse: Callable[[str], Any]) -> tuple[dict[tuple[Any, str], str], dict[Any, str]]:
    """(state, token type) → label and state → label, learnt by parsing the catalog examples.

    lark's own ``match_examples`` compares whole parser stacks, so an example only matches at the
    nesting depth it was written at; matching on the top state makes one example cover all depths.
    """
    exact: dict[tuple[Any, str], str] = {}
    loose: dict[Any, str] = {}
    for label, entry in CATALOG.items():
        for example in entry.examples:
            try:
                parse(example)
            except UnexpectedToken as exc:
                state = _state_of(exc)
                exact.setdefault((state, exc.token.type), label)
                loose.setdefault(state, label)
            except UnexpectedInput:
                continue
    return exact, loose


def _catalog_label(exc: UnexpectedInput, parse: Callable[[str], Any]) -> str | None:
    if not isinstance(exc, UnexpectedToken):
        return None
    exact, loose = _catalog_index(parse)
    state = _state_of(exc)
    label = exact.get((state, exc.token.type)) or loose.get(state)
    if label is None:
        # States the examples did not reach: the accepted set alone still identifies the mistake.
        label = _BY_ACCEPTS.get(state[1])
    if label is None and {"FOR", "IMPORT", "LET"} <= state[1] and exc.token.type in _VALUE_ONLY:
        label = "value_as_statement"
    return label


_BY_ACCEPTS: dict[frozenset[str], str] = {
    frozenset({"COMMA", "RSQB"}): "list_comma",
    frozenset({"COMMA", "RPAR"}): "call_comma",
    _VALUE_TERMINALS: "missing_value",
}


def _token_span(file: str, token: Any) -> Span:
    return Span(file, token.line, token.column, token.end_line, token.end_column)


def translate(
    exc: UnexpectedInput,
    *,
    file: str,
    text: str,
    parse: Callable[[str], Any],
    pattern_of: Callable[[str], str | None],
) -> tuple[Diagnostic, str | None]:
    """The diagnostic for a lark error, and the catalog label it matched (for recovery)."""
    if isinstance(exc, UnexpectedCharacters):
        return _characters(exc, file, text), None
    if not isinstance(exc, UnexpectedToken) or exc.token.type == "$END":  # (UnexpectedEOF: Earley only)
        return _eof(file, text, exc, pattern_of), None
    token = exc.token
    label = _catalog_label(exc, parse)
    span = _token_span(file, token)
    if label == "missing_value":
        span = _equals_span(file, text, token, span)
    if label is not None:
        entry = CATALOG[label]
        return Diagnostic(
            code=entry.code, message=f"{entry.message}, found {_token_text(token)}", span=span, help=entry.help
        ), label
    expected = _expected_text(exc.accepts or exc.expected, pattern_of)
    return Diagnostic(
        code="E0101",
        message=f"unexpected {_token_text(token)}; expected {expected}",
        span=span,
        help="check the statement before this point; see docs/language.md for the syntax",
    ), None


def _equals_span(file: str, text: str, token: Any, fallback: Span) -> Span:
    """Point a missing value at its '=' (the token found is often on a later line)."""
    pos = getattr(token, "start_pos", None)
    if pos is None and getattr(token, "type", None) == "$END":
        pos = len(text)
    if pos is None:
        return fallback
    i = pos - 1
    while i >= 0 and text[i] in " \t\r\n":
        i -= 1
    if i < 0 or text[i] != "=":
        return fallback
    line, col = _line_col(text, i)
    return Span(file, line, col, line, col + 1)


def _eof(file: str, text: str, exc: UnexpectedInput, pattern_of: Callable[[str], str | None]) -> Diagnostic:
    opener = _unclosed_opener(text)
    end = _end_span(file, text)
    if opener is not None:
        ch = text[opener]
        line, col = _line_col(text, opener)
        return Diagnostic(
            code="E0103",
            message=f"'{ch}' is never closed: the file ends before the matching '{_OPEN[ch]}'",
            span=end,
            help=f"add '{_OPEN[ch]}' where the block or list ends",
            related=(Related(Span(file, line, col, line, col + 1), f"'{ch}' opened here"),),
        )
    accepts = getattr(exc, "accepts", None) or getattr(exc, "expected", None) or ()
    if frozenset(accepts) == _VALUE_TERMINALS:
        entry = CATALOG["missing_value"]
        return Diagnostic(
            code=entry.code,
            message=f"{entry.message}, found end of file",
            span=_equals_span(file, text, getattr(exc, "token", None), end),
            help=entry.help,
        )
    expected = _expected_text(accepts, pattern_of)
    return Diagnostic(
        code="E0101",
        message=f"unexpected end of file; expected {expected}",
        span=end,
        help="complete the last statement",
    )


_UNIT_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?([A-Za-z_][A-Za-z0-9_]*)")


def _characters(exc: UnexpectedCharacters, file: str, text: str) -> Diagnostic:
    pos = exc.pos_in_stream or 0
    line, col = exc.line, exc.column
    ch = text[pos] if pos < len(text) else ""
    one = Span(file, line, col, line, col + 1)
    if ch == '"' and pos >= 2 and text[pos - 2 : pos + 1] == '"""':
        return Diagnostic(
            code="E0104",
            message='unterminated multi-line string: no closing """',
            span=Span(file, line, col - 2, line, col + 1),
            help='close the string with """ on a line of its own',
        )
    if ch == '"':
        eol = text.find("\n", pos)
        eol = len(text) if eol < 0 else eol
        return Diagnostic(
            code="E0104",
            message="unterminated string: no closing '\"' on this line",
            span=Span(file, line, col, line, col + (eol - pos)),
            help='close the string with \'"\'; write a newline inside a string as \\n, or use a """ block',
        )
    if ch == ":":
        return Diagnostic(
            code="E0107",
            message="':' is not an assignment in acx",
            span=one,
            help="write `key = value` (YAML's `key: value` becomes `key = value`)",
        )
    if ch == "'":
        return Diagnostic(
            code="E0102",
            message='unexpected character "\'": strings use double quotes',
            span=one,
            help="write \"text\" instead of 'text'",
        )
    unit = _UNIT_RE.match(text, pos)
    if ch.isdigit() and unit is not None:
        end = unit.end()
        return Diagnostic(
            code="E0108",
            message=f"unknown unit '{unit.group(1)}' in '{text[pos:end]}'",
            span=Span(file, line, col, line, col + (end - pos)),
            help="durations use ms, s, m, h, d (90s, 1h30m); sizes use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (16GiB)",
        )
    shown = repr(ch)[1:-1] if ch else "end of file"
    return Diagnostic(
        code="E0102",
        message=f"unexpected character '{shown}'",
        span=one,
        help="remove it; names are letters, digits, '_' and inner '-', strings are double-quoted",
    )
