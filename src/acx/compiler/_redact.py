"""Secret redaction (reference §2.2) for every printed or persisted view.

A value is sensitive when its key is one of :data:`SENSITIVE_KEYS`, ends with one of
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

import re
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = [
    "CONTAINER_KEYS",
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

REDACTED = "********"

SENSITIVE_KEYS = frozenset(
    {
        "aksk",
        "token_id",
        "authorization",
        "cookie",
        "jwt",
        "password",
        "proxy_authorization",
        "set_cookie",
        "token",
    }
)
SENSITIVE_SUFFIXES = ("_key", "_secret", "_token", "_jwt", "_password")
CONTAINER_KEYS = frozenset(
    {
        "auth",
        "authentication",
        "credentials",
        "headers",
        "env",
        "env_variables",
        "run_env_variables",
        "evaluation_env_variables",
        "evaluation_environment_env_variables",
    }
)
#: Matches a sensitive suffix but is a flag, not a secret.
NON_SENSITIVE_KEYS = frozenset({"wrap_api_key"})

_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
#: ``scheme://user:PASSWORD@host``: a credential inside an ordinary value such as ``base_url``.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^@/\s]+(?=@)")


def mask_url_credentials(text: str) -> str:
    """``text`` with the password part of any URL userinfo replaced by ``********``."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text) if "@" in text else text


def _norm(key: object) -> str:
    return str(key).lower().replace("-", "_")


def is_sensitive_key(key: object) -> bool:
    k = _norm(key)
    if k in NON_SENSITIVE_KEYS:
        return False
    return k in SENSITIVE_KEYS or k.endswith(SENSITIVE_SUFFIXES)


#: Words that make any variable name a secret wherever they sit in it (``DB_PASSWORD_2``, ``MYPASSWD``).
SECRET_NAME_PARTS = ("password", "passwd", "passphrase")
#: Whole ``_``-separated words of a variable name that make it a secret (``AWS_SECRET_ACCESS_KEY``).
SECRET_NAME_WORDS = frozenset({"secret", "apikey"})


def is_secret_name(name: object) -> bool:
    """True when an environment variable *name* looks like a secret, so a ``${NAME}`` reference is
    one wherever it appears: the key rules applied to the name, case-insensitively (``TOKEN``,
    ``PASSWORD``, ``*_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_JWT``, ``*_PASSWORD``, ...), plus names
    containing ``PASSWORD``/``PASSWD``/``PASSPHRASE`` and names with a ``SECRET`` or ``APIKEY`` word.
    ``WRAP_API_KEY`` (a flag) is not a secret, as for keys."""
    n = _norm(name)
    if is_sensitive_key(n):
        return True
    if n in NON_SENSITIVE_KEYS:
        return False
    return any(part in n for part in SECRET_NAME_PARTS) or not SECRET_NAME_WORDS.isdisjoint(n.split("_"))


def is_container_key(key: object) -> bool:
    return _norm(key) in CONTAINER_KEYS


def is_sensitive_path(path: tuple[str | int, ...]) -> bool:
    """True when the value at ``path`` is a secret (by its key or an enclosing container)."""
    for part in path:
        if isinstance(part, str) and is_container_key(part):
            return True
    last = next((p for p in reversed(path) if isinstance(p, str)), None)
    return last is not None and is_sensitive_key(last)


def redact_value(value: Any) -> Any:
    """Mask one sensitive value; ``${VAR}`` references, None and "" are shown as they are."""
    if value is None or value == "":
        return value
    if isinstance(value, str) and _REF.match(value):
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
