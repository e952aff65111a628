"""``acx lsp``: the ``.acx`` language server on stdin/stdout (docs/editors.md).

The server lives in :mod:`acx.lsp`, which builds on the CLI's own commands (``check``, ``explain``,
``config docs``, ``fmt``); it is imported here by name, like a registry entry, so the CLI does not
depend on it. pygls and lsprotocol are the optional ``lsp`` extra: without them the command says
how to install them.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

__all__ = ["register"]

#: The server module, named as a string (acx.lsp imports acx.cli; the reverse edge would be a cycle).
_SERVER = "acx.lsp"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lsp",
        help="run the .acx language server (Language Server Protocol over stdio)",
        description="Serve diagnostics, completion, hover, go to definition, symbols, formatting and "
        "rename for .acx files to an editor over stdin/stdout (docs/editors.md).",
    )
    p.add_argument("--stdio", action="store_true", help="speak over stdin/stdout (the default and only transport)")
    p.add_argument(
        "--debounce-ms",
        type=int,
        default=200,
        metavar="MS",
        help="wait this long after an edit before checking the document (default 200)",
    )
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from acx.errors import AcxUserError

    if not 0 <= args.debounce_ms <= 10_000:
        raise AcxUserError(
            f"--debounce-ms {args.debounce_ms} is out of range",
            code="E0672",
            path="--debounce-ms",
            help="give 0 to 10000 milliseconds",
        )
    try:
        importlib.import_module("pygls")
        importlib.import_module("lsprotocol")
    except ModuleNotFoundError as exc:
        raise AcxUserError(
            f"acx lsp needs the `{exc.name}` package, which is not installed",
            code="E0670",
            path="acx lsp",
            help="install the language-server extra: pip install 'acx-eval[lsp]'",
        ) from None
    importlib.import_module(_SERVER).serve(debounce_ms=args.debounce_ms)
    return 0
