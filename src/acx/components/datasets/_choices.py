"""Multiple choice: lettered prompts and the per-attempt choice order.

With ``shuffle_choices`` each attempt sees the choices in its own order, a pure function of
(seed, task id, attempt) — the same on a resume, different across attempts — and the order is
recorded with the attempt's result so a reader can map letters back to the original choices.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from acx.components.datasets._mapping import choice_index

__all__ = ["DEFAULT_MC_TEMPLATE", "choice_order", "letters_for", "render_choices", "target_letters"]

DEFAULT_MC_TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response should be of "
    'the form "ANSWER: $LETTER" (without quotes) where LETTER is one of {letters}.\n\n{input}\n\n{choices}'
)


def choice_order(n: int, *, shuffle: bool, seed: int, task_id: str, attempt: int) -> list[int]:
    """Original choice indices in the order shown to this attempt."""
    order = list(range(n))
    if shuffle:
        # A string seed is hashed with SHA-512 by `random`: stable across processes and runs.
        random.Random(f"acx-choices:{seed}:{task_id}:{attempt}").shuffle(order)
    return order


def letters_for(n: int) -> list[str]:
    return [chr(65 + i) for i in range(n)]


def render_choices(choices: Sequence[str], order: Sequence[int]) -> str:
    return "\n".join(f"{chr(65 + pos)}) {choices[orig]}" for pos, orig in enumerate(order))


def target_letters(target: Any, choices: Sequence[str], order: Sequence[int]) -> list[str]:
    """The letters that are correct in this attempt's order."""
    items = target if isinstance(target, list) else [target]
    where = {orig: pos for pos, orig in enumerate(order)}
    out = []
    for t in items:
        idx = choice_index(t, list(choices))
        if idx is not None:
            out.append(chr(65 + where[idx]))
    return sorted(set(out))
