"""Canonical encoding: equal values give equal bytes; a content hash over those bytes."""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import msgspec

__all__ = ["canonical_json", "content_hash", "decode", "to_builtins"]

T = TypeVar("T")

_ENCODER = msgspec.json.Encoder(order="deterministic")


def canonical_json(value: Any) -> bytes:
    """Compact JSON with dict keys sorted and struct fields in declaration order."""
    return _ENCODER.encode(value)


def content_hash(value: Any) -> str:
    """``sha256:<hex>`` of :func:`canonical_json`."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def to_builtins(value: Any) -> Any:
    """Plain dicts/lists/scalars, keys sorted, ``UNSET`` fields omitted."""
    return msgspec.to_builtins(value, order="deterministic")


def decode(data: bytes | str, type: type[T]) -> T:
    return msgspec.json.decode(data, type=type)
