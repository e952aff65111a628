"""The ``.acx`` front end: parse, resolve imports/lets/loops, lower to the YAML data shape.

One resolver, two front ends: a ``.acx`` spec lowers to **exactly** the data its YAML twin
holds (an AgentCompass v1 orchestration file or a run config), plus a span for every value and
key, so the resolver, validation and provenance see no difference but better locations.

Lowering rules (docs/language.md has the user-facing reference):

* ``kind { body }`` → ``kind: {…}``; ``kind LABEL [{ body }]`` → ``kind: {id: LABEL, …}``; at the
  top of a run config ``benchmark|harness|environment ID {…}`` → ``benchmarks|…: {ID: {…}}``;
  ``run NAME {…}`` → an entry ``{name: NAME, …}`` of ``requests``.
* Durations lower to seconds on ``<key>_seconds``, sizes to whole MiB on ``<key>_mb``.
* A bare name is a ``let``/loop name, else an enum value checked against the field's schema
  (``no_network`` → ``"no-network"``).
* ``env("X")`` → ``"${X}"``; ``secret("X")`` → ``"${X}"`` and the path goes to ``secret_paths``.
  acx never reads the process environment here: the resolver substitutes or keeps references.

Errors are collected (one per mistake) and raised together as :class:`AcxSyntaxError`.
"""

from __future__ import annotations

import functools
import os
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from acx.compiler._source import DocKind, Path_, SourceDoc
from acx.diagnostics import Diagnostic, Related, Span, did_you_mean, unique
from acx.envref import has_reference_syntax
from acx.errors import AcxSyntaxError
from acx.grammar import _ast as A
from acx.inputs import MAX_EXPANDED_NODES, MAX_LOOP_ITERATIONS, MAX_NESTING_DEPTH, MAX_STRING_CHARS

__all__ = [
    "LOWERING_CODES",
    "DeclarativeRecipe",
    "enum_values",
    "load_acx_document",
    "load_acx_recipes",
    "lower_module",
]

#: Codes of lowering diagnostics (syntax codes live in acx.grammar._errors.SYNTAX_CODES).
LOWERING_CODES: dict[str, str] = {
    "E0120": "file not found or unreadable",
    "E0121": "imported file not found",
    "E0122": "import cycle",
    "E0123": "an imported file may only hold import, let and recipe",
    "E0124": "name defined twice",
    "E0125": "undefined name",
    "E0126": "invalid enum value for this field",
    "E0127": "duplicate key in a block",
    "E0128": "invalid function call",
    "E0129": "invalid interpolation",
    "E0130": "duration or size in the wrong place",
    "E0131": "invalid for loop",
    "E0132": "invalid document structure",
    "E0133": "invalid recipe",
    # Input codes shared with every other input format (acx.inputs, docs/errors.md):
    "E0218": "not a regular file (directory, FIFO, socket, device)",
    "E0219": "an input limit was hit (size, nesting, expansion, string, loop count, integer)",
}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RECIPE_MATCH_KEYS = ("benchmark", "environment", "harness", "task_category")
_API_PROTOCOLS = ("openai-chat", "openai-responses", "anthropic", "auto")
_NETWORK_MODES = ("public", "no-network", "allowlist", "denylist")


@dataclass(frozen=True)
class DeclarativeRecipe:
    """A ``recipe NAME { … }`` block: match conditions and plan values (ExecutionPlan field names)."""

    id: str
    description: str
    match: dict[str, list[str]]
    defaults: dict[str, Any]
    set: dict[str, Any]
    span: Span


# -- schema facts (enum values per field, struct field sets) ----------------------------------------


def _unwrap(tp: Any) -> Iterator[Any]:
    """The leaf types of ``tp`` (through Annotated, unions, Optional)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        yield from _unwrap(typing.get_args(tp)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            yield from _unwrap(arg)
    else:
        yield tp


def _struct_hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


@functools.lru_cache(maxsize=2)
def _enum_table(plugins: bool = True) -> dict[str, frozenset[str]]:
    """Field name → the string values its schema enumerates (over every IR and config struct).

    Walking every struct's type hints costs ~60 ms (each string annotation is compiled) and
    imports every component module (the presets import the dataset and Harbor benchmarks): most
    of an ``.acx`` dry run's overhead over its YAML twin. The table is cached on disk beside
    lark's parser cache, keyed without importing anything: acx's version, the roots' references
    (``module:Class``) and the file, mtime and size of every acx source file and of each
    plugin root's module (a new component, plugin or edited config class gives a new key; a
    stale key is never reused). Only a miss imports the roots and walks them. ``plugins=False``:
    acx's own components only — no scan of the installed distributions' entry points (another
    third of a dry run), enough for every value of acx's own enums."""
    refs = _enum_root_refs(plugins)
    cache = _enum_cache_path(refs)
    cached = _read_enum_cache(cache)
    if cached is not None:
        return cached
    table = _build_enum_table(_enum_roots(refs))
    _write_enum_cache(cache, table)
    return table


def _enum_root_refs(plugins: bool) -> list[type[Any] | str]:
    """The structs the table covers — the IR roots and every registered component's config
    (with ``plugins``, theirs too) — as classes or, not imported yet, ``module:Class`` references."""
    from acx.components import BENCHMARKS, HARNESS_ALIASES, HARNESSES
    from acx.drivers import DRIVERS
    from acx.ir import ExecutionPlan, ResolvedRuntimeOptions, RunRequest

    refs: list[type[Any] | str] = [RunRequest, ResolvedRuntimeOptions, ExecutionPlan]
    for reg in (BENCHMARKS, HARNESSES, DRIVERS):
        refs.extend(info.config for info in (reg.values() if plugins else reg.builtin_entries()))
    # AgentCompass ids take AgentCompass params
    refs.extend(c for c in (getattr(a, "config", None) for a in HARNESS_ALIASES.values()) if c is not None)
    return refs


