"""Frozen AST nodes of the ``.acx`` language.

Every node carries a :class:`~acx.diagnostics.Span`; spans are excluded from equality so that two
parses of differently laid-out text with the same meaning compare equal (the print → parse
round-trip property relies on that). No lark type appears here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acx.diagnostics import Span

__all__ = [
    "NO_SPAN",
    "Assign",
    "Block",
    "Bool",
    "Call",
    "Comment",
    "Duration",
    "For",
    "Import",
    "Interp",
    "Key",
    "Let",
    "ListV",
    "MapV",
    "Module",
    "Name",
    "Null",
    "Num",
    "Ref",
    "Size",
    "Stmt",
    "Str",
    "Value",
]

#: Span of generated nodes (hypothesis strategies, lowering defaults).
NO_SPAN = Span("<generated>", 1, 1)


@dataclass(frozen=True, slots=True)
class Name:
    """An identifier as written (a let name, a block kind, a bare enum name)."""

    value: str
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Interp:
    """``${name}`` inside a string."""

    name: str
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Str:
    """A string literal: literal text and ``${name}`` interpolations, in order."""

    parts: tuple[str | Interp, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    @property
    def is_plain(self) -> bool:
        return all(isinstance(p, str) for p in self.parts)

    @property
    def plain(self) -> str:
        """The text with interpolations rendered as ``${name}`` (for labels, messages)."""
        return "".join(p if isinstance(p, str) else "${" + p.name + "}" for p in self.parts)


@dataclass(frozen=True, slots=True)
class Num:
    value: int | float
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Duration:
    """``90s``, ``1h30m``, ``500ms``; ``text`` is kept so ``acx fmt`` preserves the author's unit."""

    text: str
    seconds: float
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Size:
    """``512MiB``, ``16GiB``, ``1GB``; ``mib`` is the size in MiB (may be fractional)."""

    text: str
    mib: float
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Bool:
    value: bool
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Null:
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ListV:
    items: tuple[Value, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class MapV:
    """``{ k = v; ... }`` in value position: the same body as a block."""

    body: tuple[Stmt, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Call:
    """``env("X")`` / ``secret("X")``."""

    func: Name
    args: tuple[Value, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Ref:
    """A bare name in value position: a let or loop name, else an enum value."""

    name: str
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


Value = Str | Num | Duration | Size | Bool | Null | ListV | MapV | Call | Ref


@dataclass(frozen=True, slots=True)
class Key:
    """A field name: ``quoted`` when written as a string (``"my-key" = 1``)."""

    name: str
    #: How it was written; the formatter decides quoting itself, so it is not part of equality.
    quoted: bool = field(default=False, compare=False)
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Import:
    path: Str
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Let:
    name: Name
    value: Value
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Assign:
    key: Key
    value: Value
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Block:
    """``kind [label] { body }`` or ``kind label`` (``body is None``)."""

    kind: Name
    label: Name | Str | None
    body: tuple[Stmt, ...] | None
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class For:
    var: Name
    iterable: Value
    body: tuple[Stmt, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


Stmt = Import | Let | Assign | Block | For


@dataclass(frozen=True, slots=True)
class Comment:
    """A ``#`` or ``//`` comment; ``text`` includes the marker; ``line``/``col`` are 1-based."""

    text: str
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class Module:
    file: str
    body: tuple[Stmt, ...]
    comments: tuple[Comment, ...] = field(default=(), compare=False)
