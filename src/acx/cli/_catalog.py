"""Component catalogue commands: ``acx list``, ``acx config docs``, ``acx schema``.

* ``acx list benchmark|harness|env`` — registered ids with their descriptions.
* ``acx config docs KIND ID`` — the documented config fields of a component (field, type,
  default, description); for environments also the shared EnvironmentSpec fields and the
  ``setup.*`` / ``evaluation_setup.*`` rows.
* ``acx config show [--config F]... [--benchmark ID...] [--harness ID...] [--env ID...]
  [--show-origin]`` — the merged effective run config; ``--show-origin`` prints each value's
  source and layer, like ``git config --show-origin``.
* ``acx schema [KIND] [--out DIR]`` — the JSON Schemas (2020-12) of run config and
  orchestration files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import typing
from typing import Any

__all__ = ["component_field_rows", "register", "type_text"]

_KINDS = ("benchmark", "harness", "env", "environment", "scorer")


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered benchmarks, harnesses or environments")
    p.add_argument("kind", choices=("benchmark", "harness", "env", "scorer"), metavar="benchmark|harness|env|scorer")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=_list)

    cfg = sub.add_parser("config", help="configuration: `config docs KIND ID`, `config show [--show-origin]`")
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="COMMAND")
    cfg.set_defaults(handler=lambda args: _usage(cfg))
    docs = cfg_sub.add_parser("docs", help="documented config fields of a component")
    docs.add_argument("kind", choices=_KINDS, metavar="KIND", help="benchmark, harness, env or scorer")
    docs.add_argument("id", metavar="ID")
    docs.add_argument("--format", choices=("text", "json"), default="text")
    docs.set_defaults(handler=_docs)
    show = cfg_sub.add_parser(
        "show",
        help="the merged effective run config (user, project, --config) with --show-origin",
        description="Merge the run config layers and print runtime, execution and the selected components.",
    )
    show.add_argument("--config", action="append", default=[], metavar="FILE", help="extra config layer")
    show.add_argument("--benchmark", nargs="+", default=[], metavar="ID", help="show these benchmarks' params")
    show.add_argument("--harness", nargs="+", default=[], metavar="ID", help="show these harnesses' params")
    show.add_argument("--env", nargs="+", default=[], metavar="ID", help="show these environments' params")
    show.add_argument("--format", choices=("yaml", "json"), default="yaml")
    show.add_argument("--show-origin", action="store_true", help="one line per value: source, layer, path = value")
    show.set_defaults(handler=_show)

    sch = sub.add_parser("schema", help="print or write the JSON Schemas of config and orchestration files")
    sch.add_argument("which", nargs="?", choices=("run_config", "orchestration"), help="print one schema")
    sch.add_argument("--out", metavar="DIR", help="write run_config.schema.json and orchestration.schema.json to DIR")
    sch.set_defaults(handler=_schema)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# ---- list ---------------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    from acx.components import registry

    table = registry(args.kind)
    infos = list(table.values())
    # A broken plugin is reported, never silently missing from the list.
    for reason in table.broken_plugins().values():
        sys.stderr.write(f"warning: {reason}\n")
    aliases = _alias_rows() if args.kind == "harness" else []
    if args.format == "json":
        rows: list[dict[str, str]] = [{"id": i.id, "description": i.description, "origin": i.origin} for i in infos]
        sys.stdout.write(json.dumps(rows + aliases, indent=2) + "\n")
        return 0
    width = max(len(i.id) for i in infos)
    sys.stdout.write(f"{'ID'.ljust(width)}  DESCRIPTION\n")
    for info in infos:
        origin = "" if info.origin == "built-in" else f"  [{info.origin}]"
        sys.stdout.write(f"{info.id.ljust(width)}  {info.description}{origin}\n")
    if aliases:
        _write_alias_rows(aliases)
    return 0


def _alias_rows() -> list[dict[str, str]]:
    """AgentCompass's harness ids, so a user moving a config over sees what each one becomes
    (or why it is refused) without reading the docs."""
    from acx.components import HARNESS_ALIASES
    from acx.components._harness_aliases import MappedHarness

    rows: list[dict[str, str]] = []
    for cid, alias in HARNESS_ALIASES.items():
        row = {"id": cid, "origin": "agentcompass-1.0.1"}
        if isinstance(alias, MappedHarness):
            row |= {"description": f"AgentCompass id; compiles as {alias.summary}", "maps_to": alias.summary}
        else:
            row |= {
                "description": f"AgentCompass id; refused (nearest: {alias.nearest})",
                "nearest": alias.nearest,
                "refused": alias.differs,
            }
        rows.append(row)
    return rows


def _write_alias_rows(rows: list[dict[str, str]]) -> None:
    width = max(len(r["id"]) for r in rows)
    sys.stdout.write("\nAgentCompass 1.0.1 harness ids (accepted in AgentCompass configs; docs/agents.md)\n")
    for row in rows:
        target = f"-> {row['maps_to']}" if "maps_to" in row else f"refused (nearest acx harness: {row['nearest']})"
        sys.stdout.write(f"{row['id'].ljust(width)}  {target}\n")


# ---- config docs --------------------------------------------------------------------------------


def type_text(tp: Any) -> str:
    """A short, readable rendering of a field annotation (``int | null``, ``list[str]``, ...)."""
    import msgspec

    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin in (list, tuple):
        return f"list[{type_text(args[0])}]" if args else "list"
    if origin is dict:
        return f"dict[{type_text(args[0])}, {type_text(args[1])}]" if args else "dict"
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp.__name__
    if tp is typing.Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _default_text(cls: type[Any], name: str) -> str:
    from acx.compiler._shapes import field_defaults

    defaults = field_defaults(cls)
    if name not in defaults:
        return "(required)"
    text = json.dumps(defaults[name], ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _rows_of(cls: type[Any], prefix: str = "", skip: frozenset[str] = frozenset()) -> list[dict[str, str]]:
    from acx.compiler._shapes import field_descriptions, field_types

    rows = []
    descriptions = field_descriptions(cls)
    for name, tp in field_types(cls).items():
        if name in skip:
            continue
        rows.append(
            {
                "field": prefix + name,
                "type": type_text(tp),
                "default": _default_text(cls, name),
                "description": descriptions.get(name, ""),
            }
        )
    return rows


def component_field_rows(kind: str, cid: str) -> list[dict[str, str]]:
    """The documented fields of component ``cid`` (AcxUserError for an unknown id)."""
    from acx.components import registry
    from acx.diagnostics import did_you_mean
    from acx.errors import AcxUserError
    from acx.ir import EnvironmentSetup, EnvironmentSpec

    kind = "environment" if kind == "env" else kind
    table = registry(kind)
    info = table.get(cid)
    if info is None and kind == "harness":
        from acx.components import HARNESS_ALIASES

        alias: Any = HARNESS_ALIASES.get(cid)
        config = getattr(alias, "config", None)
        if config is not None:  # a mapped AgentCompass id: its AgentCompass params
            return _rows_of(config)
        if alias is not None:  # a refused one: the nearest acx harness
            raise AcxUserError(
                f"AgentCompass harness `{cid}` has no acx equivalent; the nearest acx harness is "
                f"`{alias.nearest}`: {alias.differs}",
                code="E0301",
                path=f"{kind} id",
                help=alias.help,
            )
    if info is None:
        guess = did_you_mean(cid, table)
        raise AcxUserError(
            f"unknown {kind} id `{cid}`",
            code="E0301",
            path=f"{kind} id",
            help=(f"did you mean `{guess}`? " if guess else "") + f"known: {', '.join(sorted(table))}",
        )
    rows = _rows_of(info.config_class)
    if kind == "environment":
        shared = _rows_of(EnvironmentSpec, skip=frozenset({"id", "params", "setup", "evaluation_setup"}))
        rows = shared + rows
        rows += _rows_of(EnvironmentSetup, "setup.") + _rows_of(EnvironmentSetup, "evaluation_setup.")
    return rows


def _docs(args: argparse.Namespace) -> int:
    rows = component_field_rows(args.kind, args.id)
    if args.format == "json":
        sys.stdout.write(json.dumps({"kind": args.kind, "id": args.id, "fields": rows}, indent=2) + "\n")
        return 0
    headers = {"field": "FIELD", "type": "TYPE", "default": "DEFAULT", "description": "DESCRIPTION"}
    cols = ("field", "type", "default")
    widths = {c: max(len(headers[c]), *(len(r[c]) for r in rows)) for c in cols}
    widths["type"] = min(widths["type"], 36)
    lines = ["  ".join(headers[c].ljust(widths[c]) for c in cols) + "  " + headers["description"]]
    for r in rows:
        lines.append("  ".join(r[c].ljust(widths[c]) for c in cols) + "  " + r["description"])
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


# ---- config show --------------------------------------------------------------------------------


def _show(args: argparse.Namespace) -> int:
    from acx.cli._output import to_yaml, value_text
    from acx.compiler import load_config_documents, redact, validate_document
    from acx.compiler._explain import flat_leaves
    from acx.compiler._resolve import config_view
    from acx.components import registry
    from acx.diagnostics import did_you_mean
    from acx.errors import AcxUserError

    selections = {"benchmark": args.benchmark, "harness": args.harness, "environment": args.env}
    for kind, ids in selections.items():
        for cid in ids:
            if cid not in registry(kind):
                guess = did_you_mean(cid, registry(kind))
                raise AcxUserError(
                    f"unknown {kind} id `{cid}`",
                    code="E0301",
                    path=f"--{'env' if kind == 'environment' else kind}",
                    help=(f"did you mean `{guess}`? " if guess else "") + f"known: {', '.join(sorted(registry(kind)))}",
                )
    docs = load_config_documents(args.config, cwd=os.getcwd(), environ=os.environ)
    diagnostics = [d for cfg in docs for d in validate_document(cfg.doc)]
    if diagnostics:
        raise AcxUserError(diagnostics=diagnostics)
    view, prov = config_view(docs, components=selections)
    shown = redact(view)
    if args.show_origin:
        leaves = flat_leaves(shown)
        rows = [
            (chain[-1].source, chain[-1].layer, f"{path} = {value_text(leaves.get(path))}")
            for path, chain in prov.items()
        ]
        widths = [max((len(r[i]) for r in rows), default=0) for i in range(2)]
        sys.stdout.write("".join(f"{a.ljust(widths[0])}  {b.ljust(widths[1])}  {c}\n" for a, b, c in rows))
        return 0
    for cfg in docs:
        sys.stderr.write(f"# {cfg.layer}: {cfg.doc.path}\n")
    if args.format == "json":
        sys.stdout.write(json.dumps(shown, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(to_yaml(shown))
    return 0


# ---- schema -------------------------------------------------------------------------------------


def _schema(args: argparse.Namespace) -> int:
    from acx.schemas import SCHEMA_FILES, generate_schemas

    schemas = generate_schemas()
    if args.out:
        from acx.errors import AcxUserError

        try:
            os.makedirs(args.out, exist_ok=True)
            for name, filename in SCHEMA_FILES.items():
                path = os.path.join(args.out, filename)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps(schemas[name], indent=2, ensure_ascii=False) + "\n")
                sys.stdout.write(f"wrote {path}\n")
        except OSError as exc:  # a file in the way, no permission, no space: the user's input
            raise AcxUserError(
                f"cannot write the schemas to {args.out}: {exc.strerror or exc}",
                code="E0217",
                path="--out",
                help="name a directory acx can create and write",
            ) from None
        return 0
    if args.which:
        sys.stdout.write(json.dumps(schemas[args.which], indent=2, ensure_ascii=False) + "\n")
        return 0
    from acx.errors import AcxUserError

    raise AcxUserError(
        "acx schema needs a schema name or --out DIR",
        code="E0216",
        path="acx schema",
        help="acx schema orchestration  |  acx schema run_config  |  acx schema --out schemas/",
    )
