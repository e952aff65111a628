"""Secret redaction (reference §2.2) for every printed or persisted view.

The rules themselves live in the leaf :mod:`acx.secrets` (re-exported here); this module applies
them to plain data and IR values. A value is sensitive when its key is one of :data:`SENSITIVE_KEYS`, ends with one of
:data:`SENSITIVE_SUFFIXES`, or sits anywhere under a container key (:data:`CONTAINER_KEYS`:
headers, credentials, env maps, ...). Any other string keeps only the password of a URL's
userinfo hidden (``http://user:********@host``). Sensitive values print as ``********`` unless they are a
whole-field ``${VAR}`` reference, which is shown as written: the reference is not the secret.

A *variable* can be a secret too, wherever it is used: :func:`is_secret_name` (``OPENAI_API_KEY``,
``GITHUB_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, ...). The interpolator keeps a reference to such a
variable as a reference at any position, like a reference at a sensitive key, so its value never
reaches a printed or persisted view.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from acx.envref import whole_name
from acx.secrets import (
    CONTAINER_KEYS,
    NON_SENSITIVE_KEYS,
    REDACTED,
    SECRET_NAME_PARTS,
    SECRET_NAME_WORDS,
    SENSITIVE_KEYS,
    SENSITIVE_SUFFIXES,
    is_container_key,
    is_secret_name,
    is_sensitive_key,
    is_sensitive_path,
    mask_url_credentials,
)

__all__ = [
    "CONTAINER_KEYS",
    "NON_SENSITIVE_KEYS",
    "REDACTED",
    "SECRET_NAME_PARTS",
    "SECRET_NAME_WORDS",
    "SENSITIVE_KEYS",
    "SENSITIVE_SUFFIXES",
    "is_container_key",
    "is_secret_name",
    "is_sensitive_key",
    "is_sensitive_path",
    "mask_url_credentials",
    "redact",
    "redact_value",
]


def redact_value(value: Any) -> Any:
    """Mask one sensitive value; ``${VAR}`` references, None and "" are shown as they are."""
    if value is None or value == "":
        return value
    if whole_name(value) is not None:
        return value
    if isinstance(value, Mapping):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    return REDACTED


def redact(obj: Any) -> Any:
    """A redacted plain-data view of ``obj`` (msgspec Structs are converted to builtins first)."""
    if isinstance(obj, msgspec.Struct):
        obj = msgspec.to_builtins(obj, order="deterministic")
    return _redact(obj)


def _redact(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            if is_container_key(key) or is_sensitive_key(key):
                out[key] = redact_value(value)
            else:
                out[key] = _redact(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [_redact(v) for v in obj]
    if isinstance(obj, msgspec.Struct):
        return redact(obj)
    if isinstance(obj, str):
        return mask_url_credentials(obj)
    return obj
