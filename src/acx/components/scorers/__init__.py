"""The scorer extension point: :data:`SCORERS`, the class a scorer subclasses, the built-ins.

Scorers register like benchmarks and harnesses (:mod:`acx.registry`): built-ins with
``SCORERS.register(ComponentInfo(...))`` (below), third-party ones through the ``acx.scorers``
entry-point group or a ``module:Class`` id — a :class:`BaseScorer` subclass declaring ``id``,
``description`` and ``config_class``. Built-ins: ``exact``, ``includes``, ``match``, ``regex``,
``numeric``, ``f1``, ``choice`` and ``model_graded``. A benchmark lists several scorers; each is
one metric of its contract (:func:`build_scorers`, :func:`metric_contract_for`).
"""

from __future__ import annotations

from acx.components.scorers._base import BaseScorer as BaseScorer
from acx.components.scorers._base import Score as Score
from acx.components.scorers._base import ScoreContext as ScoreContext
from acx.components.scorers._base import Scorer as Scorer
from acx.components.scorers._base import ScorerConfig as ScorerConfig
from acx.components.scorers._base import targets_of as targets_of
from acx.components.scorers._model_graded import RUBRICS as RUBRICS
from acx.components.scorers._model_graded import GraderClient as GraderClient
from acx.components.scorers._model_graded import GraderError as GraderError
from acx.components.scorers._model_graded import GraderReply as GraderReply
from acx.components.scorers._registry import SCORERS as SCORERS
from acx.components.scorers._registry import BoundScorer as BoundScorer
from acx.components.scorers._registry import build_scorers as build_scorers
from acx.components.scorers._registry import metric_contract_for as metric_contract_for

__all__ = [
    "RUBRICS",
    "SCORERS",
    "BaseScorer",
    "BoundScorer",
    "GraderClient",
    "GraderError",
    "GraderReply",
    "Score",
    "ScoreContext",
    "Scorer",
    "ScorerConfig",
    "build_scorers",
    "metric_contract_for",
    "targets_of",
]
