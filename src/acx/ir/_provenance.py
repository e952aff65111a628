"""Provenance: for every resolved field, the chain of contributions that produced it, winner last."""

from __future__ import annotations

from typing import Any, Literal

from acx.ir._common import IRStruct

__all__ = ["Contribution", "Provenance", "SourceKind"]

#: Where a contribution came from.
SourceKind = Literal["default", "file", "cli", "env", "recipe", "task", "benchmark", "harness", "planner"]


class Contribution(IRStruct, frozen=True):
    """One layer's say on a field: ``layer`` (e.g. ``user config``, ``project config``,
    ``--config``, ``orchestration defaults``, ``request``, ``--execution-params``, ``default``,
    ``recipe:<id>``), ``kind`` and ``source`` (``file:line:col``, a flag, ``env:VAR``), and the
    value it contributed (redacted when sensitive)."""

    layer: str
    kind: SourceKind
    source: str
    value: Any = None


#: field path (``execution.run_timeout_seconds``) → contributions, lowest precedence first.
Provenance = dict[str, list[Contribution]]
