"""Diagnostics: spans, structured messages and their two renderings (code frame, JSON).

A :class:`Diagnostic` is data, not a string: a stable ``code``, a ``severity``, a one-line
``message`` that says what is wrong, an optional ``help`` line that says what to do, a primary
``span`` (file:line:col) or a field ``path`` (``requests[0].execution.max_retries``) and any number
of ``related`` spans (e.g. the first definition of a duplicate key).

Everything in acx that reports bad input builds Diagnostics and raises them inside an
:class:`acx.errors.AcxUserError`; the CLI renders them with :func:`render_text` (code frames when
the source text is at hand) or :func:`render_json` (the editor contract of ``acx check``).

This module imports nothing but the standard library and the leaves :mod:`acx.envref` and
:mod:`acx.secrets`: it is the one piece every layer shares. Code frames hide secrets (same length,
carets stay aligned): literal values of sensitive keys on the framed line, and — when the
diagnostic's ``path`` is a sensitive position by :func:`acx.secrets.is_sensitive_path` — the framed
span itself, wherever the value sits (a continuation line, a list item).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from acx.envref import NAME
from acx.secrets import CONTAINER_KEYS, FRAME_KEY_ENDINGS, NON_SENSITIVE_KEYS, is_sensitive_path

__all__ = [
    "Diagnostic",
    "Related",
    "Span",
    "did_you_mean",
    "render_json",
    "render_text",
    "unique",
]


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source file; lines and columns are 1-based, ``end_*`` inclusive-exclusive."""

    file: str
    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "line": self.line, "col": self.col}
        if self.end_line is not None:
            out["end_line"] = self.end_line
            out["end_col"] = self.end_col
        return out


@dataclass(frozen=True, slots=True)
class Related:
    span: Span
    message: str


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    message: str
    span: Span | None = None
    path: str | None = None
    help: str | None = None
    severity: str = "error"
    related: tuple[Related, ...] = field(default_factory=tuple)

    def location(self) -> str:
        if self.span is not None:
            return str(self.span)
        return self.path or "acx"  # no file to point at (an engine, a flag): the program speaks

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
        }
        if self.span is not None:
            out["span"] = self.span.to_json()
        if self.path is not None:
            out["path"] = self.path
        if self.help:
            out["help"] = self.help
        if self.related:
            out["related"] = [{"span": r.span.to_json(), "message": r.message} for r in self.related]
        return out


def not_utf8(error: Any, code: str, data: bytes, offset: int, path: str) -> Any:
    """``error`` (an :class:`~acx.errors.AcxUserError` class) for a file that is not UTF-8: where the
    first undecodable byte is (line, column in characters; a leading BOM is not counted)."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    if line_start == 0 and data.startswith(b"\xef\xbb\xbf"):
        line_start = 3
    line = data.count(b"\n", 0, offset) + 1
    col = len(data[line_start:offset].decode("utf-8", errors="replace")) + 1
    return error(
        f"{path} is not UTF-8 text: byte 0x{data[offset]:02x} at line {line}, column {col} cannot be decoded",
        code=code,
        span=Span(path, line, col, line, col + 1),
        path=path,
        help="save the file as UTF-8",
    )


def did_you_mean(name: str, candidates: Any, *, cutoff: float = 0.6) -> str | None:
    """The closest candidate to ``name``, or None; used for unknown keys, ids and enum values."""
    import difflib

    pool = [str(c) for c in candidates]
    matches = difflib.get_close_matches(str(name), pool, n=1, cutoff=cutoff)
    if matches:
        return matches[0]
    lowered = {c.lower(): c for c in pool}
    return lowered.get(str(name).lower())


def unique(diags: Any) -> list[Diagnostic]:
    """``diags`` without repeats (same code, message and span), first occurrence kept: a shared
    value (e.g. one ``defaults`` field used by every request) is reported once."""
    seen: set[tuple[str, str, Span | None]] = set()
    out: list[Diagnostic] = []
    for d in diags:
        key = (d.code, d.message, d.span)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _source_lines(file: str, sources: dict[str, str] | None) -> list[str] | None:
    if sources is not None and file in sources:
        return sources[file].splitlines()
    from acx.inputs import MAX_DATASET_BYTES, InputFileError, read_regular_file

    try:
        # Only a regular file of bounded size is framed (never a FIFO or a device); datasets
        # are the largest files a frame points into.
        return read_regular_file(file, max_bytes=MAX_DATASET_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError, InputFileError):
        return None


#: ``key: value`` / ``key = value`` where the key ends like a secret by the redaction rules
#: (:data:`acx.secrets.FRAME_KEY_ENDINGS`: ``api_key``, ``token``, ``password``, ``*_secret``, ...).
_SECRET_ASSIGNMENT = re.compile(
    r"""(?P<key>(?<![A-Za-z0-9_-])["']?[A-Za-z0-9_-]*?"""
    rf"""(?:{"|".join(map(re.escape, FRAME_KEY_ENDINGS))})"""
    r"""["']?\s*[:=]\s*)(?P<value>"[^"]*"|'[^']*'|[^\s,}\]#]+)""",
    re.IGNORECASE,
)


def _mask_secrets(line: str) -> str:
    """Hide literal secret values in a code-frame line (same length, so carets stay aligned)."""

    def mask(m: re.Match[str]) -> str:
        key, value = m.group("key"), m.group("value")
        # References are not secrets: ${VAR}, and .acx calls such as secret("X") / env("X").
        if "${" in value or "(" in value or key.strip("\"' :=").lower() in NON_SENSITIVE_KEYS:
            return m.group(0)
        return key + "*" * len(value)

    return _SECRET_ASSIGNMENT.sub(mask, line)


#: Keys whose every value is secret (reference §2.2 container keys).
_CONTAINER_KEYS = tuple(sorted(CONTAINER_KEYS))
_CONTAINER = "|".join(sorted(_CONTAINER_KEYS, key=len, reverse=True))
#: ``env_variables: {A: x, B: y}`` / ``env_variables = { A = "x" }`` on one line.
_INLINE_CONTAINER = re.compile(
    rf"""(?P<key>(?<![A-Za-z0-9_-])["']?(?:{_CONTAINER})["']?\s*[:=]\s*)\{{(?P<body>(?:\$\{{[^{{}}]*\}}|[^{{}}])*)\}}""",
    re.IGNORECASE,
)
_ENTRY_VALUE = re.compile(r"""(?P<sep>[:=]\s*)(?P<value>"[^"]*"|'[^']*'|\[[^\]]*\]|[^\s,}}\]#]+)""")
#: The first key of a line and whether the line opens a nested block (``key:`` / ``key {``).
_LINE_KEY = re.compile(r"""^\s*(?:-\s+)?["']?(?P<key>[A-Za-z0-9_.-]+)["']?""")
_OPENS_BLOCK = re.compile(r"""[:={]\s*(?:#.*)?$""")
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@\"']*:)(?P<pw>[^@/\s\"']+)(?=@)")


