"""acx.grammar: the ``.acx`` language — grammar, parser, AST with spans, formatter.

lark is used only inside this package; callers get frozen AST nodes (:mod:`acx.grammar._ast`)
or :class:`acx.errors.AcxSyntaxError` with diagnostics. Importing this package is cheap: the
parser is built on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["format_source", "parse", "parse_file", "print_module", "read_source", "source_overlay", "syntax"]

if TYPE_CHECKING:
    from acx.grammar import _ast as syntax
    from acx.grammar._format import format_source, print_module
    from acx.grammar._parser import parse, parse_file, read_source, source_overlay


def __getattr__(name: str) -> Any:
    # Lazy: `import acx.grammar` must not import lark (keeps `acx --help` fast).
    if name == "syntax":
        # The syntax tree's node classes (what `parse` returns), for tools that walk it.
        from acx.grammar import _ast

        return _ast
    if name in ("parse", "parse_file", "read_source", "source_overlay"):
        from acx.grammar import _parser

        return getattr(_parser, name)
    if name in ("format_source", "print_module"):
        from acx.grammar import _format

        return getattr(_format, name)
    raise AttributeError(f"module 'acx.grammar' has no attribute {name!r}")
