"""``choice``: multiple choice scored by the letter(s) the answer names.

The letters are those the agent saw this attempt (choices may be shuffled per attempt, see
``acx.components.datasets``); the correct letters come in the :class:`ScoreContext`.
Extraction, first rule that finds letters wins:

1. the last ``ANSWER: X`` (or ``ANSWER: X, Y`` for several) line — what the prompt asks for;
2. an answer that is only a letter: ``B``, ``(B)``, ``B.``, ``B)``;
3. the last ``answer is (B)`` / ``answer is B``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

from acx.components.scorers._base import Score, ScoreContext, Scorer, ScorerConfig, as_text
from acx.ir import ExecutionIssue

__all__ = ["ChoiceScorer", "extract_letters"]

_ANSWER_LINE = re.compile(r"ANSWER\s*[:：]\s*\(?\s*([A-Z](?:\s*(?:,|and)\s*\(?[A-Z]\)?)*)\s*\)?", re.IGNORECASE)
_BARE = re.compile(r"^\s*\(?([A-Z])\s*[).:]?\s*$", re.IGNORECASE)
_ANSWER_IS = re.compile(r"answer\s+is\s*[:]?\s*\(?\s*([A-Z])\b\)?", re.IGNORECASE)


def extract_letters(answer: str, n_choices: int) -> list[str] | None:
    """The letters the answer names (sorted, upper-case) among the first ``n_choices``, or None."""
    valid = {chr(ord("A") + i) for i in range(n_choices)}
    found: list[str] | None = None
    lines = list(_ANSWER_LINE.finditer(answer))
    if lines:
        found = re.findall(r"[A-Z]", lines[-1].group(1).upper().replace("AND", ","))
    elif (m := _BARE.match(answer)) is not None:
        found = [m.group(1).upper()]
    elif said := list(_ANSWER_IS.finditer(answer)):
        found = [said[-1].group(1).upper()]
    if not found:
        return None
    letters = sorted(set(found))
    return letters if all(letter in valid for letter in letters) else None


class ChoiceConfig(ScorerConfig, frozen=True, kw_only=True):
    pass


class ChoiceScorer(Scorer):
    id: ClassVar[str] = "choice"
    description: ClassVar[str] = "Multiple choice: the letter(s) in the answer equal the correct letter(s)."
    config_class = ChoiceConfig

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        if not ctx.choices:
            return Score(
                None,
                issues=[
                    ExecutionIssue(
                        severity="error",
                        phase="evaluate",
                        code="scorer_target_invalid",
                        message="scorer choice: the task has no choices (map a `choices` field)",
                    )
                ],
            )
        letters = extract_letters(as_text(answer), len(ctx.choices))
        if letters is None:
            return Score(False, explanation="no valid choice letter in the answer")
        return Score(letters == sorted(ctx.target_letters), extracted=",".join(letters))