def _is_reference(value: str) -> bool:
    # ${VAR} and the .acx calls secret("X") / env("X") name a secret; they are not one.
    return "${" in value or "(" in value


def _stars(m: re.Match[str], group: str) -> str:
    value = m.group(group)
    start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
    whole = m.group(0)
    return whole[:start] + ("*" * len(value) if not _is_reference(value) else value) + whole[end:]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _under_container(lines: list[str], index: int) -> bool:
    """True when line ``index`` sits (by indentation) inside a block opened by a container key."""
    depth = _indent(lines[index])
    for j in range(index - 1, -1, -1):
        line = lines[j]
        if not line.strip() or line.lstrip().startswith("#") or _indent(line) >= depth:
            continue
        depth = _indent(line)
        m = _LINE_KEY.match(line)
        if m and m.group("key").lower() in _CONTAINER_KEYS and _OPENS_BLOCK.search(line):
            return True
        if depth == 0:
            break
    return False


def _mask_frame_line(lines: list[str], index: int) -> str:
    """Line ``index`` with every literal secret masked, same length so carets stay aligned:
    sensitive keys, values under container keys (inline or by indentation), URL passwords."""
    text = _mask_secrets(lines[index])
    text = _URL_PASSWORD.sub(lambda m: _stars(m, "pw"), text)
    text = _INLINE_CONTAINER.sub(
        lambda m: m.group("key") + "{" + _ENTRY_VALUE.sub(lambda e: _stars(e, "value"), m.group("body")) + "}",
        text,
    )
    if _under_container(lines, index):
        text = _ENTRY_VALUE.sub(lambda e: _stars(e, "value"), text, count=1)
    return text


#: A whole-value reference in a frame (``${VAR}``, ``"${VAR}"``, .acx ``secret("X")``/``env("X")``).
_WHOLE_REFERENCE = re.compile(rf"""^(?:(["']?)\$\{{{NAME}\}}\1|(?:secret|env)\(\s*"{NAME}"\s*\))$""")
#: One step of a field path: ``name``, ``.name`` or ``[3]``.
_PATH_PART = re.compile(r"\[(?P<index>\d+)\]|\.?(?P<key>[^.\[\]]+)")


def _path_parts(path: str) -> tuple[str | int, ...]:
    """``requests[0].model.api_key`` → ``('requests', 0, 'model', 'api_key')``."""
    return tuple(
        int(m.group("index")) if m.group("index") is not None else m.group("key") for m in _PATH_PART.finditer(path)
    )


def _secret_path(path: str | None) -> tuple[str | int, ...] | None:
    """The parts of ``path`` when the value there is a secret by the redaction rules, else None."""
    if not path:
        return None
    parts = _path_parts(path)
    return parts if parts and is_sensitive_path(parts) else None


