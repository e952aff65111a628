"""Schema and semantic validation of one SourceDoc (run config or orchestration).

:func:`validate_document` reports *every* independent problem of a document, each with the span
of the offending key or value, a stable code, "expected X, got Y" wording and a did-you-mean
for unknown keys, enum values and component ids. It never reads the process environment: a
whole-field ``${VAR}`` value is accepted wherever a value goes and type-checked after
substitution by the resolver.

Types come from the IR and component config classes (:mod:`._shapes`); values are checked with
``msgspec.convert`` per field, so there is one definition of every field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from acx.compiler._interpolate import (
    ENV_MAP_KEYS,
    NO_SECRET_SECTIONS,
    embedded_ref_diagnostic,
    env_ref_name,
    format_path,
    has_embedded_ref,
    no_secret_here,
)
from acx.compiler._redact import is_secret_name
from acx.compiler._shapes import (
    API_PROTOCOLS,
    COMPONENT_SECTIONS,
    NETWORK_MODES,
    NETWORK_POLICY_FIELDS,
    ORCHESTRATION_KEYS,
    REQUEST_KEYS,
    REQUEST_STRUCT_SECTIONS,
    RUN_CONFIG_KEYS,
    RUN_CONFIG_STRUCT_SECTIONS,
    RUNTIME_REUSE_KEYS,
    dict_value_type,
    environment_field_types,
    field_descriptions,
    field_types,
    literal_values,
    output_namespace,
    required_fields,
    struct_of,
)
from acx.compiler._source import Path_, SourceDoc
from acx.diagnostics import Diagnostic, Related, did_you_mean
from acx.ir import ArtifactSpec, ClusterOptions, EnvironmentSpec, ModelRoleSpec, NetworkPolicy, ResolvedRuntimeOptions

__all__ = [
    "Checker",
    "check_cli_params",
    "component_param_types",
    "lone_surrogate",
    "regex_problem",
    "select_help",
    "validate_document",
    "value_at",
]

#: Legacy params rejected with a pointer to their replacement (H3, V4).
_LEGACY_ENV_PARAMS = {
    "image": "environment `setup.image`",
    "evaluation_image": "environment `evaluation_setup.image`",
}
_LEGACY_HARNESS_PARAMS = {"env": "environment `run_env_variables`"}

#: Runtime maps keyed by environment provider id.
_PROVIDER_MAPS = frozenset({"provider_limits", "env_open_qps"})

_PARAMS_HELP = "place component parameters alongside id, e.g. `benchmark: {id: exact_match, dataset: qa.jsonl}`"
_MSGSPEC_AT = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<at>\$[^`]*)`)?$", re.S)
_PATH_TOKEN = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[\.\.\.\]")


def validate_document(doc: SourceDoc) -> list[Diagnostic]:
    """All diagnostics of ``doc``, in source order; an empty list means the document is valid."""
    checker = Checker(doc)
    checker.check_interpolation(doc.data, ())
    checker.check_scalars(doc.data, ())
    if doc.kind == "orchestration":
        checker.orchestration.check_orchestration(doc.data)
    else:
        checker.components.check_run_config(doc.data)
    checker.check_unsupported(doc.data, doc.kind)
    return checker.sorted()


#: AgentCompass fields acx reads but does not implement: field → (the value acx behaves as, what
#: to do instead). Any other value, set by any layer, is E0311 (issue 11 item 16).
UNSUPPORTED_EXECUTION: dict[str, tuple[Any, str]] = {
    "enable_analysis": (
        False,
        "acx has no post-attempt analyzers: remove `enable_analysis` (or set it to false); "
        "results, trajectories and `acx report` hold what analysis would read",
    ),
    "analysis_params": ({}, "acx has no analyzers to configure: remove `analysis_params`"),
}
UNSUPPORTED_RUNTIME: dict[str, tuple[Any, str]] = {
    "log_file": (
        None,
        "remove `log_file`: every run writes its log to <run dir>/run.log (level: `file_log_level`)",
    ),
    "data_dir": (
        "data",
        "remove `data_dir`: acx downloads no datasets; preset benchmarks read data/<id> next to the spec, "
        "and `dataset`/`path` name any other location",
    ),
    "auto_install_dependencies": (
        False,
        "remove `auto_install_dependencies`: acx benchmarks need no host-Python extras (agents install "
        "what they need inside their sandbox)",
    ),
}
UNSUPPORTED_BENCHMARK: dict[str, tuple[Any, str]] = {
    "category_hierarchy": (
        None,
        "remove `category_hierarchy`: acx aggregates by each task's own category (`aggregation_mode: category_mean`)",
    ),
}


def _unsupported_sections(data: Any, kind: str) -> list[tuple[Path_, dict[str, tuple[Any, str]]]]:
    """Where each table of unsupported fields applies in a document of ``kind``."""
    out: list[tuple[Path_, dict[str, tuple[Any, str]]]] = [(("runtime",), UNSUPPORTED_RUNTIME)]
    if kind != "orchestration":
        out.append((("execution",), UNSUPPORTED_EXECUTION))
        benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
        if isinstance(benchmarks, dict):
            out.extend((("benchmarks", str(bid)), UNSUPPORTED_BENCHMARK) for bid in benchmarks)
        return out
    out += [(("defaults", "execution"), UNSUPPORTED_EXECUTION), (("defaults", "benchmark"), UNSUPPORTED_BENCHMARK)]
    requests = data.get("requests") if isinstance(data, dict) else None
    if isinstance(requests, list):
        for i in range(len(requests)):
            out += [
                (("requests", i, "execution"), UNSUPPORTED_EXECUTION),
                (("requests", i, "benchmark"), UNSUPPORTED_BENCHMARK),
            ]
    return out


def check_cli_params(
    value: Any, cls: type[msgspec.Struct], flag: str, *, forbid: Mapping[str, str] = {}
) -> list[Diagnostic]:
    """Validate a JSON object given on the command line (``--execution-params``) against ``cls``."""
    doc = SourceDoc(path=flag, kind="run_config", data=value)
    checker = Checker(doc, cli_flag=flag)
    if not isinstance(value, dict):
        return [
            Diagnostic(
                code="E0216",
                message=f"{flag} must be a JSON object, got {_type_name(value)}",
                path=flag,
                help=f"""pass e.g. {flag} '{{"max_retries": 2}}'""",
            )
        ]
    for key, why in forbid.items():
        if key in value:
            checker.err("E0213", f"`{key}` is not accepted in {flag}", (key,), key=True, help=why)
    rest = {k: v for k, v in value.items() if k not in forbid}
    checker.check_scalars(rest, ())
    checker.check_struct(rest, cls, (), where=flag)
    return checker.sorted()


def component_config_class(kind: str, component_id: str) -> type[Any] | None:
    """The config class of a registered component's params; for an AgentCompass harness id acx
    maps (acx.components.HARNESS_ALIASES), the class of its AgentCompass params. None: unknown."""
    from acx.components import mapped_harness, registry

    alias = mapped_harness(component_id) if kind == "harness" else None
    if alias is not None:
        return alias.config
    info = registry(kind).get(component_id)
    return None if info is None else info.config_class


def component_param_types(kind: str, component_id: str) -> dict[str, Any] | None:
    """Field name → type of the params of a registered component, or None for an unknown id."""
    cls = component_config_class(kind, component_id)
    if cls is None:
        return None
    types = dict(field_types(cls))
    if kind == "environment":
        types.update(environment_field_types())
    return types


class Checker:
    """Collects diagnostics for one document; every check records the span of what it blames."""

    def __init__(self, doc: SourceDoc, *, cli_flag: str | None = None) -> None:
        self.doc = doc
        self.cli_flag = cli_flag
        self.diagnostics: list[Diagnostic] = []
        self.components = _ComponentChecks(self)
        self.orchestration = _OrchestrationChecks(self)

    # ---- reporting ------------------------------------------------------------------------

    def where(self, path: Path_) -> str:
        shown = format_path(path)
        if self.cli_flag:
            return f"{self.cli_flag}" if not path else f"{self.cli_flag} {shown}"
        if self.doc.path.endswith(".acx") and path[:1] == ("requests",) and len(path) > 1:
            # `.acx` users write `run "qa" { ... }`, not a `requests` list: name the run.
            name = value_at(self.doc.data, (*path[:2], "name"))
            if isinstance(name, str):
                rest = format_path(path[2:]) if len(path) > 2 else ""
                return f'run "{name}"' + (f".{rest}" if rest else "")
        return shown

    def err(
        self,
        code: str,
        message: str,
        path: Path_,
        *,
        key: bool = False,
        help: str | None = None,
        related: tuple[Related, ...] = (),
    ) -> None:
        span = None
        if self.cli_flag is None:
            span = self.doc.key_span_of(path) if key else self.doc.span_of(path)
        self.diagnostics.append(
            Diagnostic(code=code, message=message, span=span, path=self.where(path), help=help, related=related)
        )

    def check_unsupported(self, data: Any, kind: str) -> None:
        """E0311: an AgentCompass field acx does not implement, set to a value that needs it
        (issue 11 item 16). ``${VAR}`` values are left to the resolver, which sees them resolved."""
        for section, fields in _unsupported_sections(data, kind):
            node: Any = data
            for part in section:
                if isinstance(part, int):
                    node = node[part] if isinstance(node, list) and part < len(node) else None
                else:
                    node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                continue
            for name, (inert, instead) in fields.items():
                if name not in node or node[name] == inert:
                    continue
                if isinstance(node[name], str) and node[name].startswith("${"):
                    continue
                field = ".".join(str(p) for p in (*section, name) if not isinstance(p, int))
                field = re.sub(r"^(requests|defaults)\.", "", field)
                self.err("E0311", f"`{field}` is not supported by acx", (*section, name), key=True, help=instead)

    def sorted(self) -> list[Diagnostic]:
        def order(d: Diagnostic) -> tuple[int, int, int]:
            if d.span is None:
                return (1, 0, 0)
            return (0, d.span.line, d.span.col)

        return sorted(self.diagnostics, key=order)

    # ---- generic checks -------------------------------------------------------------------

    def is_mapping(self, value: Any, path: Path_, what: str) -> bool:
        if isinstance(value, dict):
            return True
        self.err(
            "E0204",
            f"`{self.where(path)}`: expected a mapping ({what}), got {_type_name(value)}",
            path,
            help=f"write `{_last(path)} {{ key = value }}`"
            if self.doc.path.endswith(".acx")
            else f"write `{_last(path)}:` followed by indented `key: value` lines",
        )
        return False

    def unknown_key(self, key: str, path: Path_, allowed: Iterable[str], where: str) -> None:
        allowed = sorted(allowed)
        written, suffix = self.written_key(key, path)
        if suffix and written in allowed:
            # `max_retries = 5m`: a real field that takes no duration/size, not an unknown key.
            unit = "a duration" if suffix == "_seconds" else "a size"
            self.err(
                "E0204",
                f"`{self.where((*path, written))}` takes a plain value, not {unit}",
                (*path, key),
                key=True,
                help=f"write a number or other plain value, e.g. `{written} = 3`; durations fit `*_seconds` "
                "fields (`run_timeout = 30m`), sizes fit `*_mb` fields (`memory = 2GiB`)",
            )
            return
        if suffix:
            # `.acx` typed literal: `run_timout = 5m` lowered to `run_timout_seconds`; speak of
            # the key as written and suggest among the fields that take this unit.
            guess = did_you_mean(written, [a[: -len(suffix)] for a in allowed if a.endswith(suffix)])
            if guess:
                self.err(
                    "E0203",
                    f"unknown key `{written}` in {where}",
                    (*path, key),
                    key=True,
                    help=f"did you mean `{guess}`?",
                )
                return
        guess = did_you_mean(key, allowed)
        if guess:
            help = f"did you mean `{guess}`?"
        elif len(allowed) <= 12:
            help = "valid keys: " + ", ".join(f"`{a}`" for a in allowed)
        else:
            help = f"see `acx schema` or the docs for the {len(allowed)} valid keys"
        self.err("E0203", f"unknown key `{key}` in {where}", (*path, key), key=True, help=help)

    def written_key(self, key: str, path: Path_) -> tuple[str, str]:
        """(key as written in the source, unit suffix the `.acx` lowering added or "")."""
        span = self.doc.key_locs.get((*path, key))
        if self.doc.text is None or span is None or span.end_col is None or span.end_line != span.line:
            return key, ""
        lines = self.doc.text.splitlines()
        if not 1 <= span.line <= len(lines):
            return key, ""
        written = lines[span.line - 1][span.col - 1 : span.end_col - 1]
        for suffix in ("_seconds", "_mb"):
            if key == written + suffix:
                return written, suffix
        return key, ""

    def check_struct(
        self, value: Any, cls: type[msgspec.Struct], path: Path_, *, where: str, skip: Iterable[str] = ()
    ) -> None:
        """Closed record check: unknown keys, required keys, then each field's value."""
        if not self.is_mapping(value, path, cls.__name__):
            return
        types = field_types(cls)
        skipped = set(skip)
        for key, item in value.items():
            if key in skipped:
                continue
            if key not in types:
                self.unknown_key(key, path, types, where)
                continue
            self.check_value(item, types[key], (*path, key), cls=cls, name=key)
        missing = [name for name in required_fields(cls) if name not in value]
        for name in missing:
            self.err(
                "E0208",
                f"`{self.where(path)}` is missing required key `{name}`",
                path,
                help=f"`{name}`: {field_descriptions(cls).get(name) or 'required'}",
            )

    def check_value(self, value: Any, tp: Any, path: Path_, *, cls: type[Any] | None, name: str) -> None:
        nested = struct_of(tp)
        if _contains_ref(value) and not (nested is not None and isinstance(value, dict)):
            self.check_secret_ref(value, tp, path)
            return  # `${VAR}` is checked after substitution
        if _has_unfit_scalar(value):
            return  # reported by check_scalars (msgspec cannot even print a lone surrogate)
        if cls is EnvironmentSpec and name in NETWORK_POLICY_FIELDS:
            self.check_policy(value, path)
            return
        if name == "artifacts" and isinstance(value, list):
            self.check_artifacts(value, path)
            return
        if name == "api_protocol":
            self.check_api_protocol(value, path)
            return
        if name == "base_url" and isinstance(value, str) and isinstance(cls, type) and issubclass(cls, ModelRoleSpec):
            self.check_model_url(value, path)
        if name == "retry_pattern_list" and isinstance(value, list):
            self.check_patterns(value, path)
        nested = struct_of(tp)
        if nested is not None and isinstance(value, dict):
            self.check_struct(value, nested, path, where=f"`{self.where(path)}`")
            return
        if (
            name in _PROVIDER_MAPS
            and isinstance(cls, type)
            and issubclass(cls, ResolvedRuntimeOptions | ClusterOptions)
        ):
            self.check_provider_keys(value, path)
        entry_type = dict_value_type(tp)
        if entry_type is not None and isinstance(value, dict):
            entry_struct = struct_of(entry_type)
            if entry_struct is not None:  # a map of records (model.roles): each checked as a record
                for key, item in value.items():
                    at = (*path, key)
                    if isinstance(item, dict):
                        self.check_struct(item, entry_struct, at, where=f"`{self.where(at)}`")
                    else:
                        self.type_error(f"Expected `object`, got `{type(item).__name__}`", at, cls, name, item)
                return
            # Check entry by entry, so an error points at the entry (msgspec says `[...]`).
            for key, item in value.items():
                try:
                    msgspec.convert(item, entry_type, strict=True)
                except msgspec.ValidationError as exc:
                    self.type_error(str(exc), (*path, key), cls, name, item)
            return
        choices = literal_values(tp)
        if choices is not None and isinstance(value, str) and value not in choices:
            self.bad_choice(value, choices, path)
            return
        try:
            msgspec.convert(value, tp, strict=True)
        except msgspec.ValidationError as exc:
            self.type_error(str(exc), path, cls, name, value)

    def check_provider_keys(self, value: Any, path: Path_) -> None:
        """``provider_limits``/``env_open_qps`` are keyed by environment provider id (E0203)."""
        from acx.components import registry

        if not isinstance(value, dict):
            return
        ids = sorted(registry("environment"))
        for key in value:
            if key in ids:
                continue
            guess = did_you_mean(str(key), ids)
            self.err(
                "E0203",
                f"`{self.where(path)}`: unknown environment provider `{key}`",
                (*path, key),
                key=True,
                help=(f"did you mean `{guess}`? " if guess else "") + f"known: {', '.join(ids)} (acx list env)",
            )

    def bad_choice(self, value: str, choices: Iterable[Any], path: Path_) -> None:
        options = [str(c) for c in choices]
        guess = did_you_mean(value, options)
        self.err(
            "E0205",
            f"`{self.where(path)}`: expected one of {', '.join(options)}; got `{value}`",
            path,
            help=f"did you mean `{guess}`?" if guess else f"use one of: {', '.join(options)}",
        )

    def type_error(self, text: str, path: Path_, cls: type[Any] | None, name: str, value: Any) -> None:
        msg, sub = split_msgspec_error(text)
        if "[...]" in text:  # msgspec names no key inside a mapping: find the entry it means
            sub = (*sub, *_offending_key(value_at(value, sub), msg))
        full = (*path, *sub)
        bad = value_at(value, sub)
        if "matching regex" in msg:  # the form is said in the help; the value is not echoed
            msg = f"not of the form this field takes, got {_describe(bad)}"
        elif ", got " not in msg:
            msg += f", got {_describe(bad)}"
        described = field_descriptions(cls).get(name) if cls is not None else None
        help = f"`{name}`: {described}" if described else None
        if msg.startswith("expected `str`, got `int`") or msg.startswith("expected `str`, got `float`"):
            help = (help + "; " if help else "") + "quote the value to make it a string"
        self.err("E0204", f"`{self.where(full)}`: {msg}", full, help=help)

    # ---- special fields -------------------------------------------------------------------

    def check_policy(self, value: Any, path: Path_) -> None:
        if value is None:
            return
        if isinstance(value, str):
            if value not in NETWORK_MODES:
                self.bad_choice(value, NETWORK_MODES, path)
            return
        self.check_struct(value, NetworkPolicy, path, where=f"`{self.where(path)}`")

    def check_artifacts(self, value: list[Any], path: Path_) -> None:
        for i, item in enumerate(value):
            if isinstance(item, str):
                continue  # shorthand: an absolute source path (A4)
            self.check_struct(item, ArtifactSpec, (*path, i), where=f"`{self.where((*path, i))}`")

    def check_patterns(self, value: list[Any], path: Path_) -> None:
        """``retry_pattern_list``: Python regular expressions, compiled now rather than mid-run."""
        for i, pattern in enumerate(value):
            if not isinstance(pattern, str) or env_ref_name(pattern) is not None:
                continue  # a type error is reported by the type check; `${VAR}` after substitution
            problem = regex_problem(pattern)
            if problem is not None:
                self.err(
                    "E0204",
                    f"`{self.where((*path, i))}`: invalid regular expression {pattern!r}: {problem}",
                    (*path, i),
                    help="use Python `re` syntax; escape literal characters such as `(`, `[` or `.` with `\\`",
                )

    def check_model_url(self, value: str, path: Path_) -> None:
        """``user:password@`` in a model URL would not be the key acx sends, and would put a
        secret in the plan: refused (the value is never echoed)."""
        try:
            netloc = urlsplit(value).netloc
        except ValueError:
            return
        if "@" in netloc:
            self.err(
                "E0471",
                f"`{self.where(path)}` holds credentials (user:password@) before its host; acx sends the "
                "model key only as the API key header",
                path,
                help="remove user:password@ from the URL and give the key in `api_key` (e.g. `${OPENAI_API_KEY}`)",
            )

    def check_api_protocol(self, value: Any, path: Path_) -> None:
        if value is None:
            return
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            at = (*path, i) if isinstance(value, list) else path
            if not isinstance(item, str):
                self.err("E0204", f"`{self.where(at)}`: expected `str`, got {_type_name(item)}", at)
            elif item not in (*API_PROTOCOLS, ""):
                self.bad_choice(item, API_PROTOCOLS, at)
        if isinstance(value, list) and "auto" in value and len(value) > 1:
            self.err(
                "E0205",
                f"`{self.where(path)}`: `auto` cannot be mixed with explicit protocols",
                path,
                help="use `auto` alone, or list explicit protocols only",
            )

    # ---- scalars everywhere ---------------------------------------------------------------

    def check_scalars(self, value: Any, path: Path_) -> None:
        """Numbers are finite (T1: ``.inf``/``1e400``/NaN are no budget or count) and strings are
        Unicode text without NUL (no lone surrogate, e.g. from a JSON ``"\\ud800"``), wherever they sit."""
        if isinstance(value, dict):
            for k, v in value.items():
                self.check_scalars(v, (*path, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.check_scalars(v, (*path, i))
        elif isinstance(value, float) and not math.isfinite(value):
            self.err(
                "E0204",
                f"`{self.where(path)}`: expected a finite number, got `{value}`",
                path,
                help="budgets and counts are finite numbers; leave a timeout unset (null) for no deadline",
            )
        elif isinstance(value, str) and "\0" in value:
            self.err(
                "E0204",
                f"`{self.where(path)}`: a string cannot contain a NUL character (\\u0000)",
                path,
                help="remove it: paths, commands and environment variables cannot hold NUL",
            )
        elif isinstance(value, str) and (lone := lone_surrogate(value)) is not None:
            self.err(
                "E0204",
                f"`{self.where(path)}`: invalid string: `\\u{ord(lone):04x}` is a lone UTF-16 surrogate",
                path,
                help="write the character itself, or a high+low surrogate pair (e.g. \\ud83d\\ude00)",
            )

    def check_secret_ref(self, value: Any, tp: Any, path: Path_) -> None:
        """What compile will refuse about a secret reference, known without the environment: a
        secret (by its variable's name, or ``secret()`` in .acx) cannot fill a non-string field,
        nor a field of ``output``, ``runtime`` or ``execution``."""
        if isinstance(value, list):  # e.g. retry_pattern_list: the section rule applies to items
            for i, item in enumerate(value):
                self.check_secret_ref(item, str, (*path, i))
            return
        ref = env_ref_name(value)
        if ref is None or not (is_secret_name(ref) or path in self.doc.secret_paths):
            return
        semantic = path[2:] if path[:1] == ("requests",) else path[1:] if path[:1] == ("defaults",) else path
        if semantic[:1] in NO_SECRET_SECTIONS:
            d = no_secret_here(self.where(path), ref, None if self.cli_flag else self.doc.span_of(path))
            self.diagnostics.append(d)
        elif not _takes_text(tp):
            self.err(
                "E0204",
                f"`{self.where(path)}` cannot take the secret reference `${{{ref}}}`: a secret is "
                "resolved only where it is used, as a string",
                path,
                help="write the value, or reference it with an ordinary variable name (`env(...)` instead "
                "of `secret(...)` in .acx)",
            )

    # ---- interpolation --------------------------------------------------------------------

    def check_interpolation(self, value: Any, path: Path_) -> None:
        """R6: whole-field ``${VAR}`` only, except inside env-variable maps (V1)."""
        if isinstance(value, dict):
            for k, v in value.items():
                if k in ENV_MAP_KEYS:
                    continue
                self.check_interpolation(v, (*path, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.check_interpolation(v, (*path, i))
        elif has_embedded_ref(value) and path not in self.doc.literal_paths:
            span = None if self.cli_flag else self.doc.span_of(path)
            self.diagnostics.append(embedded_ref_diagnostic(value, span, self.where(path)))


class _ComponentChecks:
    """Component sections and run-config tables: ids (built-in, plugin, AgentCompass) and their params."""

    def __init__(self, c: Checker) -> None:
        self.c = c

    def check_run_config(self, data: Any) -> None:
        if not self.c.is_mapping(data, (), "a run config"):
            return
        for key, value in data.items():
            path = (key,)
            if key == "models":
                self.c.err(
                    "E0206",
                    "a run config cannot declare `models` (there is no model registry)",
                    path,
                    key=True,
                    help="give the model in the orchestration (`defaults.model` or `requests[].model`) "
                    "or on the command line",
                )
            elif key in RUN_CONFIG_STRUCT_SECTIONS:
                if value is not None:
                    self.c.check_struct(value, RUN_CONFIG_STRUCT_SECTIONS[key], path, where=f"`{key}`")
            elif key in ("benchmarks", "harnesses", "environments"):
                self.check_component_table(key, value, path)
            else:
                self.c.unknown_key(key, (), RUN_CONFIG_KEYS, "the run config")

    def check_component_table(self, section: str, value: Any, path: Path_) -> None:
        kind = {"benchmarks": "benchmark", "harnesses": "harness", "environments": "environment"}[section]
        if value is None:
            return  # `environments: null` drops earlier layers
        if not self.c.is_mapping(value, path, f"{kind} id → params"):
            return
        for cid, params in value.items():
            if not self.known_id(kind, cid, (*path, cid), key=True):
                continue
            if params is None:
                continue  # `<id>: null` drops earlier layers of this component
            if self.c.is_mapping(params, (*path, cid), f"params of {kind} `{cid}`"):
                self.check_params(kind, cid, params, (*path, cid), skip_id=False)

    def known_id(self, kind: str, cid: Any, path: Path_, *, key: bool = False) -> bool:
        from acx.components import registry

        ids = registry(kind)
        if not isinstance(cid, str):
            self.c.err("E0204", f"`{self.c.where(path)}`: expected a {kind} id string, got {_type_name(cid)}", path)
            return False
        if cid in ids:
            return True
        if kind == "harness" and self.agentcompass_harness(cid, path, key=key):
            return self.harness_is_mapped(cid)
        if ":" in cid:  # a `module:Class` id: say why it does not import (plugins)
            self.c.err(
                "E0301", ids.why_missing(cid), path, key=key, help="a `module:Class` id names an installed class"
            )
            return False
        if kind == "benchmark" and self.refused_benchmark(cid, path, key=key):
            return False
        guess = did_you_mean(cid, list(ids))
        listing = "acx list " + ("env" if kind == "environment" else kind)
        self.c.err(
            "E0301",
            f"unknown {kind} id `{cid}`",
            path,
            key=key,
            help=(f"did you mean `{guess}`? " if guess else "") + f"known: {', '.join(sorted(ids))} ({listing})",
        )
        return False

    @staticmethod
    def harness_is_mapped(cid: str) -> bool:
        from acx.components import mapped_harness

        return mapped_harness(cid) is not None

    def agentcompass_harness(self, cid: str, path: Path_, *, key: bool) -> bool:
        """An AgentCompass harness id (issue 23 item 5): True when it is one. A mapped id is valid
        (its params are checked against its AgentCompass params); a refused one is E0301 naming
        the nearest acx harness, what differs and what to use."""
        from acx.components import RefusedHarness, harness_alias

        entry = harness_alias(cid)
        if entry is None:
            return False
        if isinstance(entry, RefusedHarness):
            self.c.err(
                "E0301",
                f"AgentCompass harness `{cid}` has no acx equivalent; the nearest acx harness is "
                f"`{entry.nearest}`: {entry.differs}",
                path,
                key=key,
                help=entry.help,
            )
        return True

    def refused_benchmark(self, cid: str, path: Path_, *, key: bool) -> bool:
        """An AgentCompass benchmark id acx knows but cannot run: E0309 naming what is missing."""
        from acx.components.benchmarks._preset_table import UNSUPPORTED

        reason = UNSUPPORTED.get(cid)
        if reason is None:
            return False
        self.c.err(
            "E0309",
            f"AgentCompass benchmark `{cid}` is not supported by acx: {reason}",
            path,
            key=key,
            help="acx list benchmark shows the ids acx runs (QA presets over `dataset`, Harbor presets over `harbor`)",
        )
        return True

    def check_params(self, kind: str, cid: str, params: dict[str, Any], path: Path_, *, skip_id: bool) -> None:
        config_class = component_config_class(kind, cid)
        types = component_param_types(kind, cid) or {}
        legacy = _LEGACY_ENV_PARAMS if kind == "environment" else _LEGACY_HARNESS_PARAMS if kind == "harness" else {}
        for key, value in params.items():
            at = (*path, key)
            if key == "id" and skip_id:
                continue
            if key == "params":
                self.c.err(
                    "E0207",
                    f"`{self.c.where(at)}`: component sections have no `params:` layer",
                    at,
                    key=True,
                    help=_PARAMS_HELP,
                )
            elif key in legacy and key not in types:
                self.c.err(
                    "E0214",
                    f"`{self.c.where(at)}` is not supported; use {legacy[key]}",
                    at,
                    key=True,
                    help=f"move the value to {legacy[key]}",
                )
            elif key not in types:
                self.c.unknown_key(key, path, types, f"{kind} `{cid}` params")
            else:
                owner = (
                    EnvironmentSpec if (kind == "environment" and key in environment_field_types()) else config_class
                )
                self.c.check_value(value, types[key], at, cls=owner, name=key)

    def check_component_section(self, section: str, value: Any, path: Path_, *, hint: str | None) -> str | None:
        kind = COMPONENT_SECTIONS[section][0]
        if value is None:
            return None
        if not self.c.is_mapping(value, path, f"`{{id: ..., <{kind} params>}}`"):
            return None
        cid = value.get("id")
        if cid is not None:
            if not self.known_id(kind, cid, (*path, "id")):
                return None
            effective: str | None = cid
        else:
            effective = hint
        if effective is None:
            if "params" in value:
                self.check_params_layer(value, path)
            return None  # params of an id chosen elsewhere: checked after layering
        self.check_params(kind, effective, value, path, skip_id=True)
        return cid if isinstance(cid, str) else None

    def check_params_layer(self, value: dict[str, Any], path: Path_) -> None:
        self.c.err(
            "E0207",
            f"`{self.c.where((*path, 'params'))}`: component sections have no `params:` layer",
            (*path, "params"),
            key=True,
            help=_PARAMS_HELP,
        )


class _OrchestrationChecks:
    """An orchestration document: version, task concurrency, defaults and the requests."""

    def __init__(self, c: Checker) -> None:
        self.c = c

    def check_orchestration(self, data: dict[str, Any]) -> None:
        for key in data:
            if key == "models":
                self.c.err(
                    "E0206",
                    "an orchestration cannot declare `models` (there is no model registry)",
                    (key,),
                    key=True,
                    help="give each request's model in `defaults.model` or `requests[].model`",
                )
            elif key not in ORCHESTRATION_KEYS:
                self.c.unknown_key(key, (), ORCHESTRATION_KEYS, "the orchestration")
        self.check_version(data)
        if "name" in data and not (isinstance(data["name"], str) and data["name"].strip()):
            self.c.err("E0204", "`name`: expected a non-empty string", ("name",))
        if "task_concurrency" in data:
            self.check_task_concurrency(data["task_concurrency"])
        runtime = data.get("runtime")
        if isinstance(runtime, dict):
            for key in RUNTIME_REUSE_KEYS:
                if key in runtime:
                    self.c.err(
                        "E0203",
                        f"`runtime.{key}` is a per-request setting, not an orchestration runtime option",
                        ("runtime", key),
                        key=True,
                        help=f"set `defaults.runtime.{key}` (or a request's `runtime.{key}`)",
                    )
            rest = {k: v for k, v in runtime.items() if k not in RUNTIME_REUSE_KEYS}
            self.c.check_struct(rest, ResolvedRuntimeOptions, ("runtime",), where="orchestration `runtime`")
        elif runtime is not None:
            self.c.is_mapping(runtime, ("runtime",), "runtime options")
        defaults = data.get("defaults")
        ids: dict[str, str | None] = {}
        if defaults is not None and self.c.is_mapping(defaults, ("defaults",), "request defaults"):
            ids = self.check_request(defaults, ("defaults",), hints={}, is_defaults=True)
        self.check_requests(data, ids)

    def check_version(self, data: dict[str, Any]) -> None:
        if "version" not in data:
            self.c.err(
                "E0211",
                "the orchestration has no `version`",
                (),
                help="add `version: 1` at the top of the file",
            )
        elif data["version"] != 1 or isinstance(data["version"], bool):
            self.c.err(
                "E0211",
                f"unsupported orchestration version `{data['version']}`",
                ("version",),
                help="acx reads version 1 orchestration files: set `version: 1`",
            )

    def check_task_concurrency(self, value: Any) -> None:
        if env_ref_name(value) is not None:
            self.c.check_secret_ref(value, int, ("task_concurrency",))
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.c.err(
                "E0204",
                f"`task_concurrency`: expected an integer >= 1, got {_describe(value)}",
                ("task_concurrency",),
                help="`task_concurrency`: the global limit of concurrently running attempts",
            )

    def check_requests(self, data: dict[str, Any], default_ids: dict[str, str | None]) -> None:
        requests = data.get("requests")
        if requests is None:
            self.c.err(
                "E0210",
                "the orchestration has no `requests`",
                (),
                help="add a `requests:` list of named runs",
            )
            return
        if not isinstance(requests, list):
            self.c.err("E0204", f"`requests`: expected a list, got {_type_name(requests)}", ("requests",))
            return
        if not requests:
            self.c.err("E0210", "`requests` is empty", ("requests",), help="add at least one named request")
        names: dict[str, Path_] = {}
        namespaces: dict[tuple[str, str], tuple[Path_, str]] = {}
        replaced: dict[tuple[str, str], list[Path_]] = {}
        for i, request in enumerate(requests):
            path: Path_ = ("requests", i)
            if not self.c.is_mapping(request, path, "a request"):
                continue
            self.check_request(request, path, hints=default_ids, is_defaults=False)
            self.check_selects(request, path, data.get("defaults"))
            for section, rid in _replaced_ids(request, data.get("defaults")):
                replaced.setdefault((section, rid), []).append(path)
            name = request.get("name")
            if name is None:
                self.c.err("E0208", f"request #{i} has no `name`", path, help="give every request a unique `name`")
                continue
            if not isinstance(name, str) or not name.strip():
                self.c.err("E0204", f"`{self.c.where((*path, 'name'))}`: expected a non-empty string", (*path, "name"))
                continue
            if name in names:
                first_span = self.c.doc.span_of((*names[name], "name"))
                if first_span is not None and first_span == self.c.doc.span_of((*path, "name")):
                    # Both runs come from one `.acx` `for` loop: pointing twice at it says nothing.
                    self.c.err(
                        "E0303",
                        f"duplicate request name `{name}`: two iterations of this loop produce it",
                        (*path, "name"),
                        help="make the loop's values distinct, or interpolate the loop name into the run label",
                    )
                    continue
                self.c.err(
                    "E0303",
                    f"duplicate request name `{name}`",
                    (*path, "name"),
                    help="request names are unique within an orchestration; rename one of them",
                    related=(Related(first_span, "first used here"),) if first_span else (),
                )
                continue
            names[name] = path
            run_name = _run_name(request, data.get("defaults"))
            ns_key = (run_name, output_namespace(name))
            if ns_key in namespaces:
                other_path, other = namespaces[ns_key]
                first = self.c.doc.span_of((*other_path, "name"))
                self.c.err(
                    "E0304",
                    f"requests `{other}` and `{name}` write to the same output namespace `{ns_key[1]}`",
                    (*path, "name"),
                    help="characters outside [A-Za-z0-9._=-] become `_` in result paths; rename one request",
                    related=(Related(first, "first used here"),) if first else (),
                )
                continue
            namespaces[ns_key] = (path, name)
        self.warn_unapplied_defaults(data.get("defaults"), replaced)

    def warn_unapplied_defaults(self, defaults: Any, replaced: dict[tuple[str, str], list[Path_]]) -> None:
        """W0301: ``defaults.<section>`` params are dropped for requests that select another id (R10).

        Params sit beside the id they belong to, so a request that switches the component does not
        inherit them; users who expect them to carry over would otherwise lose them silently.
        """
        for (section, rid), paths in replaced.items():
            dropped = sorted(k for k in defaults[section] if k != "id")
            did = defaults[section]["id"]
            names = [str(value_at(self.c.doc.data, p).get("name", f"#{p[-1]}")) for p in paths]
            shown = ", ".join(f"`{n}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            related = tuple(
                Related(span, f"request `{n}` selects {section} `{rid}`")
                for p, n in zip(paths[:3], names[:3], strict=True)
                if (span := self.c.doc.span_of((*p, section, "id"))) is not None
            )
            self.c.diagnostics.append(
                Diagnostic(
                    code="W0301",
                    severity="warning",
                    message=f"`defaults.{section}` params for `{did}` ({', '.join(f'`{k}`' for k in dropped)}) "
                    f"are not applied to request(s) {shown}, which select {section} `{rid}`",
                    span=None if self.c.cli_flag else self.c.doc.key_span_of(("defaults", section)),
                    path=f"defaults.{section}",
                    help=f"params in `defaults.{section}` apply only to requests that use `{did}`; set them "
                    f"in the requests that need them, or in a run config under "
                    f"`{COMPONENT_SECTIONS[section][1]}.<id>`",
                    related=related,
                )
            )

    def check_selects(self, request: dict[str, Any], path: Path_, defaults: Any) -> None:
        """A request must select a benchmark and a harness, itself or through ``defaults``."""
        for section in ("benchmark", "harness"):
            sources = (request.get(section), defaults.get(section) if isinstance(defaults, dict) else None)
            if any(isinstance(s, dict) and "id" in s for s in sources):
                continue
            noun = "run" if self.c.doc.path.endswith(".acx") else "request"
            label = f"{noun} `{request['name']}`" if isinstance(request.get("name"), str) else f"this {noun}"
            self.c.err("E0305", f"{label} selects no {section}", path, help=select_help(section, self.c.doc.path))

    def check_request(
        self, request: dict[str, Any], path: Path_, *, hints: dict[str, str | None], is_defaults: bool
    ) -> dict[str, str | None]:
        """Check one request (or ``defaults``); returns its component ids (for ``defaults``)."""
        allowed = tuple(k for k in REQUEST_KEYS if not (is_defaults and k == "name"))
        ids: dict[str, str | None] = {}
        for key, value in request.items():
            at = (*path, key)
            if key not in allowed:
                if is_defaults and key == "name":
                    self.c.err(
                        "E0203",
                        "`defaults` cannot set `name`",
                        at,
                        key=True,
                        help="name each request instead",
                    )
                else:
                    self.c.unknown_key(key, path, allowed, "defaults" if is_defaults else "a request")
            elif key in COMPONENT_SECTIONS:
                ids[key] = self.c.components.check_component_section(key, value, at, hint=hints.get(key))
            elif key in REQUEST_STRUCT_SECTIONS and value is not None:
                skip = ("task_concurrency",) if key == "execution" else ()
                if key == "execution" and isinstance(value, dict) and "task_concurrency" in value:
                    self.c.err(
                        "E0213",
                        f"`{self.c.where((*at, 'task_concurrency'))}` is not allowed",
                        (*at, "task_concurrency"),
                        key=True,
                        help="set the orchestration's top-level `task_concurrency` (or --task-concurrency): "
                        "it is one global limit shared by all requests",
                    )
                self.c.check_struct(value, REQUEST_STRUCT_SECTIONS[key], at, where=f"`{self.c.where(at)}`", skip=skip)
        return ids


_SURROGATE = re.compile("[\ud800-\udfff]")


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a valid Python regular expression (None when it compiles)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    except (RecursionError, OverflowError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    return None


def lone_surrogate(text: str) -> str | None:
    """The first lone UTF-16 surrogate of ``text`` (None when it is proper Unicode text)."""
    m = _SURROGATE.search(text)
    return m.group() if m else None


def split_msgspec_error(text: str) -> tuple[str, Path_]:
    """``("expected `int`, got `str`", ("attempts", "k"))`` from a msgspec ValidationError text."""
    m = _MSGSPEC_AT.match(text.strip())
    msg = m.group("msg") if m else text
    msg = msg[:1].lower() + msg[1:]
    at = m.group("at") if m else None
    sub: list[str | int] = []
    if at:
        for tok in _PATH_TOKEN.finditer(at[1:]):
            if tok.group(1) is not None:
                sub.append(tok.group(1))
            elif tok.group(2) is not None:
                sub.append(int(tok.group(2)))
            else:
                break
    return msg, tuple(sub)


_GOT = re.compile(r"got `(?P<got>[a-z]+)`")
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float,),
    "bool": (bool,),
    "str": (str,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _offending_key(container: Any, msg: str) -> tuple[str, ...]:
    """The first key of ``container`` whose value has the type a msgspec message says it got."""
    m = _GOT.search(msg)
    kinds = _JSON_TYPES.get(m.group("got")) if m else None
    if not isinstance(container, dict) or kinds is None:
        return ()
    for key, item in container.items():
        if isinstance(item, kinds) and not (isinstance(item, bool) and bool not in kinds):
            return (key,)
    return ()


def select_help(section: str, doc_path: str) -> str:
    """How to select a component, in the syntax of the file being checked (.acx or YAML)."""
    if doc_path.endswith(".acx"):
        extra = "; use `harness none {}` for a harness-free benchmark" if section == "harness" else ""
        return f"add `{section} ID {{ ... }}` to the run or to `defaults`{extra}"
    extra = "; use `harness: {id: none}` for a harness-free benchmark" if section == "harness" else ""
    return f"add `{section}: {{id: ...}}` to the request or to `defaults`{extra}"


def _replaced_ids(request: dict[str, Any], defaults: Any) -> list[tuple[str, str]]:
    """(section, request id) where ``defaults`` gives params for a different component id."""
    out: list[tuple[str, str]] = []
    if not isinstance(defaults, dict):
        return out
    for section in COMPONENT_SECTIONS:
        base, own = defaults.get(section), request.get(section)
        if not (isinstance(base, dict) and isinstance(own, dict)):
            continue
        did, rid = base.get("id"), own.get("id")
        if isinstance(did, str) and isinstance(rid, str) and did != rid and any(k != "id" for k in base):
            out.append((section, rid))
    return out


def value_at(value: Any, sub: Path_) -> Any:
    """The value at ``sub`` inside ``value`` (None when any step is missing)."""
    for part in sub:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _takes_text(tp: Any) -> bool:
    """Whether a field of type ``tp`` accepts a string (where a secret reference can go)."""
    try:
        msgspec.convert("x", tp)
    except (msgspec.ValidationError, TypeError):
        return False
    return True


def _contains_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_contains_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_ref(v) for v in value)
    # An embedded or malformed reference has its own E0212 (check_interpolation): no type error too.
    return env_ref_name(value) is not None or has_embedded_ref(value)


def _has_unfit_scalar(value: Any) -> bool:
    """A lone surrogate (in a key or value) or a non-finite number: what check_scalars reports."""
    if isinstance(value, dict):
        return any(_has_unfit_scalar(k) or _has_unfit_scalar(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_unfit_scalar(v) for v in value)
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, str) and lone_surrogate(value) is not None


def _run_name(request: dict[str, Any], defaults: Any) -> str:
    for section in (
        request.get("output"),
        (defaults or {}).get("output") if isinstance(defaults, dict) else None,
    ):
        if isinstance(section, dict) and isinstance(section.get("run_name"), str):
            return str(section["run_name"])
    return ""


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"`{value}`"
    return _type_name(value)


def _last(path: Path_) -> str:
    return str(path[-1]) if path else "<root>"
