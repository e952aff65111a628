"""The scorer registry and the binding of a benchmark's ``scorers`` list to metrics.

``SCORERS`` maps an id to its implementation: built-ins first, then installed plugins (entry
points in the ``acx.scorers`` group: name = id, value = a :class:`Scorer` subclass), then
``module:Class`` ids written in a spec. A plugin that fails to load is reported by id with the
reason, never a traceback.

A ``scorers`` entry is an id (``"exact"``) or a mapping ``{id, name?, reducers?, ...params}``.
The first scorer is the primary metric: ``correct`` when binary, ``score`` when scalar. The
others are named by ``name`` (default: their id). Every one is declared in the metric contract
(:func:`metric_contract_for`), with any extra attempt ``reducers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from acx.components.scorers._base import Scorer
from acx.errors import AcxPlanError
from acx.ir import MetricContract, MetricDisplay, MetricSpec
from acx.registry import ComponentInfo, ComponentLookupError, Registry
from acx.stats import validate_reducer

__all__ = ["SCORERS", "BoundScorer", "build_scorers", "metric_contract_for"]

SCORERS = Registry("scorer", group="acx.scorers", base="acx.components.scorers:BaseScorer")

_BUILTINS = (
    ("exact", "_text:ExactScorer", "_text:ExactConfig"),
    ("includes", "_text:IncludesScorer", "_text:IncludesConfig"),
    ("match", "_text:MatchScorer", "_text:MatchConfig"),
    ("regex", "_text:RegexScorer", "_text:RegexConfig"),
    ("numeric", "_text:NumericScorer", "_text:NumericConfig"),
    ("f1", "_text:F1Scorer", "_text:F1Config"),
    ("gaia", "_text:GaiaScorer", "_text:GaiaConfig"),
    ("choice", "_choice:ChoiceScorer", "_choice:ChoiceConfig"),
    ("model_graded", "_model_graded:ModelGradedScorer", "_model_graded:ModelGradedConfig"),
)
_DESCRIPTIONS = {
    "exact": "The answer equals a target after normalisation (case, whitespace, punctuation).",
    "includes": "A target appears somewhere in the answer (after normalisation).",
    "match": "The target is at the start, the end, anywhere in or all of the answer; numeric-aware.",
    "regex": "Extract with a regular expression, then compare the extraction with the target.",
    "numeric": "The answer's number is within a tolerance of the numeric target.",
    "f1": "Token-level F1 between answer and target (SQuAD normalisation), best over targets.",
    "gaia": "GAIA's scorer: numbers by value, lists element-wise, text without spaces, case or punctuation.",
    "choice": "Multiple choice: the letter(s) in the answer equal the correct letter(s).",
    "model_graded": "A grader model grades the answer against the target with a rubric.",
}
for _sid, _impl, _config in _BUILTINS:
    SCORERS.register(
        ComponentInfo(
            "scorer",
            _sid,
            _DESCRIPTIONS[_sid],
            f"acx.components.scorers.{_config}",
            f"acx.components.scorers.{_impl}",
        )
    )


@dataclass(frozen=True)
class BoundScorer:
    """A configured scorer in a benchmark: its metric id and extra attempt reducers."""

    metric: str
    scorer: Scorer
    reducers: tuple[str, ...] = ()
    label: str = ""


_RESERVED = ("id", "name", "reducers")


def _entry_error(where: str, message: str, help: str) -> AcxPlanError:
    return AcxPlanError(message, code="E0406", path=where, help=help)


def _one(entry: Any, where: str, index: int) -> tuple[str | None, Scorer, tuple[str, ...], str]:
    if isinstance(entry, str):
        entry = {"id": entry}
    if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
        raise _entry_error(
            where,
            f"`{where}` must be a scorer id or a mapping with an `id`",
            "e.g. scorers: [exact, {id: numeric, tolerance: 0.01}]",
        )
    sid = entry["id"]
    try:
        info = SCORERS[sid]
        cls = info.load()
        config_class = info.config_class
    except ComponentLookupError as exc:
        from acx.diagnostics import did_you_mean

        guess = did_you_mean(sid, list(SCORERS))
        raise _entry_error(
            f"{where}.id",
            exc.reason,
            (f"did you mean `{guess}`? " if guess else "") + f"known scorers: {', '.join(SCORERS)}",
        ) from None
    name = entry.get("name")
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise _entry_error(
            f"{where}.name", f"`{where}.name` must be an identifier (letters, digits, _)", "e.g. name: judge"
        )
    reducers = entry.get("reducers", [])
    if not isinstance(reducers, list) or not all(isinstance(r, str) for r in reducers):
        raise _entry_error(
            f"{where}.reducers",
            f"`{where}.reducers` must be a list of reducer names",
            "e.g. reducers: [median, at_least_2]",
        )
    for r in reducers:
        reason = validate_reducer(r)
        if reason:
            raise _entry_error(f"{where}.reducers", reason, "fix the reducer name")
    params = {k: v for k, v in entry.items() if k not in _RESERVED}
    try:
        config = msgspec.convert(params, config_class)
    except msgspec.ValidationError as exc:
        raise _entry_error(
            where, f"scorer `{sid}` ({where}): {exc}", f"acx config docs lists the params; see docs/scorers.md#{sid}"
        ) from None
    try:
        scorer = cls(config)
    except (ValueError, TypeError, __import__("re").error) as exc:
        raise _entry_error(where, f"scorer `{sid}` ({where}): {exc}", f"see docs/scorers.md#{sid}") from None
    return name, scorer, tuple(reducers), sid


def build_scorers(entries: Sequence[Any], *, where: str = "benchmark.params.scorers") -> list[BoundScorer]:
    """Validate and build a ``scorers`` list (plan time; errors name the entry's path)."""
    if not entries:
        raise _entry_error(where, f"`{where}` is empty", "list at least one scorer, e.g. scorers: [exact]")
    bound: list[BoundScorer] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]"
        name, scorer, reducers, sid = _one(entry, at, i)
        if i == 0:
            metric = "correct" if scorer.metric_kind() == "binary_success" else "score"
        else:
            metric = name or sid.rpartition(":")[2].lower()
            if metric in ("correct", "score"):
                raise _entry_error(
                    f"{at}.name",
                    f"metric name `{metric}` is reserved for the first (primary) scorer",
                    "give it another `name`",
                )
        if metric in seen:
            raise _entry_error(
                f"{at}.name",
                f"two scorers report metric `{metric}` (entries {seen[metric]} and {i})",
                "give one a distinct `name`",
            )
        seen[metric] = i
        bound.append(BoundScorer(metric=metric, scorer=scorer, reducers=reducers, label=name or sid))
    return bound


def metric_contract_for(bound: Sequence[BoundScorer]) -> MetricContract:
    """Every scorer's metric declared, the first one primary."""
    metrics: dict[str, MetricSpec] = {}
    for i, b in enumerate(bound):
        kind = b.scorer.metric_kind()
        base = ["avg", "pass"] if kind == "binary_success" else ["avg"]
        reducers = base + [r for r in b.reducers if r not in base]
        role: Literal["success", "score", "component"] = "component"
        if i == 0:
            role = "success" if kind == "binary_success" else "score"
        metrics[b.metric] = MetricSpec(
            kind=kind,
            reducers=reducers,
            primary=i == 0,
            role=role,
            display=MetricDisplay(label=b.label),
            range=b.scorer.metric_range(),
        )
    return MetricContract(metrics=metrics)
