"""``${NAME}`` environment references: the one implementation (contracts R6, V1).

A leaf module (standard library only) shared by the compiler, the interpreter, the drivers and
anything that resolves a reference at use time. The forms:

* a *whole-field reference* is exactly ``${NAME}`` (:func:`whole_name`); ``NAME`` is letters,
  digits and ``_``, not starting with a digit. Nothing else counts, not even a trailing newline;
* a *reference* anywhere in a string is ``${NAME}`` or ``${NAME:-default}`` (:data:`REFERENCE`):
  the default (any text without ``}``) is used when ``NAME`` is unset *or empty*, as in a shell;
* nothing else is interpreted: no ``$NAME``, no ``$${`` escape, no nesting, no shell expansion.

Config files accept only whole-field references outside env-variable maps (:data:`ENV_MAP_KEYS`);
inside them every form is kept and resolved right before use (:func:`substitute`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

__all__ = [
    "ENV_MAP_KEYS",
    "NAME",
    "REFERENCE",
    "has_reference_syntax",
    "iter_references",
    "malformed_whole",
    "reference_values",
    "referenced_names",
    "resolved_values",
    "substitute",
    "whole_default_name",
    "whole_name",
]

#: A variable name (the text inside ``${…}``).
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: Any reference: group 1 the name, group 2 the default (None without ``:-``).
REFERENCE = re.compile(rf"\$\{{({NAME})(?::-([^}}]*))?\}}")
_WHOLE = re.compile(rf"\$\{{({NAME})\}}")
#: ``${NAME:-default}`` as the whole value (a default holds no brace).
_WHOLE_DEFAULT = re.compile(rf"\$\{{({NAME}):-[^{{}}]*\}}", re.DOTALL)
#: One ``${...}`` (or an unterminated ``${...``) as the whole value, whatever its inside.
_WHOLE_ANY = re.compile(r"\$\{(?P<inner>[^{}$]*)(?P<close>\}?)", re.DOTALL)

#: Env-variable maps: their values keep every reference form until use (V1).
ENV_MAP_KEYS = frozenset(
    {"env_variables", "run_env_variables", "evaluation_env_variables", "evaluation_environment_env_variables"}
)


def has_reference_syntax(value: object) -> bool:
    """True when ``value`` is a string holding ``${`` (a reference, well formed or not)."""
    return isinstance(value, str) and "${" in value


def whole_name(value: object) -> str | None:
    """``NAME`` when ``value`` is exactly ``${NAME}``, else None."""
    if isinstance(value, str) and value.startswith("${"):
        m = _WHOLE.fullmatch(value)
        if m:
            return m.group(1)
    return None


def whole_default_name(value: str) -> str | None:
    """``NAME`` when ``value`` is exactly ``${NAME:-default}``, else None."""
    m = _WHOLE_DEFAULT.fullmatch(value)
    return m.group(1) if m else None


def malformed_whole(value: str) -> tuple[str, bool] | None:
    """``(inner, closed)`` when the whole value is one ``${...}`` (or an unterminated ``${...``)
    that may not be a valid reference; None when it is something longer."""
    m = _WHOLE_ANY.fullmatch(value)
    return (m.group("inner"), bool(m.group("close"))) if m else None


def iter_references(value: str) -> Iterator[tuple[str, str | None]]:
    """``(name, default or None)`` of every reference in ``value``, in order."""
    for m in REFERENCE.finditer(value):
        yield m.group(1), m.group(2)


def referenced_names(value: str) -> tuple[set[str], set[str]]:
    """(names that must be set, names that have a default) referenced in ``value``."""
    required: set[str] = set()
    optional: set[str] = set()
    for name, default in iter_references(value):
        (optional if default is not None else required).add(name)
    return required, optional


def substitute(value: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """``value`` with every reference replaced (no shell expansion), and the required names that
    are unset or empty (each replaced by "")."""
    missing: list[str] = []

    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        got = environ.get(name)
        if got:
            return got
        if default is not None:
            return default
        missing.append(name)
        return ""

    return REFERENCE.sub(repl, value), missing


def resolved_values(value: str, environ: Mapping[str, str]) -> list[str]:
    """The values that the references in ``value`` resolve to from ``environ`` (set variables
    only, defaults excluded): what must be scrubbed when ``value`` was a secret's container, e.g.
    the token of ``Bearer ${TOKEN}``, which an agent may print on its own."""
    return [environ[name] for name, _ in iter_references(value) if environ.get(name)]


def reference_values(raw: str, resolved: str) -> list[str]:
    """What each reference of ``raw`` became in ``resolved`` (``raw`` resolved by :func:`substitute`),
    found by matching the literal text around the references, for code that holds the resolved
    value but not the environment. Adjacent references (``${A}${B}``) cannot be told apart: their
    joined value is returned. Empty when ``resolved`` does not come from ``raw``."""
    parts: list[str] = []
    last = 0
    for m in REFERENCE.finditer(raw):
        parts.append(re.escape(raw[last : m.start()]))
        parts.append("(.*?)" if parts[-1] or len(parts) == 1 else "")
        last = m.end()
    if not parts:
        return []
    parts.append(re.escape(raw[last:]))
    found = re.fullmatch("".join(parts), resolved, re.DOTALL)
    return [v for v in found.groups() if v] if found else []
