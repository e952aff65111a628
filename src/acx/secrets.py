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
* A *value* is secret material only when it is at least :data:`MIN_SECRET_LENGTH` characters and
  not a publicly known placeholder (:data:`PLACEHOLDER_VALUES`, case-insensitive: ``none``,
  ``EMPTY``, ``sk-no-key-required``, ...; :func:`is_secret_value`). Local OpenAI-compatible servers
  take such a word as their API key; masking it would mask that word in every file acx writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from acx.envref import has_reference_syntax, resolved_values

__all__ = [
    "CONTAINER_KEYS",
    "FRAME_KEY_ENDINGS",
    "MIN_SECRET_LENGTH",
    "NON_SENSITIVE_KEYS",
    "PLACEHOLDER_VALUES",
    "REDACTED",
    "SECRET_NAME_PARTS",
    "SECRET_NAME_WORDS",
    "SENSITIVE_KEYS",
    "SENSITIVE_SUFFIXES",
    "Scrubber",
    "holds_url_credentials",
    "is_container_key",
    "is_secret_name",
    "is_secret_value",
    "is_sensitive_key",
    "is_sensitive_path",
    "mask_url_credentials",
    "url_passwords",
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

#: Values shorter than this are not secret material and are never masked. Six characters: a value
#: of five or fewer printable characters is found by brute force in seconds (95**5 ≈ 7.7e9), so
#: masking it protects nothing, while masking it as a substring mangles ordinary text (``none``,
#: ``test``, ``root``, ``admin``); real API keys and tokens are 20 characters or more.
MIN_SECRET_LENGTH = 6
#: Publicly known placeholder API keys (compared lower-case): what local OpenAI-compatible servers
#: (vLLM ``EMPTY``, llama.cpp ``sk-no-key-required``, Ollama ``ollama``, LM Studio ``lm-studio``)
#: and their docs tell users to pass. Public words, not secrets: never masked.
PLACEHOLDER_VALUES = frozenset(
    {
        "none",
        "null",
        "nil",
        "empty",
        "dummy",
        "fake",
        "test",
        "unused",
        "placeholder",
        "changeme",
        "not-needed",
        "not_needed",
        "notneeded",
        "no-key",
        "no_key",
        "nokey",
        "no-key-required",
        "sk-no-key-required",
        "sk-dummy",
        "sk-fake",
        "sk-xxx",
        "sk-placeholder",
        "xxx",
        "ollama",
        "lm-studio",
        "lmstudio",
        "local",
        "vllm",
        "sglang",
        "token-abc123",
    }
)

#: ``scheme://user:PASSWORD@host``: a credential inside an ordinary value such as ``base_url``.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<pw>[^@/\s]+)(?=@)")


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


def is_secret_value(value: object) -> bool:
    """True when ``value`` is secret material: a string of at least :data:`MIN_SECRET_LENGTH`
    characters that is not a known placeholder (:data:`PLACEHOLDER_VALUES`)."""
    return (
        isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH and value.strip().lower() not in PLACEHOLDER_VALUES
    )


def is_container_key(key: object) -> bool:
    return _norm(key) in CONTAINER_KEYS


def is_sensitive_path(path: tuple[str | int, ...]) -> bool:
    """True when the value at ``path`` is a secret (by its key or an enclosing container)."""
    for part in path:
        if isinstance(part, str) and is_container_key(part):
            return True
    last = next((p for p in reversed(path) if isinstance(p, str)), None)
    return last is not None and is_sensitive_key(last)


def holds_url_credentials(text: str) -> bool:
    """True when ``text`` holds a URL with a password in its userinfo (``scheme://user:pw@host``)."""
    return "@" in text and _URL_PASSWORD.search(text) is not None


def url_passwords(text: str) -> list[str]:
    """The passwords of the URLs in ``text`` (``pw`` of ``http://user:pw@host``)."""
    return [m.group("pw") for m in _URL_PASSWORD.finditer(text)] if "@" in text else []


def mask_url_credentials(text: str) -> str:
    """``text`` with the password part of any URL userinfo replaced by :data:`REDACTED`."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text) if "@" in text else text


class Scrubber:
    """The one scrubber: replaces secret values, as substrings, in whatever acx writes or prints.

    Two kinds of values (each secret material, :func:`is_secret_value`: at least :attr:`MIN_LENGTH`
    characters and no known placeholder; the others cannot be told from ordinary text and are left
    alone):

    * *secrets* (:meth:`add_secret`, :meth:`add_resolved`): values resolved from ``${VAR}``
      references, model keys, every variable's value inside a reference (``TOKEN`` of
      ``Bearer ${TOKEN}``). Scrubbed from everything: result files, logs, journal, events, output.
    * *message values* (:meth:`add`): literal values written in the spec's env maps. Scrubbed only
      from messages (:meth:`__call__`) and logs, so that an answer that happens to contain one
      (``MODE=test``) is not mangled in the result files.

    Replacement runs until no value is left, longest first, so two overlapping secrets or a
    secret that a replacement would complete do not survive either.
    """

    MIN_LENGTH = MIN_SECRET_LENGTH

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._values: set[str] = set()
        self._secret_re: re.Pattern[str] | None = None
        self._value_re: re.Pattern[str] | None = None
        #: The secrets' JSON encodings (``False``: one does not encode), for :meth:`tree`'s check.
        self._escaped_re: re.Pattern[bytes] | bool | None = None

    # ---- adding ------------------------------------------------------------------------------
    def _usable(self, values: Iterable[object]) -> set[str]:
        # A value made only of the mask's characters is already indistinguishable from the mask.
        return {v for v in values if is_secret_value(v) and isinstance(v, str) and v not in REDACTED}

    def add_secret(self, values: Iterable[object]) -> None:
        """Secrets, and the password of any URL inside one (an agent may print it alone)."""
        given = [v for v in values if isinstance(v, str)]
        fresh = self._usable([*given, *(pw for v in given for pw in url_passwords(v))]) - self._secrets
        if fresh:
            self._secrets |= fresh
            self._values |= fresh
            self._secret_re = self._value_re = self._escaped_re = None

    def add(
        self,
        values: Mapping[str, str] | Iterable[str],
        *,
        raw: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Scrub ``values`` from messages; those whose ``raw`` (unresolved) value holds a reference
        are secrets (:meth:`add_resolved`)."""
        items = list(values.values() if isinstance(values, Mapping) else values)
        fresh = self._usable(items) - self._values
        if fresh:
            self._values |= fresh
            self._value_re = None
        if raw is not None and isinstance(values, Mapping):
            self.add_resolved(raw, values, environ or {})

    def add_resolved(self, raw: Mapping[str, str], resolved: Mapping[str, str], environ: Mapping[str, str]) -> None:
        """Secrets of an env map: each value that held a reference, whole, and what every reference
        in it resolved to (the agent may print the token without its ``Bearer``)."""
        found: list[str] = []
        for key, value in raw.items():
            text = str(value)
            if has_reference_syntax(text):
                found += resolved_values(text, environ)
                if key in resolved:
                    found.append(resolved[key])
        self.add_secret(found)

    # ---- scrubbing ---------------------------------------------------------------------------
    def __bool__(self) -> bool:
        return bool(self._secrets)

    @staticmethod
    def _pattern(values: set[str]) -> re.Pattern[str]:
        return re.compile("|".join(re.escape(v) for v in sorted(values, key=lambda v: (-len(v), v))))

    @staticmethod
    def _apply(pattern: re.Pattern[str] | None, text: str) -> str:
        if pattern is None:
            return text
        while True:  # ends: every replacement removes at least one character that is not a `*`
            text, count = pattern.subn(REDACTED, text)
            if not count:  # one search for the common case, a string without a secret
                return text

    def text(self, text: str) -> str:
        """``text`` without any secret."""
        if not self._secrets:
            return text
        if self._secret_re is None:
            self._secret_re = self._pattern(self._secrets)
        return self._apply(self._secret_re, text)

    def __call__(self, text: str) -> str:
        """A message without any secret or literal env value."""
        if not self._values:
            return text
        if self._value_re is None:
            self._value_re = self._pattern(self._values)
        return self._apply(self._value_re, text)

    def tree(self, obj: Any) -> Any:
        """``obj`` (JSON-like data) with every secret replaced in every string, keys included."""
        if not self._secrets:
            return obj
        if not self._may_hold_secret(obj):
            return obj
        return self._tree(obj)

    def _may_hold_secret(self, obj: Any) -> bool:
        """False only when no string of ``obj`` holds a secret: one search over its JSON encoding
        (msgspec, C speed) instead of a regex per string (a run's transcripts hold the growing
        conversation once per call). JSON escapes and UTF-8 encodes each character on its own, so
        a string holding a secret holds the secret's encoding in the bytes. Data that does not
        encode (not plain JSON, lone surrogates) is walked."""
        import msgspec

        try:
            data = msgspec.json.encode(obj)
        except (TypeError, ValueError, OverflowError, RecursionError):
            return True
        return self.in_json(data)

    def in_json(self, data: bytes) -> bool:
        """False only when the JSON text ``data`` holds no secret in any of its strings (keys
        included): one search for the secrets' JSON encodings. Lets a writer that has encoded a
        tree anyway check it without encoding it a second time (:meth:`tree` then scrubs it)."""
        if not self._secrets:
            return False
        if self._escaped_re is None:
            import msgspec

            try:
                escaped = {msgspec.json.encode(v)[1:-1] for v in self._secrets}
            except (TypeError, ValueError):
                self._escaped_re = False  # a secret that does not encode: always walk
            else:
                alternatives = sorted(escaped, key=lambda v: (-len(v), v))
                self._escaped_re = re.compile(b"|".join(re.escape(v) for v in alternatives))
        if not isinstance(self._escaped_re, re.Pattern):
            return True
        return self._escaped_re.search(data) is not None

    def _tree(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {(self.text(k) if isinstance(k, str) else k): self._tree(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self._tree(v) for v in obj]
        return obj
