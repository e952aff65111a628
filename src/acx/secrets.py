"""Secret rules: the one list of what counts as a secret (reference §2.2; contract V1).

A leaf module (standard library only) shared by the compiler's redaction, the diagnostics' code
frames, the interpreter's scrubbing and anything else that prints or persists values.

* A *key* is sensitive when it is one of :data:`SENSITIVE_KEYS` or ends with one of
  :data:`SENSITIVE_SUFFIXES` (case-insensitive, ``-`` read as ``_``), unless it is one of
  :data:`NON_SENSITIVE_KEYS` (flags such as ``wrap_api_key``). Everything under a *container key*
  (:data:`CONTAINER_KEYS`: headers, credentials, env maps, ...) is sensitive.
* A *variable name* is a secret by the same key rules, or when it contains ``PASSWORD`` /
  ``PASSWD`` / ``PASSPHRASE``, or has a ``SECRET`` or ``APIKEY`` word (:func:`is_secret_name`).
* Any other string hides only the password of a URL's userinfo (:func:`mask_url_credentials`).
"""

from __future__ import annotations

import re

__all__ = [
    "CONTAINER_KEYS",
    "FRAME_KEY_ENDINGS",
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
]

#: What a hidden value prints as.
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
#: Words that make any variable name a secret wherever they sit in it (``DB_PASSWORD_2``, ``MYPASSWD``).
SECRET_NAME_PARTS = ("password", "passwd", "passphrase")
#: Whole ``_``-separated words of a variable name that make it a secret (``AWS_SECRET_ACCESS_KEY``).
SECRET_NAME_WORDS = frozenset({"secret", "apikey"})
#: Key endings a code frame masks on sight (``mytoken: …`` too: a frame errs towards hiding).
FRAME_KEY_ENDINGS = tuple(sorted({*SENSITIVE_SUFFIXES, *SENSITIVE_KEYS}, key=lambda s: (-len(s), s)))

#: ``scheme://user:PASSWORD@host``: a credential inside an ordinary value such as ``base_url``.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^@/\s]+(?=@)")


def _norm(key: object) -> str:
    return str(key).lower().replace("-", "_")


def is_sensitive_key(key: object) -> bool:
    k = _norm(key)
    if k in NON_SENSITIVE_KEYS:
        return False
    return k in SENSITIVE_KEYS or k.endswith(SENSITIVE_SUFFIXES)


def is_secret_name(name: object) -> bool:
    """True when an environment variable *name* looks like a secret, so a ``${NAME}`` reference is
    one wherever it appears (see the module docstring). ``WRAP_API_KEY`` (a flag) is not."""
    n = _norm(name)
    if n in NON_SENSITIVE_KEYS:
        return False
    if is_sensitive_key(n):
        return True
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


def mask_url_credentials(text: str) -> str:
    """``text`` with the password part of any URL userinfo replaced by :data:`REDACTED`."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text) if "@" in text else text
