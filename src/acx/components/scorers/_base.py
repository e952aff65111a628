"""The scorer contract: a :class:`Scorer` turns one attempt's answer into a :class:`Score`.

A scorer is built from its typed config (plan time, pure) and scores at evaluation time
(``async``: ``model_graded`` calls a model; the others are pure and override :meth:`Scorer.check`).
A score's ``value`` is a bool (binary scorers) or a finite float (scalar ones); ``None`` means *no
score* — the attempt is unavailable for this metric, never a 0 — and then ``issues`` say why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import msgspec

from acx.ir import ExecutionIssue, TaskSpec

__all__ = ["BaseScorer", "Score", "ScoreContext", "Scorer", "ScorerConfig", "as_text", "targets_of"]

MetricKind = Literal["binary_success", "scalar"]


class ScorerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Params every scorer accepts (besides ``id`` and ``name`` in a ``scorers`` entry)."""


@dataclass(frozen=True)
class ScoreContext:
    """What a scorer may look at besides the answer.

    ``choices``: the choice texts *as the agent saw them this attempt* (shuffled or not) and
    ``target_letters`` the correct letters in that order; both empty for non-multiple-choice
    tasks. ``model`` is the request's ModelSpec (what a grader falls back to outside a run).
    """

    task: TaskSpec
    question: str = ""
    choices: Sequence[str] = ()
    target_letters: Sequence[str] = ()
    model: Any = None


@dataclass(frozen=True)
class Score:
    value: bool | float | None
    #: What the scorer read from the answer (an extracted letter, number, match), for the record.
    extracted: Any = None
    explanation: str | None = None
    issues: list[ExecutionIssue] = field(default_factory=list)
    #: Kept with the attempt (``RunResult.extra["scores"][name]``): e.g. a judge transcript.
    record: dict[str, Any] = field(default_factory=dict)
    #: Model usage spent *by the scorer* (a judge), counted apart from the agent's.
    usage: dict[str, Any] = field(default_factory=dict)


class BaseScorer:
    """Base of scorers: a typed config, a one-line description, and ``score``/``check``."""

    id: ClassVar[str]
    description: ClassVar[str]
    config_class: ClassVar[type[ScorerConfig]] = ScorerConfig
    #: The metric kind the scorer's values have.
    kind: ClassVar[MetricKind] = "binary_success"
    #: Calls a model at evaluation time (its host must be reachable from the evaluator).
    calls_model: ClassVar[bool] = False

    def __init__(self, config: ScorerConfig) -> None:
        self.config = config

    def metric_kind(self) -> MetricKind:
        return self.kind

    def uses_run_models(self) -> bool:
        """Grades with the run's models (rather than an endpoint of its own): the run then keeps
        its model gateway up during evaluation. Default: False."""
        return False

    def metric_range(self) -> tuple[float, float] | None:
        """``(low, high)`` every value of this scorer lies in (binary: 0/1), or None when it does
        not know; the summary's 95 % intervals stay within it."""
        return (0.0, 1.0) if self.metric_kind() == "binary_success" else None

    async def score(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        return self.check(answer, targets, ctx)

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        raise NotImplementedError(f"scorer {self.id} must override check or score")


#: The name scorer implementations use in this package.
Scorer = BaseScorer


def as_text(value: Any) -> str:
    """An answer or target as text: None → "", numbers without a trailing ``.0``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


def targets_of(ground_truth: Any) -> list[str]:
    """The acceptable answers: one value or a list of them."""
    items = ground_truth if isinstance(ground_truth, list) else [ground_truth]
    return [as_text(t) for t in items if t is not None]
