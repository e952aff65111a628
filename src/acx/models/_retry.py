"""The one retry layer's rules (pure): which failures retry, how long to wait.

- 408, 409, 429 and 5xx retry; every other 4xx (400, 401, 403, 404, 422, ...) never does;
- a prompt that does not fit (``context_length_exceeded`` and the vLLM/OpenAI phrasings) never
  retries, whatever the status;
- connection errors, read timeouts and malformed 200 bodies retry;
- cancellation never retries (it is not an exception this layer catches);
- ``Retry-After`` (seconds or an HTTP date; ``retry-after-ms`` first) is honoured up to
  ``max_retry_after``; otherwise exponential backoff from ``base_delay`` capped at ``max_delay``,
  minus up to 25 % jitter (the OpenAI SDK's rule);
- no wait ever runs past the call's deadline: such a retry is given up instead.
"""

from __future__ import annotations

import email.utils
import random
from collections.abc import Mapping
from dataclasses import dataclass

from acx.models._types import ErrorKind

__all__ = ["RetryPolicy", "classify_status", "parse_retry_after"]

_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "context length exceeded",
    "maximum context length",
    "model's context length",
    "prompt is too long",
    "context window",
)


def classify_status(status: int, body: bytes = b"") -> ErrorKind:
    """The error kind of a non-2xx status (and its body, for context-length errors)."""
    text = body[:4096].decode("utf-8", "replace").lower()
    if status in (400, 413, 422) and any(p in text for p in _CONTEXT_PHRASES):
        return "context_length"
    if status == 429:
        return "rate_limited"
    if status in (408, 409) or status >= 500:
        return "server_error"
    if status in (401, 403):
        return "auth"
    return "bad_request"


def parse_retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date)."""
    lower = {k.lower(): v for k, v in headers.items()}
    ms = lower.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, float(when.timestamp()) - now)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 120.0
    #: Fraction of the delay that jitter may remove (0.25 = the delay is 75-100 % of nominal).
    jitter: float = 0.25

    def retryable(self, kind: ErrorKind) -> bool:
        return kind in ("rate_limited", "server_error", "connection", "timeout", "malformed_response")

    def delay(self, retry_index: int, retry_after: float | None, rng: random.Random) -> float | None:
        """Seconds before retry number ``retry_index`` (0-based); ``None`` = do not retry (a
        server asking for longer than ``max_retry_after``)."""
        if retry_after is not None:
            return None if retry_after > self.max_retry_after else retry_after
        nominal = float(min(self.max_delay, self.base_delay * (2.0**retry_index)))
        return nominal * (1.0 - self.jitter * rng.random())
