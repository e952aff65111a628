"""One registry per extension point: built-ins, entry-point plugins and ``module:Class`` ids.

Each extension point owns one :class:`Registry` in its own package (``acx.drivers.DRIVERS``,
``acx.components.BENCHMARKS`` / ``HARNESSES`` / ``SCORERS``; recipes have
``acx.compiler.RecipeRegistry``). A registry maps an id to a :class:`ComponentInfo`: the id, a
one-line description, the typed config class and the implementation, both importable lazily as
``"module:attr"`` strings so listing, validating and compiling never import trio, the docker SDK
or an HTTP client.

Three ways in, resolved in this order:

1. built-ins, registered by their package with :meth:`Registry.register`;
2. plugins, an installed distribution's entry point in the registry's group (``acx.benchmarks``,
   ``acx.harnesses``, ``acx.drivers``, ``acx.scorers``): the entry-point name is the id and its
   value names either a ready :class:`ComponentInfo` or the implementation class;
3. ``module:Class`` ids written in a spec (``harness: {id: "mypkg.agents:Agent"}``): the class is
   imported from the installed module path and described from its own attributes.

A class stands for its own entry: ``config_class`` and ``description`` class attributes (or the
first docstring line), and it must subclass the extension point's base class. Nothing here imports
another acx package, so every package can own a registry without import cycles.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

__all__ = ["ComponentInfo", "ComponentLookupError", "Registry", "import_ref"]


class ComponentLookupError(KeyError):
    """An id that names no component; ``reason`` says why in one sentence (shown to users)."""

    def __init__(self, component_id: str, reason: str) -> None:
        super().__init__(component_id)
        self.component_id = component_id
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def import_ref(ref: str) -> Any:
    """The object named by ``"package.module:attr"`` (``attr`` may be dotted)."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"`{ref}` is not a `module:attribute` reference")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class ComponentInfo:
    """A registry entry. ``config`` and ``impl`` are classes or ``"module:attr"`` strings."""

    kind: str
    id: str
    description: str
    config: type[Any] | str
    impl: type[Any] | str
    #: Where the entry comes from: ``built-in``, ``plugin <distribution>`` or ``module:Class``.
    origin: str = "built-in"
    _cache: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def config_class(self) -> type[Any]:
        """The typed (msgspec) config class of the component's params."""
        return self._resolve("config", self.config)  # type: ignore[no-any-return]

    def load(self) -> Any:
        """The implementation class (imported on first use)."""
        return self._resolve("impl", self.impl)

    def create(self, config: Any, /, **kwargs: Any) -> Any:
        """An instance of the implementation with its typed ``config``. Its ``id`` is the id it
        was selected by (an entry-point name or a ``module:Class`` id names a plugin class that
        need not declare one)."""
        obj = self.load()(config, **kwargs)
        if getattr(obj, "id", None) != self.id:
            obj.id = self.id
        return obj

    def _resolve(self, key: str, value: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = import_ref(value) if isinstance(value, str) else value
        return self._cache[key]


def _first_doc_line(cls: type[Any]) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


class Registry(Mapping[str, ComponentInfo]):
    """The ids of one extension point (a read-only mapping id → :class:`ComponentInfo`).

    ``kind`` names the extension point in messages (``benchmark``, ``harness``, ``environment``,
    ``scorer``); ``group`` is its entry-point group; ``base`` (``"module:Class"``) is the class a
    plugin's implementation must subclass; ``info_class`` is the entry type (a
    :class:`ComponentInfo` subclass may add fields, filled from a class by ``from_class``).
    """

    def __init__(
        self,
        kind: str,
        *,
        group: str,
        base: str,
        info_class: type[ComponentInfo] = ComponentInfo,
        from_class: Callable[[type[Any]], Mapping[str, Any]] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self.base = base
        self.info_class = info_class
        self._extra_from_class = from_class
        self._builtins: dict[str, ComponentInfo] = {}
        self._plugins: dict[str, ComponentInfo] | None = None
        self._broken: dict[str, str] = {}
        self._refs: dict[str, ComponentInfo | ComponentLookupError] = {}
        self._lock = threading.Lock()

    # ---- registration -------------------------------------------------------------------------
    def register(self, info: ComponentInfo) -> ComponentInfo:
        """Add a built-in entry (ids are unique; ``module:Class`` ids are reserved for specs)."""
        if info.kind != self.kind:
            info = replace(info, kind=self.kind)
        if ":" in info.id or not info.id:
            raise ValueError(f"{self.kind} id {info.id!r} must be non-empty and contain no ':'")
        if info.id in self._builtins:
            raise ValueError(f"{self.kind} id {info.id!r} is already registered")
        self._builtins[info.id] = info
        return info

    # ---- lookup -------------------------------------------------------------------------------
    def __getitem__(self, cid: str) -> ComponentInfo:
        info = self._builtins.get(cid)
        if info is not None:
            return info
        if not isinstance(cid, str):
            raise ComponentLookupError(str(cid), f"{self.kind} id must be a string")
        if ":" in cid:
            return self._by_ref(cid)
        plugins = self._load_plugins()
        if cid in plugins:
            return plugins[cid]
        if cid in self._broken:
            raise ComponentLookupError(cid, self._broken[cid])
        raise ComponentLookupError(cid, f"unknown {self.kind} id `{cid}`")

    def __contains__(self, cid: object) -> bool:
        try:
            self[cid]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        """Built-in ids in registration order, then plugin ids (``module:Class`` refs are not
        listed: they are open-ended)."""
        yield from self._builtins
        yield from self._load_plugins()

    def __len__(self) -> int:
        return len(self._builtins) + len(self._load_plugins())

    def builtin_entries(self) -> list[ComponentInfo]:
        """The built-in entries in registration order, without scanning for plugins (which reads
        every installed distribution's metadata)."""
        return list(self._builtins.values())

    def why_missing(self, cid: str) -> str:
        """Why ``cid`` does not resolve (one sentence), or "" when it does."""
        try:
            self[cid]
        except ComponentLookupError as exc:
            return exc.reason
        return ""

    def broken_plugins(self) -> dict[str, str]:
        """Installed entry points of this group that failed to load: id → reason."""
        self._load_plugins()
        return dict(self._broken)

    # ---- plugins and module:Class ids ---------------------------------------------------------
    def info_from_class(self, cls: Any, cid: str, origin: str) -> ComponentInfo:
        """The entry a class stands for; raises ComponentLookupError when it is not one."""
        base = import_ref(self.base)
        if not isinstance(cls, type) or not issubclass(cls, base):
            raise ComponentLookupError(
                cid,
                f"`{cid}` is not {'an' if self.kind[0] in 'aeiou' else 'a'} {self.kind} class "
                f"(it must subclass {_public_name(base)})",
            )
        config = getattr(cls, "config_class", None)
        if not isinstance(config, type):
            raise ComponentLookupError(cid, f"{self.kind} class `{cid}` has no `config_class` class attribute")
        description = getattr(cls, "description", None)
        if not isinstance(description, str) or not description:
            description = _first_doc_line(cls)
        extra = dict(self._extra_from_class(cls)) if self._extra_from_class else {}
        names = {f.name for f in fields(self.info_class)}
        extra = {k: v for k, v in extra.items() if k in names}
        return self.info_class(
            kind=self.kind, id=cid, description=description, config=config, impl=cls, origin=origin, **extra
        )

    def _by_ref(self, cid: str) -> ComponentInfo:
        with self._lock:
            cached = self._refs.get(cid)
            if cached is None:
                cached = self._load_ref(cid)
                self._refs[cid] = cached
        if isinstance(cached, ComponentLookupError):
            raise cached
        return cached

    def _load_ref(self, cid: str) -> ComponentInfo | ComponentLookupError:
        module = cid.partition(":")[0]
        try:
            obj = import_ref(cid)
        except ValueError as exc:
            return ComponentLookupError(cid, str(exc))
        except ModuleNotFoundError as exc:
            return ComponentLookupError(
                cid, f"cannot import module `{module}` for {self.kind} `{cid}`: {exc} (is the package installed?)"
            )
        except AttributeError:
            return ComponentLookupError(cid, f"module `{module}` has no attribute `{cid.partition(':')[2]}`")
        except Exception as exc:  # a plugin's import-time bug must not become a traceback
            return ComponentLookupError(cid, f"importing {self.kind} `{cid}` failed: {type(exc).__name__}: {exc}")
        try:
            return self._info_from_object(obj, cid, "module:Class")
        except ComponentLookupError as exc:
            return exc

    def _info_from_object(self, obj: Any, cid: str, origin: str) -> ComponentInfo:
        if isinstance(obj, ComponentInfo):
            return replace(obj, kind=self.kind, id=cid, origin=origin)
        return self.info_from_class(obj, cid, origin)

    def _load_plugins(self) -> dict[str, ComponentInfo]:
        if self._plugins is not None:
            return self._plugins
        with self._lock:
            if self._plugins is None:
                self._plugins = self._scan_entry_points()
        return self._plugins

    def _scan_entry_points(self) -> dict[str, ComponentInfo]:
        from importlib.metadata import entry_points

        found: dict[str, ComponentInfo] = {}
        for ep in entry_points(group=self.group):
            dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
            where = f"entry point `{ep.name} = {ep.value}` of distribution `{dist}` (group {self.group})"
            if ep.name in self._builtins or ep.name in found or ":" in ep.name:
                self._broken[ep.name] = f"{where} is ignored: id `{ep.name}` is already taken or invalid"
                continue
            try:
                obj = ep.load()
                found[ep.name] = self._info_from_object(obj, ep.name, f"plugin {dist}")
            except ComponentLookupError as exc:
                self._broken[ep.name] = f"{where}: {exc.reason}"
            except Exception as exc:  # a broken plugin must not break every other id
                self._broken[ep.name] = f"{where} failed to load: {type(exc).__name__}: {exc}"
        return found

    def reset_plugins(self) -> None:
        """Forget scanned entry points and ``module:Class`` ids (after installing a plugin)."""
        with self._lock:
            self._plugins = None
            self._broken = {}
            self._refs = {}


def _public_name(cls: type) -> str:
    """``acx.components.BaseHarness`` rather than ``acx.components._base.BaseHarness``: the name the
    docs use, when the public package exports the same class."""
    public = ".".join(part for part in cls.__module__.split(".") if not part.startswith("_"))
    try:
        if import_ref(f"{public}:{cls.__qualname__}") is cls:
            return f"{public}.{cls.__qualname__}"
    except (ImportError, AttributeError, ValueError):  # not exported there: the defining module
        pass
    return f"{cls.__module__}.{cls.__qualname__}"
