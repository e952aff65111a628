"""acx.lsp: the ``.acx`` language server (``acx lsp``, stdio) and the analysis behind it.

The analysis (what to complete, hover, diagnose at a position) is pure functions over the
compiler's and the CLI's own APIs, usable without a protocol; :func:`serve` runs the Language
Server Protocol over stdin/stdout and is the only place pygls and lsprotocol are imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "Completion",
    "Location",
    "Symbol",
    "TextEdit",
    "check_buffer",
    "complete",
    "definition",
    "document_symbols",
    "format_buffer",
    "hover",
    "rename_let",
    "serve",
]

if TYPE_CHECKING:
    from acx.lsp._analysis import (
        Completion,
        Location,
        Symbol,
        TextEdit,
        check_buffer,
        complete,
        definition,
        document_symbols,
        format_buffer,
        hover,
        rename_let,
    )
    from acx.lsp._server import serve


def __getattr__(name: str) -> Any:
    # Lazy: the analysis imports the compiler on first use; only `serve` imports pygls.
    if name == "serve":
        from acx.lsp import _server

        return _server.serve
    if name in __all__:
        from acx.lsp import _analysis

        return getattr(_analysis, name)
    raise AttributeError(f"module 'acx.lsp' has no attribute {name!r}")
