"""``acx validate FILE...``: schema and semantic validation of config and orchestration files (CI).

Each file is checked on its own (kind detected from content: ``version``/``requests`` ⇒
orchestration, else run config). Every diagnostic is printed as
``file:line:col: error[CODE]: message`` (with a code frame) or, with ``--format json``, as one
JSON document. Exit 0 when all files are valid, 2 otherwise. The process environment is not
read: ``${VAR}`` references are accepted wherever a value goes.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register", "validate_files"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="validate config and orchestration files (schema + semantics; for CI)",
        description="Validate run config and orchestration files (YAML, JSON or .acx); print every problem.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=_handle)


def validate_files(paths: list[str]) -> tuple[list[dict[str, Any]], list[Any], dict[str, str]]:
    """(per-file summaries, all diagnostics, sources) for ``paths``."""
    files: list[dict[str, Any]] = []
    diagnostics: list[Any] = []
    sources: dict[str, str] = {}
    for path in paths:
        entry: dict[str, Any] = {"path": path, "kind": None}
        found = _validate_one(path, entry, sources)
        entry["valid"] = not any(d.severity == "error" for d in found)
        entry["error_count"] = sum(1 for d in found if d.severity == "error")
        files.append(entry)
        diagnostics.extend(found)
    return files, diagnostics, sources


def _validate_one(path: str, entry: dict[str, Any], sources: dict[str, str]) -> list[Any]:
    """Diagnostics of one file; fills ``entry`` (kind, request count) and ``sources``."""
    from acx.cli._lang import check_library, is_library
    from acx.compiler import validate_document
    from acx.compiler._frontends import load_document
    from acx.errors import AcxUserError

    try:
        if path.endswith(".acx") and is_library(path):
            entry["kind"] = "library"  # imports, lets and recipes: what `import` reads
            return check_library(path)
        doc = load_document(path)
    except AcxUserError as exc:
        return list(exc.diagnostics)
    entry["kind"] = doc.kind
    if doc.text is not None:
        sources[doc.path] = doc.text
    if doc.kind == "orchestration" and isinstance(doc.data.get("requests"), list):
        entry["requests"] = len(doc.data["requests"])
    return validate_document(doc)


def _handle(args: argparse.Namespace) -> int:
    from acx.diagnostics import render_text

    files, diagnostics, sources = validate_files(args.files)
    valid = all(f["valid"] for f in files)
    if args.format == "json":
        payload = {
            "format_version": 1,
            "valid": valid,
            "error_count": sum(f["error_count"] for f in files),
            "files": files,
            "diagnostics": [d.to_json() for d in diagnostics],
        }
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    else:
        if diagnostics:
            sys.stderr.write(render_text(diagnostics, sources=sources) + "\n")
        for f in files:
            what = f["kind"] or "unreadable"
            if f.get("requests") is not None:
                what += f", {f['requests']} request(s)"
            status = "ok" if f["valid"] else f"{f['error_count']} error(s)"
            sys.stdout.write(f"{f['path']}: {status} ({what})\n")
    return 0 if valid else 2
