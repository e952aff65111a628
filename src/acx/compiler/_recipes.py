"""Recipes (contracts RC1–RC4): plan adjustments applied in registry order.

A recipe has an ``id``, ``matches(req, task, plan)`` and ``apply(plan, req, task)``; both run at
planning time and never open environments, install, call a model, touch task files or evaluate
(RC4). ``apply`` returns a new plan (``msgspec.structs.replace``) and keeps compatible explicit
user values.

Registry (RC1, RC3): the built-ins (Python recipes in ``acx.stdlib_recipes.RECIPE_CLASSES``, then
declarative ``*.acx`` recipes shipped in ``acx/stdlib_recipes/``, then installed entry points of
group ``acx.recipes``) in insertion order, never sorted; a run's registry copies them and appends
the recipes of each trusted ``runtime.recipe_dirs`` directory (``RunRequest.metadata.recipe_dirs``;
``__init__.py`` with ``RECIPE_CLASSES`` and/or ``*.acx`` files). ``execution.enabled_recipes`` empty → every recipe is a
candidate; non-empty → a whitelist (RC2).

Declarative recipes (``recipe NAME { match {…} defaults {…} set {…} }`` in ``.acx``): ``defaults``
fill only missing plan values — None, or a value still at its default that no user or task set —
and ``set`` overrides. Keys are ExecutionPlan field names.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec
from msgspec.structs import replace

from acx.diagnostics import Span, did_you_mean
from acx.errors import AcxPlanError
from acx.ir import ExecutionPlan, RunRequest, TaskSpec

__all__ = [
    "BaseRecipe",
    "DeclarativeRecipeAdapter",
    "DeclarativeRecipeLike",
    "RecipeRegistry",
    "add_document_recipes",
    "build_run_registry",
    "builtin_registry",
    "load_recipe_dir",
]

ENTRY_POINT_GROUP = "acx.recipes"
_DIR_MODULE_PREFIX = "acx_recipes_"


class BaseRecipe:
    """Base of Python recipes. Subclasses set ``id`` (non-empty) and override the two methods."""

    id: str = ""
    description: str = ""

    def matches(self, req: RunRequest, task: TaskSpec, plan: ExecutionPlan) -> bool:
        return True

    def apply(self, plan: ExecutionPlan, req: RunRequest, task: TaskSpec) -> ExecutionPlan:
        return plan

    @property
    def origin(self) -> str:
        cls = type(self)
        span = self.span
        if span is not None and cls.__module__.startswith(_DIR_MODULE_PREFIX):
            return f"python:{span} ({cls.__qualname__})"  # loaded from a recipe dir: name the file
        return f"python:{cls.__module__}.{cls.__qualname__}"

    @property
    def span(self) -> Span | None:
        """Where the recipe is defined (its class statement), for diagnostics."""
        cls = type(self)
        try:
            file = inspect.getsourcefile(cls)
            line = inspect.getsourcelines(cls)[1]
        except (OSError, TypeError):  # source unavailable (built in, zipped, …)
            return None
        return Span(file, line, 1) if file else None


class DeclarativeRecipeLike(Protocol):
    """The shape ``acx.compiler._acx_lower.load_acx_recipes`` returns."""

    @property
    def id(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def match(self) -> Mapping[str, Sequence[str]]: ...
    @property
    def defaults(self) -> Mapping[str, Any]: ...
    @property
    def set(self) -> Mapping[str, Any]: ...
    @property
    def span(self) -> Any: ...


_MATCH_KEYS = ("benchmark", "environment", "harness", "task_category")


class DeclarativeRecipeAdapter(BaseRecipe):
    """Evaluates a declarative recipe: match conditions, ``defaults`` (fill missing), ``set``."""

    def __init__(self, decl: DeclarativeRecipeLike) -> None:
        self.decl = decl
        self.id = decl.id
        self.description = decl.description
        self._validate()
        # Values are constants: convert (and so validate) them once, not per plan.
        self._defaults = self._converted(decl.defaults, "defaults")
        self._set = self._converted(decl.set, "set")

    @property
    def origin(self) -> str:
        span = self.decl.span
        return f"acx:{span}" if span is not None else "acx"

    @property
    def span(self) -> Span | None:
        return self.decl.span if isinstance(self.decl.span, Span) else None

    def _error(self, message: str, help: str) -> AcxPlanError:
        return AcxPlanError(f"recipe {self.id!r}: {message}", code="E0430", span=self.span, help=help)

    def _validate(self) -> None:
        for key, values in self.decl.match.items():
            if key not in _MATCH_KEYS:
                hint = did_you_mean(key, _MATCH_KEYS)
                raise self._error(
                    f"unknown match key {key!r}",
                    (f"did you mean {hint!r}? " if hint else "") + "match keys: " + ", ".join(_MATCH_KEYS),
                )
            if isinstance(values, str) or not all(isinstance(v, str) for v in values):
                raise self._error(f"match.{key} must be a list of strings", f'e.g. {key} = ["…"]')
        for section in ("defaults", "set"):
            _check_keys(getattr(self.decl, section), ExecutionPlan, section, self._error)

    def matches(self, req: RunRequest, task: TaskSpec, plan: ExecutionPlan) -> bool:
        for key, values in self.decl.match.items():
            if key == "benchmark":
                actual = req.benchmark.id
            elif key == "environment":
                actual = req.environment.id
            elif key == "harness":
                actual = req.harness.id
            else:
                actual = task.category
            if actual not in values:
                return False
        return True

    def apply(self, plan: ExecutionPlan, req: RunRequest, task: TaskSpec) -> ExecutionPlan:
        return self.apply_explicit(plan, frozenset())

    def apply_explicit(self, plan: ExecutionPlan, explicit: frozenset[str]) -> ExecutionPlan:
        """``explicit``: plan paths a user or the task set (kept even when equal to the default)."""
        return self._apply(plan, explicit, fill_all=False)

    def _apply(self, plan: ExecutionPlan, explicit: frozenset[str], *, fill_all: bool) -> ExecutionPlan:
        try:
            plan = _apply_struct(plan, ExecutionPlan, self._defaults, explicit, "", fill=not fill_all)
            out: ExecutionPlan = _apply_struct(plan, ExecutionPlan, self._set, explicit, "", fill=False)
        except msgspec.ValidationError as exc:  # a block filling an absent struct lacks required fields
            raise self._error(f"cannot apply: {exc}", "set the whole struct or only fields of present ones") from None
        return out

    def _converted(self, section: Mapping[str, Any], where: str) -> dict[str, Any]:
        try:
            return _convert_section(section, ExecutionPlan)
        except msgspec.ValidationError as exc:
            raise self._error(
                f"invalid value in {where}: {exc}", "fix the value to the ExecutionPlan field's type"
            ) from None


def _struct_type(tp: Any) -> type[msgspec.Struct] | None:
    """The Struct class inside ``tp`` (``X`` or ``X | None``), if any."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    for arg in getattr(tp, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
            return arg
    return None


