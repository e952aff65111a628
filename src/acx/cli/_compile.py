"""``acx compile``: resolve a spec with its config layers; print the dry run or hand over to planning.

``--dry-run`` (the default without ``--plans``/``-o``) prints the resolved, redacted
orchestration without loading tasks (P8): ``text`` (non-default values with their source,
``--full`` for all), ``json`` (stable, versioned; ``--full`` adds provenance) or ``yaml``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_compile_inputs", "compile_from_args", "register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compile",
        help="resolve a spec and print the dry run (or the execution plans)",
        description="Resolve SPEC (orchestration YAML/JSON or .acx) with its config layers and print the "
        "resolved, redacted requests (--dry-run, the default) or the execution plans (--plans, -o).",
    )
    add_compile_inputs(p)
    p.add_argument("--dry-run", action="store_true", help="print the resolved requests; load no tasks (default)")
    p.add_argument("--plans", action="store_true", help="load tasks and print the execution plans")
    p.add_argument("--tasks", metavar="GLOB", help="with --plans: only tasks whose id matches GLOB")
    p.add_argument("--full", action="store_true", help="show values at their defaults too (json: add provenance)")
    p.add_argument("--format", choices=("text", "json", "yaml"), default="text", help="output format (default text)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (with a plan: the compiled program)")
    p.set_defaults(handler=_handle)


def add_compile_inputs(p: argparse.ArgumentParser) -> None:
    """SPEC and the flags shared by ``compile`` and ``explain``."""
    p.add_argument("spec", metavar="SPEC", help="orchestration file (.yaml, .json) or .acx spec")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="run config layered over the user and project configs (repeatable; later wins)",
    )
    p.add_argument("--task-concurrency", type=int, metavar="N", help="global limit of concurrent attempts")
    add_env_flag(p)
    p.add_argument(
        "--execution-params", metavar="JSON", help="execution overrides merged over every request's execution"
    )
    p.add_argument("--runtime-params", metavar="JSON", help="process runtime overrides (results_dir, progress, ...)")


def add_env_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env",
        metavar="ID",
        help="run every request on this environment provider (see `acx list env`); "
        "shared environment fields still apply",
    )


#: A valid example per JSON flag, for the help of an invalid value.
_EXAMPLE = {
    "--execution-params": '{"max_retries": 2}',
    "--runtime-params": '{"cleanup_grace_seconds": 10}',
}


def _json_arg(text: str | None, flag: str) -> Any:
    if text is None:
        return None
    from acx.errors import AcxConfigError
    from acx.inputs import data_limit_problem

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AcxConfigError(
            f"{flag} is not valid JSON: {exc.msg} (column {exc.colno})",
            code="E0216",
            path=flag,
            help=f"""quote the JSON for the shell, e.g. {flag} '{_EXAMPLE.get(flag, "{}")}'""",
        ) from None
    except (RecursionError, ValueError):  # nested past the decoder's depth / an integer past 4,300 digits
        value = _LIMIT_HIT
    problem = "it nests too deeply or holds a huge integer" if value is _LIMIT_HIT else data_limit_problem(value)
    if problem is not None:
        raise AcxConfigError(
            f"{flag}: {problem}",
            code="E0219",
            path=flag,
            help="command-line JSON has the input limits of config files (docs/errors.md#E0219)",
        )
    return value


_LIMIT_HIT = object()


def compile_from_args(args: argparse.Namespace) -> Any:
    """Compile SPEC with the shared flags; warnings (e.g. W0301) go to stderr, never stdout."""
    from acx.api import compile_spec

    return compile_spec(
        args.spec,
        configs=args.config,
        task_concurrency=args.task_concurrency,
        execution=_json_arg(args.execution_params, "--execution-params"),
        runtime=_json_arg(args.runtime_params, "--runtime-params"),
        environment=args.env,
        report=_stderr,
    )


def _stderr(text: str) -> None:
    sys.stderr.write(text + "\n")


def _handle(args: argparse.Namespace) -> int:
    compiled = compile_from_args(args)
    if args.plans or (args.output and not args.dry_run):
        return _run_plans(args, compiled)
    text = render_dry_run(compiled, args.format, full=args.full)
    if args.output:
        from acx.cli._output import write_text_atomic

        write_text_atomic(args.output, text)
        sys.stderr.write(f"wrote {args.output}\n")
    else:
        sys.stdout.write(text)
    return 0


def _run_plans(args: argparse.Namespace, compiled: Any) -> int:
    from acx.cli import _plans

    return int(_plans.run_plans(args, compiled))


def render_dry_run(compiled: Any, fmt: str, *, full: bool = False) -> str:
    from acx.compiler import dry_run_payload

    if fmt == "json":
        return json.dumps(dry_run_payload(compiled, provenance=full), indent=2, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        from acx.cli._output import to_yaml

        return to_yaml(dry_run_payload(compiled, provenance=full))
    from acx.cli._output import render_dry_run_text

    return render_dry_run_text(compiled, full=full)
