"""``acx check`` and ``acx fmt``: the language commands.

``acx check FILE...`` parses, lowers and schema-checks every file (``.acx``, YAML or JSON) and
reports every diagnostic of every file; ``--format json`` is the editor contract
(``acx.diagnostics.render_json``). ``acx fmt`` rewrites ``.acx`` files in the canonical style;
``--check`` only reports (exit 1 when a file would change) and ``--diff`` prints a unified diff.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["check_file", "check_library", "is_library", "register"]


def register(subparsers: Any) -> None:
    check = subparsers.add_parser(
        "check",
        help="check .acx/YAML specs: syntax, names, types (all files, all errors)",
        description="Parse, lower and type-check each FILE; report every problem. Exit 0 when all "
        "files are valid, 2 otherwise.",
    )
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    check.set_defaults(handler=_check)

    fmt = subparsers.add_parser(
        "fmt",
        help="format .acx files in the canonical style",
        description="Rewrite each .acx FILE in the one canonical style (comments preserved). "
        "FILE '-' formats stdin to stdout.",
    )
    fmt.add_argument("files", nargs="+", metavar="FILE")
    fmt.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    fmt.add_argument("--diff", action="store_true", help="write nothing; print a unified diff of the changes")
    fmt.set_defaults(handler=_fmt)


def is_library(path: str) -> bool:
    """True when an .acx file holds only imports, lets and recipes (a file meant to be imported)."""
    from acx.grammar import _ast as A
    from acx.grammar._parser import parse_file

    module = parse_file(path)
    return bool(module.body) and all(
        isinstance(s, A.Import | A.Let) or (isinstance(s, A.Block) and s.kind.value == "recipe") for s in module.body
    )


def check_library(path: str) -> list[Any]:
    """Recipe libraries: names and fields here, value types by the recipe engine."""
    from acx.compiler._acx_lower import load_acx_recipes
    from acx.compiler._recipes import DeclarativeRecipeAdapter
    from acx.errors import AcxUserError

    recipes = load_acx_recipes(path)
    diagnostics: list[Any] = []
    for recipe in recipes:
        try:
            DeclarativeRecipeAdapter(recipe)
        except AcxUserError as exc:
            diagnostics.extend(exc.diagnostics)
    return diagnostics


def check_file(path: str) -> list[Any]:
    """Every diagnostic of one file (empty when it is valid)."""
    from acx.errors import AcxUserError

    try:
        if path.endswith(".acx") and is_library(path):
            return check_library(path)
        from acx.compiler._frontends import load_document

        doc = load_document(path)
    except AcxUserError as exc:
        return list(exc.diagnostics)
    from acx.compiler import validate_document

    return list(validate_document(doc))


def _check(args: argparse.Namespace) -> int:
    from acx.diagnostics import render_json, render_text, unique

    # A file imported by several of the checked files reports its problems once.
    diagnostics = unique(d for path in args.files for d in check_file(path))
    errors = sum(1 for d in diagnostics if d.severity == "error")
    if args.format == "json":
        sys.stdout.write(render_json(diagnostics) + "\n")
    else:
        if diagnostics:
            sys.stderr.write(render_text(diagnostics) + "\n")
        n = len(args.files)
        files = f"{n} file{'s' if n != 1 else ''}"
        if errors:
            sys.stderr.write(f"acx check: {errors} error{'s' if errors != 1 else ''} in {files}\n")
        else:
            sys.stdout.write(f"acx check: {files} ok\n")
    return 2 if errors else 0


def _fmt(args: argparse.Namespace) -> int:
    import difflib

    from acx.diagnostics import render_text
    from acx.errors import AcxUserError
    from acx.grammar._format import format_source

    status = 0
    for path in args.files:
        if path != "-" and not path.endswith(".acx"):
            err = AcxUserError(
                f"acx fmt formats .acx files; {path} is not one",
                code="E0210",
                path=path,
                help="pass .acx files (or - for stdin); YAML and JSON specs keep their own formatting",
            )
            sys.stderr.write(render_text(err.diagnostics) + "\n")
            status = 2
            continue
        original = ""
        try:
            original = _read_stdin() if path == "-" else _read(path)
            formatted = format_source(original, "<stdin>" if path == "-" else path)
        except AcxUserError as exc:
            sources = {"<stdin>": original} if path == "-" else None
            sys.stderr.write(render_text(exc.diagnostics, sources=sources) + "\n")
            status = 2
            continue
        if path == "-" and not (args.check or args.diff):
            sys.stdout.write(formatted)
            continue
        if formatted == original:
            continue
        if args.diff:
            sys.stdout.writelines(
                difflib.unified_diff(
                    original.splitlines(keepends=True),
                    formatted.splitlines(keepends=True),
                    fromfile=f"{path} (original)",
                    tofile=f"{path} (formatted)",
                )
            )
        if args.check or args.diff:
            sys.stderr.write(f"would reformat {path}\n")
            status = max(status, 1)
            continue
        from acx.cli._output import write_text_atomic

        try:
            write_text_atomic(path, formatted, flag=None)  # atomic; a symlink stays a link (target rewritten)
        except AcxUserError as exc:
            sys.stderr.write(render_text(exc.diagnostics) + "\n")
            status = 2
            continue
        sys.stderr.write(f"reformatted {path}\n")
    return status


def _read_stdin() -> str:
    """Standard input, bounded like an .acx file (``acx fmt - < /dev/zero`` must not run away)."""
    from acx.errors import AcxUserError
    from acx.inputs import MAX_ACX_BYTES

    text = sys.stdin.read(MAX_ACX_BYTES + 1)
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ACX_BYTES:
        raise AcxUserError(
            f"standard input is longer than the .acx limit of {MAX_ACX_BYTES // 1024} KiB",
            code="E0219",
            path="<stdin>",
            help="input files have a size limit (docs/errors.md#E0219)",
        )
    return text


def _read(path: str) -> str:
    from acx.grammar._parser import read_source

    return read_source(path)
