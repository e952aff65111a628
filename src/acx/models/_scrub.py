"""Cut the real key out of what the gateway relays to an agent (contract M4).

An upstream may reflect the request's ``Authorization`` / ``x-api-key`` header into its answer — a
200 body, or a streamed answer whose chunks split the key anywhere. The relay passes every byte
through a :class:`RelayScrubber`: occurrences are replaced by ``***``, and a chunk whose end could
be the start of a secret is held back until the next chunk shows whether it is (a secret split
across two chunks never reaches the agent in two halves). The work per chunk is a few
``bytes.replace`` and ``bytes.find`` calls over the chunk — no re-parse of the stream.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

from acx.models._types import ModelResponse, ToolCall

__all__ = ["RelayScrubber", "scrub_response", "secret_forms"]

MASK = b"***"


def secret_forms(secrets: Iterable[str]) -> tuple[bytes, ...]:
    """The byte forms a secret takes in an answer: as is, JSON-escaped (a key with a quote, a
    backslash or a non-ASCII character) and with ``/`` escaped as some encoders write it; longest
    first, so a key that contains a shorter secret is cut whole."""
    forms: set[bytes] = set()
    for s in secrets:
        if len(s) < 4:
            continue
        raw = s.encode()
        escaped = json.dumps(s)[1:-1].encode()
        forms.update({raw, escaped, escaped.replace(b"/", b"\\/")})
    return tuple(sorted(forms, key=len, reverse=True))


class RelayScrubber:
    """Streaming replacement of secrets: :meth:`feed` each chunk, then :meth:`flush` at the end."""

    def __init__(self, forms: tuple[bytes, ...]) -> None:
        self._forms = forms
        self._held = b""
        #: How many secret occurrences were cut (the relay reports it on the attempt).
        self.cut = 0

    def scrub(self, data: bytes) -> bytes:
        """``data`` with every whole occurrence replaced (no state: a complete body)."""
        for form in self._forms:
            if form in data:
                self.cut += data.count(form)
                data = data.replace(form, MASK)
        return data

    def feed(self, chunk: bytes) -> bytes:
        """What of ``chunk`` (and what was held before it) can be passed on now."""
        if not self._forms:
            return chunk
        buf = self.scrub(self._held + chunk if self._held else chunk)
        hold = self._partial_from(buf)
        self._held = buf[hold:]
        return buf[:hold]

    def flush(self) -> bytes:
        """The held tail at the end of the answer: it never completed a secret, so it is data."""
        out, self._held = self._held, b""
        return out

    def _partial_from(self, buf: bytes) -> int:
        """The start of the longest tail of ``buf`` that is a proper prefix of a secret (else its
        length): only the last ``len(secret) - 1`` bytes can be one."""
        cut = len(buf)
        for form in self._forms:
            first = form[:1]
            i = buf.find(first, max(0, len(buf) - len(form) + 1))
            while i != -1 and i < cut:
                if form.startswith(buf[i:]):
                    cut = i
                    break
                i = buf.find(first, i + 1)
        return cut


def scrub_response(resp: ModelResponse, secrets: tuple[str, ...]) -> tuple[ModelResponse, int]:
    """``resp`` with the secrets cut from its text (content, reasoning, tool calls, raw) and how
    many were cut. A folded stream needs it: a key split across two events is whole only here."""
    texts = [resp.content or "", resp.reasoning or ""]
    texts += [t.raw_arguments + t.name for t in resp.tool_calls]
    if not secrets or not any(s in text for s in secrets for text in texts):
        return resp, 0
    cut = sum(text.count(s) for s in secrets for text in texts)

    def clean(text: str | None) -> str | None:
        if text is None:
            return None
        for s in secrets:
            text = text.replace(s, MASK.decode())
        return text

    calls = []
    for t in resp.tool_calls:
        raw_arguments = clean(t.raw_arguments) or ""
        try:
            parsed = json.loads(raw_arguments)
        except ValueError:
            parsed = None
        arguments = parsed if isinstance(parsed, dict) else None
        calls.append(ToolCall(t.id, clean(t.name) or "", arguments, raw_arguments))
    raw_text = json.dumps(resp.raw)
    for form in secret_forms(secrets):
        raw_text = raw_text.replace(form.decode(), MASK.decode())
    cleaned = dataclasses.replace(
        resp, content=clean(resp.content), reasoning=clean(resp.reasoning), tool_calls=calls, raw=json.loads(raw_text)
    )
    return cleaned, cut
