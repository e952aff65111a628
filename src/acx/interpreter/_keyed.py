"""A keyed hash for cache keys that fold in values which may be secrets.

The install cache's key covers the values of the variables the install sees, and those may be
secrets (a token the install needs). The key lands in ``result.json`` and in a Docker image tag:
a plain SHA-256 of known parts plus a secret would let anyone holding the results test guesses of
a weak secret offline. Keyed with a random salt that never leaves this machine's user cache
directory (created once, mode 0600), the key stays stable across runs here and says nothing
elsewhere. Without a writable cache directory the salt lives for this process only: installs
are then cached within the run, not across runs.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets

__all__ = ["keyed_digest", "salt_path"]

_SALT_BYTES = 32


def salt_path() -> str | None:
    """``$XDG_CACHE_HOME/acx/install-cache.salt`` (``~/.cache`` by default); None when the
    directory cannot be created."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "acx")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return os.path.join(directory, "install-cache.salt")


@functools.lru_cache(maxsize=1)
def _salt() -> bytes:
    path = salt_path()
    if path is None:
        return secrets.token_bytes(_SALT_BYTES)
    existing = _read(path)
    if existing is not None:
        return existing
    fresh = secrets.token_bytes(_SALT_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another acx process created it first: use theirs
        return _read(path) or fresh
    except OSError:
        return fresh
    with os.fdopen(fd, "wb") as fh:
        fh.write(fresh)
    return fresh


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_SALT_BYTES + 1)
    except OSError:
        return None
    return data if len(data) == _SALT_BYTES else None


def keyed_digest(data: bytes) -> str:
    """HMAC-SHA256 of ``data`` under this machine's salt, hex."""
    return hmac.new(_salt(), data, hashlib.sha256).hexdigest()
