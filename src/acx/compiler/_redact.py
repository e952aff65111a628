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

from acx.envref import ENV_MAP_KEYS, has_reference_syntax, whole_name
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
    url_passwords,
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
    "literal_secret_paths",
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


def literal_secret_paths(data: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths of the literal secrets in ``data`` (plain data of a request): what a saved plan may
    not hold, since a plan keeps references and never values (V1). A literal secret is

    * in an env-variable map: the value of a variable whose *name* is a secret
      (``OPENAI_API_KEY: sk-…``) and holds no reference;
    * elsewhere: a non-empty string at a sensitive position (``api_key``, ``*_token``, headers, …)
      that holds no reference;
    * anywhere: a URL whose password is written out (``postgres://u:pw@db``), not a ``${VAR}``.
    """
    out: list[tuple[str | int, ...]] = []
    _literal_secrets(data, prefix, out)
    return out


def _literal_secrets(value: Any, path: tuple[str | int, ...], out: list[tuple[str | int, ...]]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _literal_secrets(v, (*path, k), out)
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _literal_secrets(v, (*path, i), out)
        return
    if not isinstance(value, str) or not value:
        return
    if any(not has_reference_syntax(pw) for pw in url_passwords(value)):
        out.append(path)
        return
    if has_reference_syntax(value):
        return
    in_env_map = len(path) >= 2 and path[-2] in ENV_MAP_KEYS
    if is_secret_name(path[-1]) if in_env_map else path and is_sensitive_path(path):
        out.append(path)
