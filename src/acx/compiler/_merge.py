"""``deep_merge`` (contract R5): recursive mapping merge that never mutates its inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["deep_copy", "deep_merge"]


def deep_copy(value: Any) -> Any:
    """Copy of JSON-like data (mappings become dicts, lists are copied); scalars are shared."""
    if isinstance(value, Mapping):
        return {k: deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) for v in value]
    return value


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` over ``base`` (R5).

    Mappings merge key by key, recursively; any other value in ``override`` (scalar, list,
    null) replaces the value in ``base``. Neither input is mutated and the result shares no
    mutable container with them.
    """
    out = {k: deep_copy(v) for k, v in base.items()}
    for key, value in override.items():
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = deep_merge(current, value)
        else:
            out[key] = deep_copy(value)
    return out
