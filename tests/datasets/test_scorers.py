"""Scorer registry and built-in scorers (exact, includes, match, regex, numeric, f1, choice)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from acx.components.benchmarks._exact_match_runtime import normalize_answer
from acx.components.scorers import SCORERS, ScoreContext, Scorer, ScorerConfig, build_scorers, metric_contract_for
from acx.components.scorers._choice import extract_letters
from acx.components.scorers._text import normalize_text, token_f1
from acx.errors import AcxPlanError
from acx.ir import TaskSpec

CTX = ScoreContext(task=TaskSpec(task_id="t"), question="q")


def score(entry: Any, answer: Any, targets: list[str], ctx: ScoreContext = CTX) -> Any:
    (bound,) = build_scorers([entry])
    return trio.run(bound.scorer.score, answer, targets, ctx)


@pytest.mark.parametrize(
    ("entry", "answer", "targets", "expected"),
    [
        ("exact", "  Paris ", ["paris"], True),
        ("exact", "Paris.", ["paris"], False),
        ({"id": "exact", "strip_punctuation": True}, "Paris.", ["paris"], True),
        ({"id": "exact", "case_sensitive": True}, "paris", ["Paris"], False),
        ({"id": "exact", "numeric": True}, "1,000", ["1000.0"], True),
        ("includes", "I think it is Paris, France", ["paris"], True),
        ("includes", "Lyon", ["paris"], False),
        ("match", "The answer is 42", ["42"], True),
        ("match", "42 is not the answer, 41 is", ["42"], False),
        ({"id": "match", "location": "start"}, "42 is it", ["42.0"], True),
        ({"id": "match", "location": "any"}, "between 3 and 1,000", ["1000"], True),
        ({"id": "match", "location": "exact"}, "paris", ["Paris"], True),
        ({"id": "match", "location": "end"}, "it is Paris.", ["paris"], True),
        ({"id": "match", "numeric": False, "location": "end"}, "x = 3.0", ["3"], False),
        ({"id": "regex", "pattern": r"final:\s*(\w+)"}, "draft: x\nfinal: Paris", ["paris"], True),
        ({"id": "regex", "pattern": r"final:\s*(\w+)"}, "no marker", ["paris"], False),
        ({"id": "numeric", "tolerance": 0.01}, "about 3.141", ["3.14"], True),
        ({"id": "numeric", "tolerance": 0.0001}, "about 3.141", ["3.14"], False),
        ({"id": "numeric", "relative_tolerance": 0.1}, "105", ["100"], True),
        ({"id": "numeric", "extract": "first"}, "7 then 8", ["7"], True),
        ({"id": "numeric", "extract": "whole"}, "7 then 8", ["7"], False),
    ],
)
def test_text_scorers(entry: Any, answer: str, targets: list[str], expected: bool) -> None:
    assert score(entry, answer, targets).value is expected


def test_numeric_with_a_non_numeric_target_is_an_error_not_a_zero() -> None:
    # contract S2: no score, an evaluation error
    s = score("numeric", "3", ["three"])
    assert s.value is None and s.issues[0].code == "scorer_target_invalid"


def test_f1() -> None:
    assert score("f1", "the Eiffel Tower", ["Eiffel Tower"]).value == 1.0
    assert token_f1("Eiffel Tower Paris", "Eiffel Tower") == pytest.approx(0.8)
    assert score("f1", "nothing", ["Eiffel Tower", "tower"]).value == 0.0


@given(st.text(max_size=40), st.booleans(), st.booleans(), st.booleans())
def test_exact_normalisation_is_exact_matchs(text: str, cs: bool, ws: bool, punct: bool) -> None:
    """`exact` keeps `exact_match`'s normalisation, so the two benchmarks agree."""
    opts = {"case_sensitive": cs, "normalize_whitespace": ws, "strip_punctuation": punct}
    assert normalize_text(text, **opts) == normalize_answer(text, **opts)


