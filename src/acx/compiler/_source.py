"""SourceDoc: what every front end (YAML/JSON, .acx) hands to the resolver.

One resolver, two front ends: a YAML orchestration file and its ``.acx`` twin lower to
SourceDocs with equal ``data``; only the spans differ. ``data`` is plain JSON-like data (dict,
list, str, int, float, bool, None). ``locs`` maps a value's path to its span; ``key_locs`` maps a
mapping key's path to the span of the key itself (used for "unknown key" diagnostics). Paths are
tuples of str (mapping keys) and int (list indices); ``()`` is the root.

Environment references: a string value that is exactly ``${VAR}`` is an env reference. The
resolver substitutes it (R6) except under env-variable maps and in secret positions, where it
stays a reference resolved at use time (V1). ``secret_paths`` marks positions a front end knows
are secrets (``secret("X")`` in .acx) even if the key name is not a sensitive one.
``literal_paths`` marks strings whose ``${`` is literal text (``$${`` in .acx): they are never
substituted from the environment and never rejected as embedded references.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from acx.diagnostics import Span

__all__ = ["DocKind", "Path_", "SourceDoc"]

DocKind = Literal["orchestration", "run_config"]
Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class SourceDoc:
    path: str
    kind: DocKind
    data: Any
    locs: Mapping[Path_, Span] = field(default_factory=dict)
    key_locs: Mapping[Path_, Span] = field(default_factory=dict)
    secret_paths: frozenset[Path_] = frozenset()
    literal_paths: frozenset[Path_] = frozenset()
    #: Source text, for code frames in diagnostics.
    text: str | None = None

    def span_of(self, path: Path_) -> Span | None:
        """Span of the value at ``path`` or, failing that, of its nearest ancestor."""
        p = tuple(path)
        while True:
            if p in self.locs:
                return self.locs[p]
            if not p:
                return Span(self.path, 1, 1)
            p = p[:-1]

    def key_span_of(self, path: Path_) -> Span | None:
        return self.key_locs.get(tuple(path)) or self.span_of(path)