_NO_DEFAULT: Any = msgspec.NODEFAULT


@functools.cache
def _fields(cls: type[msgspec.Struct]) -> dict[str, tuple[Any, Any, type[msgspec.Struct] | None]]:
    """Field name → (type, default, struct type inside) of a Struct class (default ``NODEFAULT``)."""
    out: dict[str, tuple[Any, Any, type[msgspec.Struct] | None]] = {}
    for f in msgspec.structs.fields(cls):
        default = f.default
        if default is _NO_DEFAULT and f.default_factory is not _NO_DEFAULT:
            default = f.default_factory()
        out[f.name] = (f.type, default, _struct_type(f.type))
    return out


def _check_keys(section: Mapping[str, Any], cls: type[msgspec.Struct], where: str, error: Any) -> None:
    fields = _fields(cls)
    for key, value in section.items():
        if key not in fields:
            hint = did_you_mean(key, fields)
            raise error(
                f"{where}: {cls.__name__} has no field {key!r}",
                (f"did you mean {hint!r}? " if hint else "") + "keys are ExecutionPlan field names",
            )
        sub = fields[key][2]
        if isinstance(value, Mapping) and sub is not None:
            _check_keys(value, sub, f"{where}.{key}", error)


def _convert_section(section: Mapping[str, Any], cls: type[msgspec.Struct]) -> dict[str, Any]:
    """The section with every leaf converted to its field type (nested blocks stay dicts)."""
    fields = _fields(cls)
    out: dict[str, Any] = {}
    for key, value in section.items():
        ftype, _default, sub = fields[key]
        if isinstance(value, Mapping) and sub is not None:
            out[key] = _convert_section(value, sub)
        else:
            out[key] = msgspec.convert(_plain(value), ftype)
    return out