def _enum_roots(refs: list[type[Any] | str]) -> list[type[Any]]:
    from acx.registry import import_ref

    return [import_ref(r) if isinstance(r, str) else r for r in refs]


def _ref_name(ref: type[Any] | str) -> str:
    return ref if isinstance(ref, str) else f"{ref.__module__}:{ref.__qualname__}"


def _module_file(name: str) -> str:
    """The source file of module ``name``, found without importing it (when not loaded yet)."""
    import importlib.util
    import sys

    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None) or ""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return ""
    return (spec.origin or "") if spec is not None else ""


def _acx_sources() -> list[str]:
    """Every source file of the acx package (a nested config struct lives in one of them)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found: list[str] = []
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found.extend(os.path.join(base, f) for f in sorted(files) if f.endswith(".py"))
    return found


def _enum_cache_path(roots: list[type[Any]] | list[type[Any] | str]) -> str | None:
    import hashlib

    from acx import __version__
    from acx.grammar._parser import parser_cache_path

    lark_cache = parser_cache_path()
    if lark_cache is None:
        return None
    names = sorted(_ref_name(r) for r in roots)
    parts = [__version__, *names]
    acx_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    # Each root's own module outside acx (plugins), then every acx source: an edited file
    # changes the key.
    modules = sorted({n.partition(":")[0] for n in names})
    files = [(m, _module_file(m)) for m in modules]
    files = [(m, f) for m, f in files if not os.path.abspath(f or os.sep).startswith(acx_dir)]
    files += [(os.path.relpath(f, acx_dir), f) for f in _acx_sources()]
    for name, file in files:
        try:
            st = os.stat(file)
            parts.append(f"{name}:{file}:{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append(f"{name}:{file}")
    digest = hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:24]
    return os.path.join(os.path.dirname(lark_cache), f"acx-enums-{digest}.json")


def _read_enum_cache(path: str | None) -> dict[str, frozenset[str]] | None:
    import json

    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and all(isinstance(x, str) for x in v) for v in raw.values()
    ):
        return None  # damaged or foreign: rebuild (and overwrite)
    return {str(k): frozenset(v) for k, v in raw.items()}


def _write_enum_cache(path: str | None, table: dict[str, frozenset[str]]) -> None:
    import json
    import tempfile

    if path is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".acx-enums-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({k: sorted(v) for k, v in sorted(table.items())}, fh)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:
        return  # a read-only cache directory only costs the rebuild next time


def _build_enum_table(roots: list[type[Any]]) -> dict[str, frozenset[str]]:
    import msgspec

    from acx.ir import NetworkPolicy

    table: dict[str, set[str]] = {}
    seen: set[type[Any]] = set()

    def visit(tp: Any, name: str) -> None:
        for leaf in _unwrap(tp):
            origin = typing.get_origin(leaf)
            if origin is Literal:
                table.setdefault(name, set()).update(str(v) for v in typing.get_args(leaf))
            elif origin in (list, dict, tuple):
                for arg in typing.get_args(leaf):
                    visit(arg, name)
            elif isinstance(leaf, type) and issubclass(leaf, msgspec.Struct):
                if leaf is NetworkPolicy:  # a policy may be written as its mode (shorthand)
                    table.setdefault(name, set()).update(_NETWORK_MODES)
                if leaf not in seen:
                    seen.add(leaf)
                    for fname, ftype in _struct_hints(leaf).items():
                        visit(ftype, fname)

    for root in roots:
        visit(root, "")
    table.setdefault("api_protocol", set()).update(_API_PROTOCOLS)
    table.pop("", None)
    return {k: frozenset(v) for k, v in table.items()}


def enum_values(key: str) -> frozenset[str]:
    """The enum values a field named ``key`` takes anywhere in the schema (empty: not an enum)."""
    return _enum_table().get(key, frozenset())


def _builtin_enum_value(key: str, name: str) -> str | None:
    """``name`` (or its dashed spelling) when acx's own schema enumerates it for ``key``: the
    answer :func:`enum_values` gives for it too, without the scan for plugins (a plugin's enum
    values only add to the set)."""
    allowed = _enum_table(False).get(key, frozenset())
    for candidate in (name, name.replace("_", "-")):
        if candidate in allowed:
            return candidate
    return None


# -- values in flight ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _EnvRef:
    name: str
    secret: bool
    span: Span


@dataclass(frozen=True)
class _Dur:
    seconds: float
    span: Span


@dataclass(frozen=True)
class _Size:
    mib: float
    text: str
    span: Span


@dataclass(frozen=True)
class _Binding:
    """A let or loop name: the value's AST and the scope it is evaluated in (lazily, at use)."""

    value: A.Value
    scope: _Scope
    span: Span
    loop: bool = False


@dataclass
class _Scope:
    names: dict[str, _Binding] = field(default_factory=dict)
    parent: _Scope | None = None

    def lookup(self, name: str) -> _Binding | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def all_names(self) -> list[str]:
        out: list[str] = []
        scope: _Scope | None = self
        while scope is not None:
            out.extend(scope.names)
            scope = scope.parent
        return out


class _Abort(Exception):
    """Stops lowering one statement after its diagnostic was recorded."""


_MISSING = object()
_FAILED = object()


def _hint(guess: str | None) -> str:
    return f"did you mean `{guess}`? " if guess else ""


def _bare(value: str) -> str:
    """How an enum value is written as a bare name (``no-network`` → ``no_network``)."""
    return value.replace("-", "_") if _ENV_NAME.fullmatch(value.replace("-", "_")) else value


def _int_if_whole(value: float) -> int | float:
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else value


# -- the lowering ---------------------------------------------------------------------------------


Form = Literal["orchestration", "single_run", "run_config"]


