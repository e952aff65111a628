"""``acx explain SPEC REQUEST FIELD_PATH``: where a resolved value came from.

Prints the winning value and every shadowed contribution with its source (``file:line:col``, a
flag, an env var or a default), highest precedence first — like ``git config --show-origin``.
``REQUEST`` ``-`` selects orchestration-level fields (``task_concurrency``, ``runtime.*``).
With ``--task ID`` the question is about a task's execution plan and goes to the planner.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    from acx.cli._compile import add_compile_inputs

    p = sub.add_parser(
        "explain",
        help="show where a resolved value came from (winner and shadowed contributions)",
        description="Explain the provenance of FIELD_PATH (e.g. execution.run_timeout_seconds) in REQUEST "
        "(a request name, or - for orchestration-level fields).",
    )
    add_compile_inputs(p)
    p.add_argument("request", metavar="REQUEST", help="request name, or - for task_concurrency/runtime.*")
    p.add_argument("field", metavar="FIELD_PATH", help="dotted path, e.g. execution.run_timeout_seconds")
    p.add_argument("--task", metavar="ID", help="explain the field in this task's execution plan")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from acx.cli._compile import compile_from_args

    compiled = compile_from_args(args)
    if args.task:
        return _explain_plan(args, compiled)
    from acx.compiler._explain import explain_field

    fields = explain_field(compiled, args.request, args.field)
    caches = _cache_modes(compiled, args.request, args.field)
    if args.format == "json":
        payload = _payload(args, fields)
        if caches is not None:
            payload["model_cache"] = caches
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_text(args.request, fields) + (_cache_text(caches) if caches is not None else ""))
    return 0


def _cache_modes(compiled: Any, request: str, field: str) -> dict[str, Any] | None:
    """Each role's model-call cache mode and the cache directory, when the question is about the
    model section or its cache (``model``, ``model.cache``, ``model.roles.NAME.cache``, ...)."""
    field = field.strip().strip(".")
    if request == "-" or not field.startswith("model") or not (field == "model" or "cache" in field):
        return None
    from acx.interpreter._models import cache_dir
    from acx.models import DEFAULT_CACHE_MAX_BYTES, cache_modes

    run = next(r for r in compiled.orchestration.requests if r.name == request)
    req = run.request
    return {
        "roles": cache_modes(req),
        "directory": str(cache_dir(req, compiled.orchestration.runtime.results_dir)),
        "max_bytes": req.model.cache_max_bytes or DEFAULT_CACHE_MAX_BYTES,
    }


def _cache_text(caches: dict[str, Any]) -> str:
    rows = [f"  {role}: {mode}" for role, mode in sorted(caches["roles"].items())] or ["  (no model role)"]
    return (
        "model-call cache by role:\n"
        + "\n".join(rows)
        + f"\n  directory {caches['directory']} (at most {caches['max_bytes']} bytes)\n"
    )


def _explain_plan(args: argparse.Namespace, compiled: Any) -> int:
    from acx.cli import _plans

    return int(_plans.explain_plan_field(args, compiled))


def _payload(args: argparse.Namespace, fields: list[Any]) -> dict[str, Any]:
    import msgspec

    return {
        "format_version": 1,
        "request": args.request,
        "query": args.field,
        "fields": [
            {
                "path": f.path,
                "value": f.value,
                "contributions": [
                    {**msgspec.to_builtins(c), "winner": i == len(f.chain) - 1} for i, c in enumerate(f.chain)
                ],
            }
            for f in fields
        ],
    }


def render_text(request: str, fields: list[Any]) -> str:
    from acx.cli._output import value_text

    scope = "orchestration" if request == "-" else f"request {request}"
    out: list[str] = []
    for f in fields:
        out.append(f"{f.path} = {value_text(f.value)}    ({scope})")
        rows = []
        for i, c in enumerate(reversed(f.chain)):
            state = "winner" if i == 0 else "shadowed"
            rows.append((state, c.layer, c.source, value_text(c.value)))
        widths = [max(len(r[k]) for r in rows) for k in range(3)]
        for r in rows:
            out.append(f"  {r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].ljust(widths[2])}  {r[3]}")
    return "\n".join(out) + "\n"