def _apply_struct(
    obj: Any,
    cls: type[msgspec.Struct],
    section: Mapping[str, Any],
    explicit: frozenset[str],
    prefix: str,
    *,
    fill: bool,
) -> Any:
    """``section`` (converted values) applied to ``obj``: ``fill`` sets only missing values.

    Missing = None, or still equal to the field default while no user/task set it (``explicit``).
    Maps (env vars, params) merge per key. A nested block on a None field builds that struct.
    """
    fields = _fields(cls)
    changes: dict[str, Any] = {}
    for key, value in section.items():
        _ftype, default, sub = fields[key]
        current = getattr(obj, key)
        path = prefix + key
        if sub is not None and isinstance(value, dict):
            if current is not None:
                new = _apply_struct(current, sub, value, explicit, f"{path}.", fill=fill)
            else:
                new = msgspec.convert(msgspec.to_builtins(value), sub)
        elif isinstance(value, dict) and isinstance(current, dict):
            new = {**value, **current} if fill else {**current, **value}
        else:
            if fill and not (
                current is None or (path not in explicit and default is not _NO_DEFAULT and current == default)
            ):
                continue
            new = value
        if new is not current and new != current:
            changes[key] = new
    return replace(obj, **changes) if changes else obj


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# The registry.
# ---------------------------------------------------------------------------------------------
class RecipeRegistry:
    """Recipes in insertion order (RC3); ids are unique."""

    def __init__(self, recipes: Iterable[BaseRecipe] = ()) -> None:
        self._recipes: list[BaseRecipe] = []
        self._ids: dict[str, BaseRecipe] = {}
        for recipe in recipes:
            self.add(recipe)

    def add(self, recipe: BaseRecipe) -> None:
        rid = recipe.id
        if not isinstance(rid, str) or not rid:
            raise AcxPlanError(
                f"recipe {recipe.origin} has no id",
                code="E0430",
                help="set a non-empty class attribute `id`",
            )
        if rid in self._ids:
            raise AcxPlanError(
                f"duplicate recipe id {rid!r}: {recipe.origin} and {self._ids[rid].origin}",
                code="E0430",
                help="recipe ids must be unique across built-ins, entry points and recipe_dirs; rename one",
            )
        self._ids[rid] = recipe
        self._recipes.append(recipe)

    def copy(self) -> RecipeRegistry:
        return RecipeRegistry(self._recipes)

    def __iter__(self) -> Iterator[BaseRecipe]:
        return iter(self._recipes)

    def __len__(self) -> int:
        return len(self._recipes)

    def ids(self) -> list[str]:
        return [r.id for r in self._recipes]

    def get(self, rid: str) -> BaseRecipe | None:
        return self._ids.get(rid)

    def candidates(self, enabled: Sequence[str]) -> list[BaseRecipe]:
        """RC2: ``[]`` → all, in registry order; otherwise the whitelist (unknown ids are errors)."""
        if not enabled:
            return list(self._recipes)
        unknown = [e for e in enabled if e not in self._ids]
        if unknown:
            hint = did_you_mean(unknown[0], self._ids)
            raise AcxPlanError(
                f"execution.enabled_recipes names unknown recipe(s): {', '.join(unknown)}",
                code="E0431",
                path="execution.enabled_recipes",
                help=(f"did you mean {hint!r}? " if hint else "")
                + "known recipes: "
                + (", ".join(self._ids) or "(none)"),
            )
        wanted = set(enabled)
        return [r for r in self._recipes if r.id in wanted]


def _instantiate(cls: Any, origin: str) -> BaseRecipe:
    """RC1: concrete BaseRecipe subclasses with an id, constructible without arguments."""
    if not (inspect.isclass(cls) and issubclass(cls, BaseRecipe)) or inspect.isabstract(cls):
        raise AcxPlanError(
            f"{origin}: {cls!r} is not a concrete acx recipe class",
            code="E0430",
            help="RECIPE_CLASSES must list subclasses of acx.compiler._recipes.BaseRecipe",
        )
    if not getattr(cls, "id", ""):
        raise AcxPlanError(
            f"{origin}: recipe class {cls.__name__} has no id",
            code="E0430",
            help="set a non-empty class attribute `id`",
        )
    try:
        return cls()
    except TypeError as exc:
        raise AcxPlanError(
            f"{origin}: recipe class {cls.__name__} cannot be built without arguments: {exc}",
            code="E0430",
            help="give the recipe a zero-argument constructor",
        ) from None


def _declarative(path: Path) -> list[BaseRecipe]:
    from acx.compiler._acx_lower import load_acx_recipes  # the .acx front end

    return [DeclarativeRecipeAdapter(d) for d in load_acx_recipes(str(path))]


_DIRS_PATH = "runtime.recipe_dirs"


