"""The scorer extension point: :data:`SCORERS` and the class a scorer subclasses.

Scorers register like benchmarks and harnesses (:mod:`acx.registry`): built-ins with
``SCORERS.register(ComponentInfo(...))``, third-party ones through the ``acx.scorers``
entry-point group or a ``module:Class`` id. The scoring interface itself grows with the dataset
benchmark (issue 15); this module fixes only where scorers register and what a scorer class must
declare (``id``, ``description``, ``config_class``).
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from acx.registry import Registry

__all__ = ["SCORERS", "BaseScorer", "ScorerConfig"]


class ScorerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Params every scorer accepts (none yet)."""


class BaseScorer:
    """Base of scorers: a typed config and a one-line description, like every component."""

    id: ClassVar[str]
    description: ClassVar[str]
    config_class: ClassVar[type[ScorerConfig]] = ScorerConfig

    def __init__(self, config: ScorerConfig) -> None:
        self.config = config


SCORERS = Registry("scorer", group="acx.scorers", base="acx.components.scorers:BaseScorer")