@pytest.mark.parametrize(
    ("answer", "n", "letters"),
    [
        ("Reasoning...\nANSWER: C", 4, ["C"]),
        ("ANSWER: A\nwait, ANSWER: (b)", 4, ["B"]),
        ("ANSWER: A, C", 4, ["A", "C"]),
        ("(D)", 4, ["D"]),
        ("B.", 4, ["B"]),
        ("I believe the answer is (B) because", 4, ["B"]),
        ("ANSWER: E", 4, None),
        ("no idea", 4, None),
    ],
)
def test_choice_letter_extraction(answer: str, n: int, letters: list[str] | None) -> None:
    assert extract_letters(answer, n) == letters


def test_choice_scorer_uses_the_attempts_letters() -> None:
    ctx = ScoreContext(task=TaskSpec(task_id="t"), choices=["x", "y", "z"], target_letters=["C"])
    assert score("choice", "ANSWER: C", [], ctx).value is True
    assert score("choice", "ANSWER: A", [], ctx).value is False
    assert score("choice", "???", [], ctx).value is False
    assert score("choice", "A", [], CTX).issues[0].code == "scorer_target_invalid"


def test_registry_lists_builtins_and_contract_declares_each_scorer() -> None:
    assert {"exact", "includes", "match", "regex", "numeric", "f1", "choice", "model_graded"} <= set(SCORERS)
    bound = build_scorers(["exact", {"id": "f1", "reducers": ["max"]}, {"id": "includes", "name": "contains"}])
    assert [b.metric for b in bound] == ["correct", "f1", "contains"]
    contract = metric_contract_for(bound)
    assert contract.primary_id() == "correct"
    assert contract.metrics["f1"].kind == "scalar" and contract.metrics["f1"].reducers == ["avg", "max"]
    assert contract.metrics["contains"].kind == "binary_success"
    scalar_first = metric_contract_for(build_scorers(["f1", "exact"]))
    assert scalar_first.primary_id() == "score" and "exact" in scalar_first.metrics


class UpperScorer(Scorer):
    """Plugin-style scorer used as a module:Class id."""

    id = "upper"
    description = "answer is upper-case"
    config_class = ScorerConfig

    def check(self, answer: Any, targets: Any, ctx: ScoreContext) -> Any:
        from acx.components.scorers import Score

        return Score(str(answer).isupper())


def test_module_class_ids_load_plugins() -> None:
    (bound,) = build_scorers([f"{__name__}:UpperScorer"])
    assert bound.metric == "correct"
    assert trio.run(bound.scorer.score, "ABC", [], CTX).value is True


@pytest.mark.parametrize(
    ("entries", "path", "needle"),
    [
        (["exakt"], "benchmark.params.scorers[0].id", "did you mean `exact`"),
        ([{"id": "numeric", "tolerance": -1}], "benchmark.params.scorers[0]", "tolerance"),
        ([{"id": "regex", "pattern": "("}], "benchmark.params.scorers[0]", "missing )"),
        (["exact", {"id": "f1", "name": "correct"}], "benchmark.params.scorers[1].name", "reserved"),
        (["exact", "f1", "f1"], "benchmark.params.scorers[2].name", "two scorers"),
        ([{"id": "exact", "reducers": ["best"]}], "benchmark.params.scorers[0].reducers", "unknown reducer"),
        ([{"id": "exact", "typo": 1}], "benchmark.params.scorers[0]", "typo"),
        ([], "benchmark.params.scorers", "empty"),
        ([f"{__name__}:TaskSpec"], "benchmark.params.scorers[0].id", "not a scorer class"),
        (["nosuchmod.x:Y"], "benchmark.params.scorers[0].id", "cannot import module"),
    ],
)
def test_scorer_config_errors_are_located(entries: list[Any], path: str, needle: str) -> None:
    with pytest.raises(AcxPlanError) as exc:
        build_scorers(entries)
    d = exc.value.diagnostics[0]
    assert d.code == "E0406" and d.path == path and needle in (d.message + (d.help or ""))


def test_cli_lists_scorers_and_documents_their_params(capsys: pytest.CaptureFixture[str]) -> None:
    from acx.cli import main

    assert main(["list", "scorer"]) == 0
    out = capsys.readouterr().out
    assert "model_graded" in out and "numeric" in out
    assert main(["config", "docs", "scorer", "numeric"]) == 0
    assert "relative_tolerance" in capsys.readouterr().out