def _import_recipe_package(root: Path, init: Path) -> Any:
    """Import a trusted recipe dir's ``__init__.py``; its failure is a clear error, not a crash."""
    import sys

    name = _DIR_MODULE_PREFIX + hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(root)])
    if spec is None or spec.loader is None:  # pragma: no cover - defensive
        raise AcxPlanError(f"cannot import recipe package {root}", code="E0430", help="check the directory")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        line = _traceback_line(exc, init)
        raise AcxPlanError(
            f"recipe package {init} failed to import: {type(exc).__name__}: {exc}",
            code="E0430",
            span=Span(str(init), line, 1) if line else None,
            path=None if line else _DIRS_PATH,
            help="fix the recipe package (it is imported with the acx interpreter), "
            "or remove its directory from runtime.recipe_dirs",
        ) from exc
    return module


def _traceback_line(exc: BaseException, init: Path) -> int | None:
    """The line of ``init`` the import failed on (a SyntaxError's own line first)."""
    if isinstance(exc, SyntaxError) and exc.filename == str(init):
        return exc.lineno
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(init):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def load_recipe_dir(directory: str | Path) -> list[BaseRecipe]:
    """A trusted recipe directory: ``__init__.py`` with ``RECIPE_CLASSES`` and/or ``*.acx`` files."""
    root = Path(directory)
    if not root.is_dir():
        raise AcxPlanError(
            f"recipe directory {root} does not exist",
            code="E0430",
            path=_DIRS_PATH,
            help="fix runtime.recipe_dirs (relative paths resolve against the file that declares them)",
        )
    recipes: list[BaseRecipe] = []
    init = root / "__init__.py"
    if init.is_file():
        classes = getattr(_import_recipe_package(root, init), "RECIPE_CLASSES", None)
        if not classes:
            raise AcxPlanError(
                f"recipe package {root} defines no RECIPE_CLASSES",
                code="E0430",
                path=_DIRS_PATH,
                help="define RECIPE_CLASSES = [MyRecipe, …] in its __init__.py",
            )
        recipes.extend(_instantiate(c, str(init)) for c in classes)
    for acx_file in sorted(root.glob("*.acx")):
        recipes.extend(_declarative(acx_file))
    if not recipes:
        raise AcxPlanError(
            f"recipe directory {root} holds no recipes",
            code="E0430",
            path=_DIRS_PATH,
            help="add an __init__.py with RECIPE_CLASSES or *.acx recipe files",
        )
    return recipes


def _entry_point_recipes() -> list[BaseRecipe]:
    from importlib.metadata import entry_points

    out: list[BaseRecipe] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise AcxPlanError(
                f"recipe entry point {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}",
                code="E0430",
                help=f"fix or uninstall the package that declares the {ENTRY_POINT_GROUP!r} entry point",
            ) from exc
        classes = getattr(obj, "RECIPE_CLASSES", None) if inspect.ismodule(obj) else [obj]
        out.extend(_instantiate(c, f"entry point {ep.name}") for c in classes or [])
    return out


#: The package of built-in recipes, named (like a driver's ``impl``) rather than imported here: it
#: builds on this module's public types, and the compiler must not depend on it back (no cycle).
STDLIB_RECIPES = "acx.stdlib_recipes"


@functools.lru_cache(maxsize=1)
def _builtins() -> tuple[BaseRecipe, ...]:
    stdlib = importlib.import_module(STDLIB_RECIPES)

    recipes: list[BaseRecipe] = [_instantiate(c, "acx.stdlib_recipes") for c in stdlib.RECIPE_CLASSES]
    for acx_file in sorted(Path(str(stdlib.__file__)).parent.glob("*.acx")):
        recipes.extend(_declarative(acx_file))
    recipes.extend(_entry_point_recipes())
    return tuple(recipes)


def builtin_registry() -> RecipeRegistry:
    """A fresh copy of the built-in registry (RC1)."""
    return RecipeRegistry(_builtins())


def build_run_registry(recipe_dirs: Sequence[str], *, base: RecipeRegistry | None = None) -> RecipeRegistry:
    """Built-ins (or ``base``) copied, then each trusted recipe dir appended in order (RC1)."""
    registry = (base or builtin_registry()).copy()
    for directory in recipe_dirs:
        for recipe in load_recipe_dir(directory):
            registry.add(recipe)
    return registry


def add_document_recipes(registry: RecipeRegistry, metadata: Any) -> None:
    """Append the ``recipe`` blocks declared in (or imported into) the request's ``.acx`` spec and
    ``.acx`` config files, after built-ins and recipe dirs (registry order, RC3): a recipe a spec
    declares is applied like any other, as docs/language.md promises (issue 11 item 16)."""
    for path in (*metadata.config_path, metadata.spec_path or ""):
        if path.endswith(".acx"):
            for recipe in _declarative(Path(path)):
                registry.add(recipe)
