"""The ``acx`` command.

Each sub-command lives in its own module exposing ``register(subparsers)``; a handler returns an
exit code. Exit codes: 0 ok, 1 failure, 2 usage or input error, 130 interrupted. Bad input never
produces a traceback: :class:`acx.errors.AcxUserError` is rendered as diagnostics.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["check_file", "component_field_rows", "main", "render_explain"]

#: What the language server (acx.lsp) builds on, so its diagnostics and hovers are exactly the
#: commands' own: `acx check`'s per-file check, `acx config docs`' field rows and `acx explain`'s
#: text rendering. Imported on first use (`acx --help` stays fast).
_LAZY = {
    "check_file": ("acx.cli._lang", "check_file"),
    "component_field_rows": ("acx.cli._catalog", "component_field_rows"),
    "render_explain": ("acx.cli._explain", "render_text"),
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'acx.cli' has no attribute {name!r}")
    return getattr(importlib.import_module(where[0]), where[1])


#: Modules that contribute sub-commands, in help order.
_COMMAND_MODULES = (
    "acx.cli._compile",
    "acx.cli._explain",
    "acx.cli._validate",
    "acx.cli._lang",
    "acx.cli._run",
    "acx.cli._regrade",
    "acx.cli._results",
    "acx.cli._report",
    "acx.cli._envcmd",
    "acx.cli._cache",
    "acx.cli._catalog",
    "acx.cli._lsp",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"acx: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from acx import __version__

    parser = _Parser(
        prog="acx",
        description="Compile agent-evaluation specs into inspectable execution plans and run them.",
    )
    parser.add_argument("--version", action="version", version=f"acx {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def _standard_streams() -> None:
    """Started with stdin, stdout or stderr closed (``2>&-``): point the descriptor at /dev/null.

    Otherwise the first file acx opens (a journal, a result) gets descriptor 2 and whatever is
    written to "stderr" lands in it, and ``sys.stderr`` is None.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:  # the lowest free descriptor is fd itself; anything else: leave it
                os.close(opened)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's stdout
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the process's stderr


def main(argv: Sequence[str] | None = None) -> int:
    from acx.errors import AcxError, AcxInternalError, AcxUserError

    _standard_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except AcxUserError as exc:
        if getattr(args, "format", None) == "json":
            sys.stdout.write(exc.to_json() + "\n")
        else:
            sys.stderr.write(exc.render() + "\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("acx: interrupted\n")
        return 130
    except AcxInternalError as exc:
        sys.stderr.write(f"acx: internal error (please report): {exc}\n")
        return 70
    except AcxError as exc:
        sys.stderr.write(f"acx: error: {exc}\n")
        return exc.exit_code
    except BrokenPipeError:
        return 1
    except Exception as exc:  # a bug: say so plainly; the traceback only on request
        if os.environ.get("ACX_DEBUG"):
            raise
        sys.stderr.write(
            f"acx: internal error (please report): {type(exc).__name__}: {exc}\n"
            "  set ACX_DEBUG=1 to see the traceback\n"
        )
        return 70
