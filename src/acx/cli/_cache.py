"""``acx cache stats|prune|clear``: the model-call cache directory (docs/models.md).

The directory is ``--dir DIR`` (what ``model.cache_dir`` names), else the default under a results
root: ``<--results-dir, default ./results>/.acx-cache/model-calls``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "cache",
        help="inspect, prune or clear the model-call cache",
        description="The model-call cache: entries stored by roles with model.cache write/read-write.",
    )
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    for name, text in (
        ("stats", "entries, bytes and models of the cache"),
        ("prune", "remove entries unused for --older-than days, then the least recently used past --max-bytes"),
        ("clear", "remove every entry"),
    ):
        c = csub.add_parser(name, help=text, description=text)
        c.add_argument("--dir", metavar="DIR", help="the cache directory (model.cache_dir)")
        c.add_argument(
            "--results-dir", metavar="DIR", default="results", help="results root whose default cache to use"
        )
        c.add_argument("--format", choices=("text", "json"), default="text")
        if name == "prune":
            c.add_argument("--max-bytes", type=int, metavar="N", help="bound to prune to (default 1 GiB)")
            c.add_argument("--older-than", type=float, metavar="DAYS", help="remove entries unused for DAYS days")
        c.set_defaults(handler=_handle)


def _root(args: argparse.Namespace) -> Path:
    from acx.errors import AcxUserError

    root = (Path(args.dir) if args.dir else Path(args.results_dir) / ".acx-cache" / "model-calls").resolve()
    if root.exists() and not root.is_dir():
        raise AcxUserError(
            f"the model-call cache {root} is not a directory",
            code="E0662",
            path="--dir",
            help="pass the directory model.cache_dir names",
        )
    return root


def _positive(value: float | None, flag: str) -> None:
    from acx.errors import AcxUserError

    if value is not None and not value > 0:
        raise AcxUserError(f"{flag} must be positive, not {value:g}", code="E0662", path=flag, help=f"e.g. {flag} 7")


def _handle(args: argparse.Namespace) -> int:
    from acx.models import DEFAULT_CACHE_MAX_BYTES, CallCache

    root = _root(args)
    cache = CallCache(root)
    out: dict[str, Any] = {"directory": str(root)}
    if args.cache_command == "prune":
        _positive(args.max_bytes, "--max-bytes")
        _positive(args.older_than, "--older-than")
        older = args.older_than * 86400.0 if args.older_than is not None else None
        removed, left = cache.prune(max_bytes=args.max_bytes or DEFAULT_CACHE_MAX_BYTES, older_than=older)
        out.update(removed=removed, bytes_left=left)
        text = f"{root}: removed {removed} entr{'y' if removed == 1 else 'ies'}; {left} bytes left"
    elif args.cache_command == "clear":
        removed = cache.clear()
        out.update(removed=removed)
        text = f"{root}: removed {removed} entr{'y' if removed == 1 else 'ies'}"
    else:
        stats = cache.stats()
        out.update(stats.to_dict())
        models = ", ".join(f"{m} {n}" for m, n in sorted(stats.by_model.items())) or "none"
        text = f"{root}: {stats.entries} entries, {stats.bytes} bytes (models: {models})"
        if stats.tmp_files:
            text += f"; {stats.tmp_files} unfinished write(s) (removed by `acx cache prune` after an hour)"
    sys.stdout.write((json.dumps(out, indent=2) if args.format == "json" else text) + "\n")
    return 0