class _Diagnostics:
    """The lowering's diagnostics: one per mistake; an input limit (E0219) reported once."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self.limit_hit = False

    def error(
        self,
        code: str,
        message: str,
        span: Span | None,
        help: str,
        related: tuple[Related, ...] = (),
    ) -> _Abort:
        self.diagnostics.append(Diagnostic(code=code, message=message, span=span, help=help, related=related))
        return _Abort()

    def limit(self, what: str, span: Span | None, help: str) -> _Abort:
        """An input limit was hit (E0219): reported once per document, then every statement stops."""
        if not self.limit_hit:
            self.limit_hit = True
            self.error("E0219", what, span, help)
        return _Abort()


class _Modules:
    """Files, imports and lets: which modules are read, which names they bind, which recipes
    they hold (lowered after the document)."""

    def __init__(self, diag: _Diagnostics) -> None:
        self.diag = diag
        self.error = diag.error
        self.modules: dict[str, A.Module] = {}
        self.recipes: list[tuple[A.Block, _Scope]] = []
        self.bound_files: set[str] = set()

    def load_module(self, path: str, chain: tuple[str, ...], at: Span | None) -> A.Module | None:
        from acx.grammar._parser import parse, read_source

        real = os.path.realpath(path)
        if real in chain:
            names = [os.path.relpath(p) for p in (*chain[chain.index(real) :], real)]
            self.error(
                "E0122",
                "import cycle: " + " → ".join(names),
                at,
                "break the cycle: move what both files need into a third file and import it from both",
            )
            return None
        if real in self.modules:
            return self.modules[real]
        try:
            text = read_source(path, at=at)
        except AcxSyntaxError as exc:
            if at is not None and not os.path.exists(path):
                self.error(
                    "E0121",
                    f"imported file not found: {path}",
                    at,
                    "import paths are relative to the importing file",
                )
            else:
                self.diag.diagnostics.extend(exc.diagnostics)
            return None
        try:
            module = parse(text, path)
        except AcxSyntaxError as exc:
            self.diag.diagnostics.extend(exc.diagnostics)
            return None
        self.modules[real] = module
        return module

    def bind_file(self, module: A.Module, scope: _Scope, chain: tuple[str, ...], *, imported: bool) -> None:
        """Bind the imports and lets of ``module`` into ``scope``; collect its recipes."""
        real = os.path.realpath(module.file)
        if real in self.bound_files:  # imported along two paths: its names are already bound
            return
        self.bound_files.add(real)
        for stmt in module.body:
            if isinstance(stmt, A.Import):
                self.do_import(stmt, module.file, scope, (*chain, real))
            elif isinstance(stmt, A.Let):
                self.bind_let(stmt, scope)
            elif isinstance(stmt, A.Block) and stmt.kind.value == "recipe":
                self.recipes.append((stmt, scope))
            elif imported:
                self.error(
                    "E0123",
                    f"{module.file} is imported, so it may only hold `import`, `let` and `recipe`",
                    stmt.span,
                    "move this statement into the importing file, or share it through a `let`",
                )

    def do_import(self, stmt: A.Import, importer: str, scope: _Scope, chain: tuple[str, ...]) -> None:
        if not stmt.path.is_plain:
            self.error("E0129", "an import path cannot interpolate names", stmt.path.span, "write the path literally")
            return
        rel = stmt.path.plain
        if not rel.endswith(".acx"):
            self.error("E0121", f"only .acx files can be imported, not {rel!r}", stmt.path.span, "import a .acx file")
            return
        target = os.path.normpath(os.path.join(os.path.dirname(importer), rel))
        module = self.load_module(target, chain, stmt.path.span)
        if module is not None:
            self.bind_file(module, scope, chain, imported=True)

    def bind_let(self, stmt: A.Let, scope: _Scope) -> None:
        name = stmt.name.value
        previous = scope.names.get(name)
        if previous is not None:
            if previous.span == stmt.name.span:
                return  # the same file imported twice along two paths
            self.error(
                "E0124",
                f"`{name}` is defined twice",
                stmt.name.span,
                "rename one of them; a name has one value",
                (Related(previous.span, "first defined here"),),
            )
            return
        scope.names[name] = _Binding(stmt.value, scope, stmt.name.span)


class _Values:
    """Values evaluated without being placed (markers for env refs, durations, sizes, maps)."""

    def __init__(self, diag: _Diagnostics) -> None:
        self.error, self.limit = diag.error, diag.limit
        self.active: list[_Binding] = []
        #: Let values by (binding, enum key): a let used n times is evaluated once, so doubling
        #: lets cost their size, not 2**n evaluations (``_FAILED`` remembers a reported error).
        self.memo: dict[tuple[int, str | None], tuple[_Binding, Any]] = {}

    def resolve_ref(self, ref: A.Ref, scope: _Scope, key: str | None) -> Any:
        binding = scope.lookup(ref.name)
        if binding is not None:
            return self.evaluate(binding, ref.name, ref.span, key)
        found = _builtin_enum_value(key, ref.name) if key else None
        if found is not None:
            return found
        allowed = enum_values(key) if key else frozenset()
        if allowed:
            for candidate in (ref.name, ref.name.replace("_", "-")):
                if candidate in allowed:
                    return candidate
            spelled = sorted(_bare(v) for v in allowed)
            guess = did_you_mean(ref.name, spelled)
            raise self.error(
                "E0126",
                f"`{ref.name}` is not a valid value for `{key}`; expected one of: {', '.join(spelled)}",
                ref.span,
                f"did you mean `{guess}`?"
                if guess
                else f"write one of them (`{key} = {spelled[0]}`); a bare name is an enum value or a `let`",
            )
        guess = did_you_mean(ref.name, scope.all_names())
        hint = f"did you mean `{guess}`? " if guess else ""
        where = f"`{key}` takes no enum values" if key else "no field to check an enum against"
        raise self.error(
            "E0125",
            f"undefined name `{ref.name}` ({where})",
            ref.span,
            hint + f'quote it for a string ("{ref.name}"), define it with `let`, '
            f'or read the environment with env("{ref.name}")',
        )

    def evaluate(self, binding: _Binding, name: str, at: Span, key: str | None) -> Any:
        """The value of a let/loop name at a use site (``key`` checks enum names in it)."""
        if any(b is binding for b in self.active):
            raise self.error(
                "E0125",
                f"`{name}` is defined in terms of itself",
                at,
                "a let cannot refer to itself, directly or through other lets",
                (Related(binding.span, "defined here"),),
            )
        memo_key = (id(binding), key)
        # The memo holds the binding itself, so its id cannot be reused by a later binding.
        held, known = self.memo.get(memo_key, (None, _MISSING))
        if held is binding and known is _FAILED:
            raise _Abort()
        if held is binding:
            return known
        self.active.append(binding)
        try:
            value = self.value(binding.value, binding.scope, key)
        except _Abort:
            self.memo[memo_key] = (binding, _FAILED)
            raise
        finally:
            self.active.pop()
        self.memo[memo_key] = (binding, value)
        return value

    def value(self, node: A.Value, scope: _Scope, key: str | None) -> Any:
        """Evaluate ``node`` without placing it (markers for env refs, durations, sizes)."""
        if isinstance(node, A.Str):
            return self.string(node, scope)
        if isinstance(node, A.Num | A.Bool):
            return node.value
        if isinstance(node, A.Null):
            return None
        if isinstance(node, A.Duration):
            return _Dur(node.seconds, node.span)
        if isinstance(node, A.Size):
            return _Size(node.mib, node.text, node.span)
        if isinstance(node, A.Ref):
            return self.resolve_ref(node, scope, key)
        if isinstance(node, A.Call):
            return self.call(node, scope)
        if isinstance(node, A.ListV):
            return _SpannedList([self.value(item, scope, key) for item in node.items], node.items)
        assert isinstance(node, A.MapV)
        return _MapMarker(node, scope)

    def call(self, node: A.Call, scope: _Scope) -> _EnvRef:
        func = node.func.value
        if func not in ("env", "secret"):
            guess = did_you_mean(func, ["env", "secret"])
            raise self.error(
                "E0128",
                f"unknown function `{func}`",
                node.func.span,
                _hint(guess) + 'the functions are env("VAR") and secret("VAR")',
            )
        if len(node.args) != 1 or not isinstance(node.args[0], A.Str) or not node.args[0].is_plain:
            raise self.error(
                "E0128",
                f"{func}() takes exactly one string: the variable name",
                node.span,
                f'write {func}("MY_VARIABLE")',
            )
        name = node.args[0].plain
        if not _ENV_NAME.fullmatch(name):
            raise self.error(
                "E0128",
                f"{name!r} is not an environment variable name",
                node.args[0].span,
                "variable names are letters, digits and '_', not starting with a digit",
            )
        return _EnvRef(name, func == "secret", node.span)

    def string(self, node: A.Str, scope: _Scope) -> str:
        out: list[str] = []
        for part in node.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            binding = scope.lookup(part.name)
            if binding is None:
                guess = did_you_mean(part.name, scope.all_names())
                raise self.error(
                    "E0125",
                    f"undefined name `{part.name}` in ${{…}}",
                    part.span,
                    _hint(guess)
                    + "${name} interpolates a let or loop name; to read the environment write "
                    + f"env(\"{part.name}\") as the whole value; write a literal '${{' as '$${{'",
                )
            value = self.evaluate(binding, part.name, part.span, None)
            out.append(self.scalar_text(value, part))
            if sum(map(len, out)) > MAX_STRING_CHARS:
                raise self.limit(
                    f"this string grows past {MAX_STRING_CHARS:,} characters by interpolation",
                    node.span,
                    f"strings are limited to {MAX_STRING_CHARS:,} characters (docs/errors.md#E0219); interpolate less",
                )
        return "".join(out)

    def scalar_text(self, value: Any, part: A.Interp) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str | int | float):
            return str(value)
        if isinstance(value, _EnvRef):
            raise self.error(
                "E0129",
                f"`{part.name}` is {'a secret' if value.secret else 'an env()'} reference and cannot be "
                "part of a longer string",
                part.span,
                "use the reference as a whole value (key = name); ${VAR} inside a string is not allowed",
            )
        raise self.error(
            "E0129",
            f"`{part.name}` is not a string, number or boolean, so it cannot be interpolated",
            part.span,
            "interpolate scalars only",
        )


class _Lowerer:
    """Places evaluated values into the document's data at their paths, block by block,
    recording each value's and key's span (and which paths hold secrets or literal ``${``)."""

    def __init__(self) -> None:
        self.diag = _Diagnostics()
        self.diagnostics = self.diag.diagnostics
        self.error, self.limit = self.diag.error, self.diag.limit
        self.files = _Modules(self.diag)
        self.values = _Values(self.diag)
        self.locs: dict[Path_, Span] = {}
        self.key_locs: dict[Path_, Span] = {}
        self.secret_paths: set[Path_] = set()
        #: strings holding a literal `${` (written `$${`): never read from the environment.
        self.literal_paths: set[Path_] = set()
        self.placed = 0  # values placed into the document (MAX_EXPANDED_NODES)
        self.iterations = 0  # for-loop iterations run (MAX_LOOP_ITERATIONS)

    # -- placing values at paths -------------------------------------------------------------
    def put(
        self,
        out: dict[str, Any],
        key: str,
        value: Any,
        path: Path_,
        key_span: Span,
        value_span: Span,
    ) -> None:
        full = (*path, key)
        if key in out:
            first = self.key_locs.get(full)
            raise self.error(
                "E0127",
                f"`{key}` is set twice in this block",
                key_span,
                "keep one of them (durations and sizes set `<key>_seconds` / `<key>_mb`)",
                (Related(first, "first set here"),) if first is not None else (),
            )
        out[key] = value
        self.key_locs[full] = key_span
        self.locs.setdefault(full, value_span)

    def place(self, raw: Any, path: Path_, span: Span) -> Any:
        """Turn an evaluated value into plain data at ``path``, recording spans and secrets."""
        self.placed += 1
        if len(path) > MAX_NESTING_DEPTH:  # lets can nest values deeper than the text does
            raise self.limit(
                f"values nest more than {MAX_NESTING_DEPTH} levels deep here (through lets)",
                span,
                f"the nesting limit is {MAX_NESTING_DEPTH} levels (docs/errors.md#E0219); flatten the structure",
            )
        if self.placed > MAX_EXPANDED_NODES or self.diag.limit_hit:
            raise self.limit(
                f"this document expands past {MAX_EXPANDED_NODES:,} values (lets used many times, loops)",
                span,
                f"a document expands to at most {MAX_EXPANDED_NODES:,} values (docs/errors.md#E0219); "
                "repeat large lets less",
            )
        self.locs[path] = span
        if isinstance(raw, _EnvRef):
            if raw.secret:
                self.secret_paths.add(path)
            return "${" + raw.name + "}"
        if isinstance(raw, _Dur | _Size):
            raise self.error(
                "E0130",
                "a duration or size must be the whole value of a field",
                raw.span,
                "durations become `<field>_seconds`, sizes `<field>_mb`: write `timeout = 30m`; "
                "inside a list write numbers",
            )
        if isinstance(raw, list):
            spans = raw.spans if isinstance(raw, _SpannedList) else [span] * len(raw)
            pairs = enumerate(zip(raw, spans, strict=True))
            return [self.place(item, (*path, i), item_span) for i, (item, item_span) in pairs]
        if isinstance(raw, _MapMarker):
            return self.body(raw.node.body, raw.scope, path, "generic")
        if has_reference_syntax(raw):
            self.literal_paths.add(path)
        return raw

    def assign(self, stmt: A.Assign, scope: _Scope, out: dict[str, Any], path: Path_) -> None:
        key = stmt.key.name
        raw = self.values.value(stmt.value, scope, key)
        span = _value_span(stmt.value)
        if isinstance(raw, _Dur):
            if key.endswith("_mb"):
                raise self.error("E0130", f"`{key}` takes a size, not a duration", raw.span, "write e.g. 16GiB")
            key = key if key.endswith("_seconds") else key + "_seconds"
            self.put(out, key, _int_if_whole(raw.seconds), path, stmt.key.span, span)
            return
        if isinstance(raw, _Size):
            if key.endswith("_seconds"):
                raise self.error("E0130", f"`{key}` takes a duration, not a size", raw.span, "write e.g. 30m")
            if not float(raw.mib).is_integer():
                raise self.error(
                    "E0130",
                    f"{raw.text} is {raw.mib:.3f} MiB, not a whole number of MiB",
                    raw.span,
                    "`_mb` fields hold whole MiB: use binary units (512MiB, 16GiB) or a multiple of 1MiB",
                )
            key = key if key.endswith("_mb") else key + "_mb"
            self.put(out, key, int(raw.mib), path, stmt.key.span, span)
            return
        self.put(out, key, None, path, stmt.key.span, span)
        out[key] = self.place(raw, (*path, key), span)

    # -- bodies ------------------------------------------------------------------------------
    def body(self, stmts: tuple[A.Stmt, ...], scope: _Scope, path: Path_, ctx: str) -> dict[str, Any]:
        """Lower the statements of a block into a mapping (``ctx`` selects special blocks)."""
        out: dict[str, Any] = {}
        local = _Scope(parent=scope)
        for stmt in stmts:
            if isinstance(stmt, A.Let):
                self.files.bind_let(stmt, local)
        self.statements(stmts, local, out, path, ctx)
        return out

    def statements(self, stmts: tuple[A.Stmt, ...], scope: _Scope, out: dict[str, Any], path: Path_, ctx: str) -> None:
        for stmt in stmts:
            try:
                self.statement(stmt, scope, out, path, ctx)
            except _Abort:
                continue

    def statement(self, stmt: A.Stmt, scope: _Scope, out: dict[str, Any], path: Path_, ctx: str) -> None:
        if isinstance(stmt, A.Let):
            return  # bound by body()
        if isinstance(stmt, A.Import):
            raise self.error("E0132", "`import` is only allowed at the top of a file", stmt.span, "move it to the top")
        if isinstance(stmt, A.Assign):
            self.assign(stmt, scope, out, path)
        elif isinstance(stmt, A.For):
            self.loop(stmt, scope, out, path, ctx)
        elif ctx == "orchestration" and stmt.kind.value == "run":
            self.run_block(stmt, scope, out, path)
        elif stmt.kind.value in ("orchestration", "recipe") or (ctx == "run_config" and stmt.kind.value == "run"):
            is_run = stmt.kind.value == "run"
            where = "inside an orchestration" if is_run else "at the top of a file"
            raise self.error(
                "E0132",
                f"`{stmt.kind.value}` is only allowed {where}",
                stmt.kind.span,
                "several runs (or a loop of runs) go in `orchestration NAME { … }`; a single run may be the whole file"
                if is_run
                else "move it to the top level of the file",
            )
        elif ctx == "run_config" and stmt.kind.value in _CONFIG_SECTIONS:
            self.config_component(stmt, scope, out, path)
        else:
            self.block(stmt, scope, out, path)

    def label_text(self, label: A.Name | A.Str, scope: _Scope) -> str:
        if isinstance(label, A.Name):
            binding = scope.lookup(label.value)
            if binding is not None and binding.loop:
                # Every iteration would get the same literal label; the author meant the value.
                raise self.error(
                    "E0132",
                    f"the label `{label.value}` is the literal text {label.value!r}, not the loop variable",
                    label.span,
                    f'write "${{{label.value}}}" to use the value of `{label.value}`',
                )
            return label.value
        return self.values.string(label, scope)

    def block(self, stmt: A.Block, scope: _Scope, out: dict[str, Any], path: Path_) -> None:
        key = stmt.kind.value
        full = (*path, key)
        value: dict[str, Any] = {}
        if stmt.label is not None:
            value["id"] = self.label_text(stmt.label, scope)
            self.locs[(*full, "id")] = stmt.label.span
            self.key_locs[(*full, "id")] = stmt.label.span
        self.put(out, key, value, path, stmt.kind.span, stmt.span)
        if stmt.body is not None:
            inner = self.body(stmt.body, scope, full, "generic")
            for k, v in inner.items():
                if k in value:
                    raise self.error(
                        "E0127",
                        f"`{k}` is set twice: by the block label and in the block",
                        self.key_locs.get((*full, k)),
                        "drop the `id = …` line (the label is the id)",
                        (Related(stmt.label.span, "label here"),) if stmt.label is not None else (),
                    )
                value[k] = v

    def run_block(self, stmt: A.Block, scope: _Scope, out: dict[str, Any], path: Path_) -> None:
        if stmt.label is None:
            raise self.error("E0132", "a `run` needs a name: run NAME { … }", stmt.kind.span, "write run my-run { … }")
        requests = out.setdefault("requests", [])
        if (*path, "requests") not in self.key_locs:
            self.key_locs[(*path, "requests")] = stmt.kind.span
            self.locs[(*path, "requests")] = stmt.span
        index = len(requests)
        rpath = (*path, "requests", index)
        name = self.label_text(stmt.label, scope)
        request: dict[str, Any] = {"name": name}
        self.locs[rpath] = stmt.span
        self.locs[(*rpath, "name")] = stmt.label.span
        self.key_locs[(*rpath, "name")] = stmt.label.span
        requests.append(request)
        if stmt.body is not None:
            local = _Scope(parent=scope)
            for inner in stmt.body:
                if isinstance(inner, A.Let):
                    self.files.bind_let(inner, local)
            self.statements(stmt.body, local, request, rpath, "generic")

    def config_component(self, stmt: A.Block, scope: _Scope, out: dict[str, Any], path: Path_) -> None:
        section = _CONFIG_SECTIONS[stmt.kind.value]
        if stmt.label is None:
            raise self.error(
                "E0132",
                f"`{stmt.kind.value}` needs an id here: {stmt.kind.value} ID {{ … }}",
                stmt.kind.span,
                f"name the component, e.g. `{stmt.kind.value} {_EXAMPLE_IDS[section]} {{ … }}`",
            )
        components = out.setdefault(section, {})
        self.key_locs.setdefault((*path, section), stmt.kind.span)
        self.locs.setdefault((*path, section), stmt.span)
        comp_id = self.label_text(stmt.label, scope)
        body = {} if stmt.body is None else self.body(stmt.body, scope, (*path, section, comp_id), "generic")
        self.put(components, comp_id, body, (*path, section), stmt.label.span, stmt.span)

    def loop(self, stmt: A.For, scope: _Scope, out: dict[str, Any], path: Path_, ctx: str) -> None:
        items = self.loop_items(stmt.iterable, scope)
        self.iterations += len(items)
        if self.iterations > MAX_LOOP_ITERATIONS or self.diag.limit_hit:
            raise self.limit(
                f"for loops run more than {MAX_LOOP_ITERATIONS:,} iterations in this document",
                stmt.span,
                f"loops are limited to {MAX_LOOP_ITERATIONS:,} iterations per document (docs/errors.md#E0219)",
            )
        for item_ast, item_scope in items:
            local = _Scope(parent=scope)
            local.names[stmt.var.value] = _Binding(item_ast, item_scope, stmt.var.span, loop=True)
            for inner in stmt.body:
                if isinstance(inner, A.Let):
                    self.files.bind_let(inner, local)
            self.statements(stmt.body, local, out, path, ctx)

    def loop_items(self, node: A.Value, scope: _Scope) -> list[tuple[A.Value, _Scope]]:
        seen = 0
        while isinstance(node, A.Ref) and seen < 100:
            binding = scope.lookup(node.name)
            if binding is None:
                raise self.error(
                    "E0125",
                    f"undefined name `{node.name}`",
                    node.span,
                    "loop over a list literal or a let holding one",
                )
            node, scope, seen = binding.value, binding.scope, seen + 1
        if not isinstance(node, A.ListV):
            raise self.error("E0131", "`for` loops over a list", _value_span(node), 'write for x in ["a", "b"] { … }')
        return [(item, scope) for item in node.items]


class _SpannedList(list[Any]):
    """An evaluated list that remembers where each item was written (for per-item spans)."""

    def __init__(self, items: list[Any], nodes: tuple[A.Value, ...]) -> None:
        super().__init__(items)
        self.spans = [node.span for node in nodes]


@dataclass(frozen=True)
class _MapMarker:
    node: A.MapV
    scope: _Scope


_CONFIG_SECTIONS = {"benchmark": "benchmarks", "harness": "harnesses", "environment": "environments"}
_EXAMPLE_IDS = {"benchmarks": "exact_match", "harnesses": "openai_chat", "environments": "docker"}


def _value_span(node: A.Value) -> Span:
    return node.span


# -- documents ------------------------------------------------------------------------------------


def _form_of(lw: _Lowerer, module: A.Module) -> tuple[Form | None, list[Any]]:
    """Which document form the top level holds, and its form-defining statements."""
    stmts = [
        s
        for s in module.body
        if not isinstance(s, A.Import | A.Let) and not (isinstance(s, A.Block) and s.kind.value == "recipe")
    ]
    orch = [s for s in stmts if isinstance(s, A.Block) and s.kind.value == "orchestration"]
    runs = [s for s in stmts if isinstance(s, A.Block) and s.kind.value == "run"]
    if orch or runs:
        anchor = orch or runs
        others = [s for s in stmts if s is not anchor[0]]
        if others:
            first = anchor[0]
            what = "an orchestration" if orch else "a single run"
            lw.error(
                "E0132",
                f"this file is {what}, so nothing else may sit at its top level",
                others[0].span,
                "put runs inside `orchestration NAME { … }`, defaults in its `defaults { … }`, and config "
                "sections (runtime, execution, benchmark …) in a separate config file",
                (Related(first.kind.span, f"{first.kind.value} starts here"),),
            )
            return None, []
        return ("orchestration" if orch else "single_run"), anchor
    return ("run_config" if stmts else None), stmts


def lower_module(module: A.Module, *, expected: DocKind | None = None) -> SourceDoc:
    """Lower a parsed module (imports are read relative to ``module.file``)."""
    lw = _Lowerer()
    lw.files.modules[os.path.realpath(module.file)] = module
    return _lower(lw, module, expected)


def _lower(lw: _Lowerer, module: A.Module, expected: DocKind | None) -> SourceDoc:
    try:
        return _lower_unguarded(lw, module, expected)
    except RecursionError:
        raise AcxSyntaxError(
            f"{module.file} nests lists, maps, blocks or lets too deeply",
            code="E0219",
            span=Span(module.file, 1, 1),
            help="flatten the structure (name inner parts with `let`)",
        ) from None


def _lower_unguarded(lw: _Lowerer, module: A.Module, expected: DocKind | None) -> SourceDoc:
    scope = _Scope()
    lw.files.bind_file(module, scope, (), imported=False)
    form, stmts = _form_of(lw, module)
    data: dict[str, Any] = {}
    if form is None and not lw.diagnostics:
        if expected == "run_config":
            form = "run_config"
        else:
            lw.error(
                "E0132",
                f"{module.file} defines no orchestration, run or config section",
                Span(module.file, 1, 1),
                "add `orchestration NAME { … }`, `run NAME { … }`, or config blocks (runtime, execution, …)",
            )
    if form == "orchestration":
        data = _orchestration(lw, stmts[0], scope)
    elif form == "single_run":
        data = _single_run(lw, stmts[0], scope)
    elif form == "run_config":
        lw.statements(tuple(stmts), scope, data, (), "run_config")
    for block, rscope in lw.files.recipes:
        try:
            _recipe(lw, block, rscope)  # checked even in spec files: a broken recipe is an error
        except _Abort:
            pass
    if lw.diagnostics:
        raise AcxSyntaxError(diagnostics=unique(lw.diagnostics))
    kind: DocKind = "run_config" if form == "run_config" else "orchestration"
    if expected is not None and kind != expected:
        first = stmts[0].span if stmts else Span(module.file, 1, 1)
        if expected == "run_config":
            raise AcxSyntaxError(
                f"{module.file} is an orchestration spec, not a config file",
                code="E0132",
                span=first,
                help="pass it as the SPEC argument; --config takes files with runtime/execution/benchmark/"
                "harness/environment blocks",
            )
        raise AcxSyntaxError(
            f"{module.file} is a run config (runtime/execution/component blocks), not an orchestration",
            code="E0132",
            span=first,
            help="wrap the runs in `orchestration NAME { … }` or write `run NAME { … }`; pass config files "
            "with --config",
        )
    lw.locs.setdefault((), Span(module.file, 1, 1))
    return SourceDoc(
        path=module.file,
        kind=kind,
        data=data,
        locs=lw.locs,
        key_locs=lw.key_locs,
        secret_paths=frozenset(lw.secret_paths),
        literal_paths=frozenset(lw.literal_paths),
        text=_text_of(module.file),
    )


def _text_of(path: str) -> str | None:
    from acx.grammar._parser import read_source

    try:
        return read_source(path)  # an editor's unsaved buffer (source_overlay) when there is one
    except AcxSyntaxError:
        return None


def _orchestration(lw: _Lowerer, block: A.Block, scope: _Scope) -> dict[str, Any]:
    if block.label is None or block.body is None:
        raise_at = block.kind.span
        lw.error(
            "E0132",
            "an orchestration needs a name and a body: orchestration NAME { … }",
            raise_at,
            "write orchestration nightly { run a { … } }",
        )
        return {}
    data: dict[str, Any] = {"version": 1}
    lw.locs[("version",)] = block.kind.span
    lw.key_locs[("version",)] = block.kind.span
    data["name"] = lw.label_text(block.label, scope)
    lw.locs[("name",)] = block.label.span
    lw.key_locs[("name",)] = block.label.span
    lw.locs[()] = block.span
    local = _Scope(parent=scope)
    for stmt in block.body:
        if isinstance(stmt, A.Let):
            lw.files.bind_let(stmt, local)
    body: dict[str, Any] = {}
    lw.statements(block.body, local, body, (), "orchestration")
    for key, value in body.items():
        if key in data:
            lw.error(
                "E0127",
                f"`{key}` is set twice: by the orchestration header and in its body",
                lw.key_locs.get((key,)),
                "the header `orchestration NAME` sets name and version; drop this line",
            )
            continue
        data[key] = value
    data.setdefault("requests", [])
    return data


def _single_run(lw: _Lowerer, block: A.Block, scope: _Scope) -> dict[str, Any]:
    if block.label is None:
        lw.error("E0132", "a `run` needs a name: run NAME { … }", block.kind.span, "write run my-run { … }")
        return {}
    data: dict[str, Any] = {"version": 1}
    lw.locs[("version",)] = block.kind.span
    lw.key_locs[("version",)] = block.kind.span
    try:
        data["name"] = lw.label_text(block.label, scope)
    except _Abort:
        return {}
    lw.locs[("name",)] = block.label.span
    lw.key_locs[("name",)] = block.label.span
    lw.run_block(block, scope, data, ())
    return data


# -- recipes --------------------------------------------------------------------------------------


def _recipe(lw: _Lowerer, block: A.Block, scope: _Scope) -> DeclarativeRecipe:
    if not isinstance(block.label, A.Name) or block.body is None:
        raise lw.error(
            "E0133",
            "a recipe needs a name and a body: recipe NAME { … }",
            block.kind.span,
            "write recipe my_fix { … }",
        )
    body = lw.body(block.body, scope, ("recipe", block.label.value), "generic")
    unknown = [k for k in body if k not in ("description", "match", "defaults", "set")]
    for key in unknown:
        guess = did_you_mean(key, ["description", "match", "defaults", "set"])
        lw.error(
            "E0133",
            f"unknown recipe section `{key}`",
            lw.key_locs.get(("recipe", block.label.value, key)),
            _hint(guess) + "a recipe has description, match, defaults and set",
        )
    description = body.get("description", "")
    if not isinstance(description, str):
        lw.error("E0133", "a recipe description is a string", block.span, 'write description = "…"')
        description = ""
    match = _recipe_match(lw, body.get("match", {}), ("recipe", block.label.value, "match"))
    defaults = body.get("defaults", {})
    setv = body.get("set", {})
    for section, values in (("defaults", defaults), ("set", setv)):
        if not isinstance(values, dict):
            lw.error("E0133", f"recipe `{section}` is a block", block.span, f"write {section} {{ … }}")
            continue
        _check_plan_keys(lw, values, ("recipe", block.label.value, section))
    if unknown:
        raise _Abort()
    return DeclarativeRecipe(
        id=block.label.value,
        description=description,
        match=match,
        defaults=defaults if isinstance(defaults, dict) else {},
        set=setv if isinstance(setv, dict) else {},
        span=block.span,
    )


def _recipe_match(lw: _Lowerer, raw: Any, path: Path_) -> dict[str, list[str]]:
    if not isinstance(raw, dict):
        lw.error(
            "E0133",
            "recipe `match` is a block of conditions",
            lw.locs.get(path),
            "write match { benchmark = … }",
        )
        return {}
    out: dict[str, list[str]] = {}
    for key, value in raw.items():
        span = lw.key_locs.get((*path, key))
        if key not in _RECIPE_MATCH_KEYS:
            guess = did_you_mean(key, _RECIPE_MATCH_KEYS)
            lw.error(
                "E0133",
                f"unknown match condition `{key}`",
                span,
                _hint(guess) + "conditions: " + ", ".join(_RECIPE_MATCH_KEYS),
            )
            continue
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) for v in values):
            lw.error("E0133", f"match `{key}` takes a string or a list of strings", span, f'write {key} = "id"')
            continue
        out[key] = list(values)
    return out


def _struct_for(tp: Any) -> type[Any] | None:
    import msgspec

    for leaf in _unwrap(tp):
        if isinstance(leaf, type) and issubclass(leaf, msgspec.Struct):
            return leaf
    return None


def _check_plan_keys(lw: _Lowerer, values: dict[str, Any], path: Path_, cls: type[Any] | None = None) -> None:
    """Closed-record check of recipe values against ExecutionPlan (and nested structs)."""
    from acx.ir import ExecutionPlan

    cls = cls or ExecutionPlan
    hints = _struct_hints(cls)
    for key, value in values.items():
        if key not in hints:
            guess = did_you_mean(key, list(hints))
            lw.error(
                "E0133",
                f"`{key}` is not a field of {cls.__name__}",
                lw.key_locs.get((*path, key)),
                _hint(guess) + "recipe values use ExecutionPlan field names",
            )
            continue
        inner = _struct_for(hints[key])
        if inner is not None and isinstance(value, dict):
            _check_plan_keys(lw, value, (*path, key), inner)
        elif inner is not None and inner.__name__ == "NetworkPolicy" and isinstance(value, str):
            # Plans hold policies as records: expand the `run_network_policy = no_network` shorthand.
            values[key] = {"network_mode": value}


# -- entry points ---------------------------------------------------------------------------------


def load_acx_document(path: str, *, expected: DocKind | None = None) -> SourceDoc:
    """Parse and lower the ``.acx`` file at ``path`` into a SourceDoc (YAML data shape + spans)."""
    lw = _Lowerer()
    module = lw.files.load_module(path, (), None)
    if module is None:
        raise AcxSyntaxError(diagnostics=lw.diagnostics)
    return _lower(lw, module, expected)


def load_acx_recipes(path: str) -> list[DeclarativeRecipe]:
    """The ``recipe`` blocks of ``path`` (and of the files it imports), in declaration order."""
    lw = _Lowerer()
    module = lw.files.load_module(path, (), None)
    if module is None:
        raise AcxSyntaxError(diagnostics=lw.diagnostics)
    lw.files.bind_file(module, _Scope(), (), imported=False)
    recipes: list[DeclarativeRecipe] = []
    seen: dict[str, Span] = {}
    for block, scope in lw.files.recipes:
        try:
            recipe = _recipe(lw, block, scope)
        except _Abort:
            continue
        if recipe.id in seen:
            lw.error(
                "E0133",
                f"recipe `{recipe.id}` is defined twice",
                block.label.span if block.label is not None else block.span,
                "give each recipe its own name",
                (Related(seen[recipe.id], "first defined here"),),
            )
            continue
        seen[recipe.id] = recipe.span
        recipes.append(recipe)
    if lw.diagnostics:
        raise AcxSyntaxError(diagnostics=unique(lw.diagnostics))
    return recipes
