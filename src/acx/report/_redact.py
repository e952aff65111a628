"""The report's own secret check: a last line of defence, not the primary scrubbing.

``result.json`` strings are scrubbed of the run's resolved secrets when they are written
(docs/results.md). The report re-checks everything it embeds: strings that look like a known
credential format (provider API keys, cloud keys, tokens, private keys, bearer headers) and the
values of the generating process's variables that :func:`acx.secrets.is_secret_name` calls secret are
replaced by ``********``; the report says how many it replaced, never what.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from acx.secrets import REDACTED, is_secret_name

__all__ = ["REDACTED", "Redactor"]

#: Known credential formats. Each is specific enough that ordinary text (ids, hashes, paths) does
#: not match: a fixed prefix plus a long random tail.
_PATTERNS = [
    r"sk-ant-[A-Za-z0-9_\-]{20,}",  # Anthropic
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",  # OpenAI and compatible
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{40,}",
    r"glpat-[A-Za-z0-9_\-]{20,}",  # GitLab
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key id
    r"AIza[0-9A-Za-z_\-]{35}",  # Google API key
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",  # JWT
    r"-----BEGIN[A-Z ]*PRIVATE KEY-----[^\"<]*?(?:-----END[A-Z ]*PRIVATE KEY-----|(?=[\"<])|$)",
]
#: The literal starts of :data:`_PATTERNS` (a pattern is tried only when one occurs).
_PREFIXES = {
    "sk-": ("sk-",),
    "gh[pousr]_": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "github_pat_": ("github_pat_",),
    "glpat-": ("glpat-",),
    "xox": ("xox",),
    "(?:AKIA|ASIA)": ("AKIA", "ASIA"),
    "AIza": ("AIza",),
    "hf_": ("hf_",),
    "eyJ": ("eyJ",),
    "-----BEGIN": ("-----BEGIN",),
}
#: Secrets known by their context rather than their shape: (literal, pattern); the pattern's
#: groups are the context, kept around the replacement.
_CONTEXT_PATTERNS = [
    ("earer ", r"([Bb]earer )[A-Za-z0-9_\-\.=]{16,}"),  # Authorization: Bearer <token>
    ("://", r"(://[^/\s:@\"<>\\]+:)[^/\s@\"<>\\]+(@)"),  # the password of user:password@ in a URL
]
#: Shorter values of secret-named variables are left alone: they would match ordinary words.
_MIN_VALUE_LEN = 8


class Redactor:
    """Replaces secrets in strings and counts the replacements (``count``).

    Patterns never match across a JSON string's quotes or an HTML tag, so :meth:`text` can run over
    a whole serialised document in one pass (that is how the report uses it). Fast on large
    documents: each pattern starts with a literal, is tried only when the literal occurs at all,
    and the token-start condition is checked on the match instead of by a look-behind (which
    would defeat the regex engine's literal search).
    """

    def __init__(self, environ: Mapping[str, str] | None = None, extra_values: list[str] | None = None) -> None:
        env = os.environ if environ is None else environ
        values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= _MIN_VALUE_LEN}
        values |= {v for v in extra_values or [] if len(v) >= _MIN_VALUE_LEN}
        # The report embeds values as JSON and as HTML text: match their escaped spellings too.
        values |= {json.dumps(v)[1:-1] for v in values} | {html.escape(v) for v in values}
        # Longest first, so a value that contains another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)
        self._token = [(_literal(p), re.compile(p)) for p in _PATTERNS]
        self._context = [(lit, re.compile(p)) for lit, p in _CONTEXT_PATTERNS]
        self.count = 0

    def text(self, s: str) -> str:
        for value in self._values:
            if value in s:
                self.count += s.count(value)
                s = s.replace(value, REDACTED)
        for literals, pattern in self._token:
            if any(lit in s for lit in literals):
                s = pattern.sub(self._at_token_start(s), s)
        for literal, pattern in self._context:
            if literal in s:
                s, n = pattern.subn(_keep_context, s)
                self.count += n
        return s

    def _at_token_start(self, s: str) -> Any:
        def replace(m: re.Match[str]) -> str:
            i = m.start()
            if i > 0 and (s[i - 1].isalnum() or s[i - 1] in "_-"):
                return m.group(0)  # inside a longer word (``task-…`` holds ``sk-…``): not a key
            self.count += 1
            return REDACTED

        return replace

    def value(self, obj: Any) -> Any:
        """A JSON-like value with every string (keys included) checked."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(str(k)): self.value(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.value(v) for v in obj]
        return obj


def _keep_context(m: re.Match[str]) -> str:
    return m.group(1) + REDACTED + (m.group(2) if m.re.groups > 1 else "")


def _literal(pattern: str) -> tuple[str, ...]:
    """The literal(s) every match of ``pattern`` starts with."""
    for prefix, alternatives in _PREFIXES.items():
        if pattern.startswith(prefix):
            return alternatives
    raise AssertionError(f"pattern without a literal start: {pattern}")  # pragma: no cover