def _mask_span(text: str, span: Span, path: tuple[str | int, ...]) -> str:
    """``text`` (the span's first line) with the span's part on it masked, same length: the value
    of a sensitive field, wherever it sits (a continuation line, a list item, a block scalar).
    Left alone: a span that is just the field's key (named in the message anyway) and a whole
    ``${VAR}`` reference (it names the secret, it is not one)."""
    start = max(0, span.col - 1)
    end = len(text)
    if span.end_line == span.line and span.end_col is not None and span.end_col > span.col:
        end = min(end, span.end_col - 1)
    part = text[start:end]
    if not part.strip():
        return text
    if str(path[-1]).lower() == part.strip().strip("\"'").lower() or _WHOLE_REFERENCE.match(part.strip()):
        return text
    return text[:start] + re.sub(r"\S", "*", part) + text[end:]


#: Widest code-frame line shown; longer lines are cut to a window around the span, so masking
#: and rendering cost the same for a 10 MB line as for a short one.
_FRAME_WIDTH = 160
_FRAME_BEFORE = 60


_MASK_CONTEXT = 200
_LEADING_TOKEN = re.compile(r"""[^\s,{}\[\]]+""")


def _window(span: Span, lines: list[str]) -> tuple[Span, str]:
    """The framed line, masked, cut to at most ``_FRAME_WIDTH`` characters around ``span`` (with
    ``span`` moved to match). Masking runs on the window plus ``_MASK_CONTEXT`` characters on each
    side, so a key just outside the window still masks its value; a token cut by that region's
    start (it may be the tail of a long secret whose key is further left) is masked whole."""
    index = span.line - 1
    line = lines[index]
    if len(line) <= _FRAME_WIDTH:
        return span, _mask_frame_line(lines, index)
    indent = line[: len(line) - len(line.lstrip())][:_FRAME_BEFORE]
    start = max(0, min(span.col - 1 - _FRAME_BEFORE, len(line) - _FRAME_WIDTH))
    lo = max(len(indent), start - _MASK_CONTEXT)
    hi = min(len(line), start + _FRAME_WIDTH + _MASK_CONTEXT)
    body = line[lo:hi]
    if lo > len(indent):
        body = _LEADING_TOKEN.sub(lambda m: "*" * len(m.group()), body, count=1) if body[:1].strip() else body
    region = list(lines)
    region[index] = indent + body
    masked = _mask_frame_line(region, index)
    offset = start - lo + len(indent)  # where the window starts inside `masked`
    cut = masked[offset : offset + _FRAME_WIDTH] if start >= len(indent) else masked[start : start + _FRAME_WIDTH]
    prefix = "…" if start > 0 else ""
    suffix = "…" if start + _FRAME_WIDTH < len(line) else ""
    shift = start - len(prefix)
    end_col = span.end_col
    if end_col is not None and span.end_line == span.line:
        end_col = max(span.col - shift, min(end_col - shift, len(prefix) + len(cut) + 1))
    return Span(span.file, span.line, span.col - shift, span.end_line, end_col), prefix + cut + suffix


def _frame(
    span: Span, sources: dict[str, str] | None, label: str = "", secret: tuple[str | int, ...] | None = None
) -> list[str]:
    lines = _source_lines(span.file, sources)
    if lines is None or not (1 <= span.line <= len(lines)):
        return []
    span, text = _window(span, lines)
    if secret is not None:
        text = _mask_span(text, span, secret)
    text = text.expandtabs(1)
    gutter = str(span.line)
    pad = " " * len(gutter)
    width = 1
    if span.end_line == span.line and span.end_col is not None and span.end_col > span.col:
        width = span.end_col - span.col
    width = max(1, min(width, max(1, len(text) - span.col + 1)))
    caret = " " * (span.col - 1) + "^" * width
    out = [f" {pad} |", f" {gutter} | {text}", f" {pad} | {caret}{(' ' + label) if label else ''}"]
    return out


def render_text(diagnostics: Any, *, sources: dict[str, str] | None = None, frames: bool = True) -> str:
    """``file:line:col: error[CODE]: message`` plus a code frame and ``help:`` line per diagnostic."""
    chunks: list[str] = []
    for d in diagnostics:
        head = f"{d.location()}: {d.severity}[{d.code}]: {d.message}"
        body: list[str] = [head]
        # A diagnostic about a sensitive field masks its framed value wherever it sits.
        secret = _secret_path(d.path) if frames and (d.span is not None or d.related) else None
        if frames and d.span is not None:
            body.extend(_frame(d.span, sources, secret=secret))
        for rel in d.related:
            body.append(f"  note: {rel.span}: {rel.message}")
            if frames:
                body.extend("  " + ln for ln in _frame(rel.span, sources, secret=secret))
        if d.help:
            body.append(f"  help: {d.help}")
        chunks.append("\n".join(body))
    return "\n".join(chunks)


def render_json(diagnostics: Any, *, valid: bool | None = None) -> str:
    items = [d.to_json() for d in diagnostics]
    errors = sum(1 for d in items if d["severity"] == "error")
    payload = {
        "format_version": 1,
        "valid": (errors == 0) if valid is None else valid,
        "error_count": errors,
        "warning_count": sum(1 for d in items if d["severity"] == "warning"),
        "diagnostics": items,
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)
