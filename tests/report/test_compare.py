"""`acx results compare` against a hand computation on fixed result sets (issue 16)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acx.cli import main
from acx.report import RunData, compare_runs, load_run, paired_difference
from acx.testing.results import write_run


def _task(task_id: str, *observations: dict[str, object], category: str = "c") -> dict[str, object]:
    return {
        "task_id": task_id,
        "category": category,
        "state": "normal",
        "attempts": [{"status": "completed", "metrics": dict(m), "final_answer": "x"} for m in observations],
    }


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path]:
    # Run A: t1 pass, t2 fail, t3 pass, t4 fail, t5 only in A; t6 has no observation (unavailable).
    # Run B: t1 pass, t2 pass, t3 fail, t4 pass, t7 only in B; t6 observed in B only.
    # `score` (scalar, k=2 in A for t1: mean of 0.5 and 1.0 = 0.75).
    a = write_run(
        tmp_path / "a",
        [
            _task("t1", {"correct": True, "score": 0.5}, {"correct": True, "score": 1.0}),
            _task("t2", {"correct": False, "score": 0.0}),
            _task("t3", {"correct": True, "score": 1.0}),
            _task("t4", {"correct": False, "score": 0.25}),
            _task("t5", {"correct": True, "score": 1.0}),
            _task("t6", {}),
        ],
        run_id="A",
    )
    b = write_run(
        tmp_path / "b",
        [
            _task("t1", {"correct": True, "score": 1.0}),
            _task("t2", {"correct": True, "score": 0.5}),
            _task("t3", {"correct": False, "score": 0.0}),
            _task("t4", {"correct": True, "score": 0.25}),
            _task("t7", {"correct": False, "score": 0.0}),
            _task("t6", {"correct": True, "score": 1.0}),
        ],
        run_id="B",
    )
    return a, b


def test_compare_matches_hand_computation(runs: tuple[Path, Path]) -> None:
    # contract S1 (per-task values over attempts), issue 16 (paired 95 % interval)
    cmp = compare_runs(load_run(str(runs[0])), load_run(str(runs[1])))
    assert cmp["matched"] == 5  # t1..t4 and t6
    assert cmp["only_a"] == ["t5"] and cmp["only_b"] == ["t7"]
    by = {m["metric"]: m for m in cmp["metrics"]}
    correct = by["correct"]
    # diffs over t1..t4 (t6 unobserved in A): 0, +1, -1, +1
    assert correct["n"] == 4 and correct["unpaired"] == 1
    assert correct["mean_a"] == pytest.approx(0.5) and correct["mean_b"] == pytest.approx(0.75)
    assert correct["diff"] == pytest.approx(0.25)
    # s² = (0.0625 + 0.5625 + 1.5625 + 0.5625) / 3 = 0.916667; se = sqrt(s²/4) = 0.478714;
    # t(0.975, 3) = 3.182446 → half width 1.523472
    assert correct["stderr"] == pytest.approx(0.4787136, abs=1e-6)
    assert correct["ci95"] == pytest.approx([0.25 - 1.523472, 0.25 + 1.523472], abs=1e-5)
    assert correct["flipped_up"] == ["t2", "t4"] and correct["flipped_down"] == ["t3"]
    score = by["score"]
    # A per task: t1 (0.5+1)/2 = 0.75, t2 0, t3 1, t4 0.25; B: 1, 0.5, 0, 0.25 → diffs 0.25, 0.5, -1, 0
    assert score["diff"] == pytest.approx(-0.0625)
    mean = -0.0625
    s2 = sum((d - mean) ** 2 for d in (0.25, 0.5, -1.0, 0.0)) / 3
    assert score["stderr"] == pytest.approx(math.sqrt(s2 / 4))
    assert score["flipped_up"] == ["t1", "t2"] and score["flipped_down"] == ["t3"]


def test_paired_difference_edge_cases() -> None:
    assert paired_difference([])["diff"] is None
    one = paired_difference([(0.0, 1.0)])
    assert one["diff"] == 1.0 and one["ci95"] is None  # no interval from one pair
    same = paired_difference([(1.0, 1.0), (0.0, 0.0)])
    assert same["ci95"] == [0.0, 0.0]


def test_results_compare_cli(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["results", "compare", str(runs[0]), str(runs[1]), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["matched"] == 5 and payload["metrics"][0]["metric"] == "correct"
    assert main(["results", "compare", str(runs[0]), str(runs[1])]) == 0
    text = capsys.readouterr().out
    assert "matched tasks: 5; only in A: 1; only in B: 1" in text
    assert "+0.250" in text and "[-1.273, +1.773]" in text
    assert "better in B (2): t2, t4" in text and "worse in B (1): t3" in text


def test_results_compare_bad_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["results", "compare", str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "E0603" in err and "Traceback" not in err


def test_results_compare_limit_is_validated(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # QA: a negative --limit was accepted and cut the id lists from the end; now a usage error (exit 2)
    with pytest.raises(SystemExit) as info:
        main(["results", "compare", str(runs[0]), str(runs[1]), "--limit", "-1"])
    assert info.value.code == 2
    assert "argument --limit: expected a whole number >= 0" in capsys.readouterr().err
    assert main(["results", "compare", str(runs[0]), str(runs[1]), "--limit", "0"]) == 0
    assert "better in B (2):  … (+2; --format json lists all)" in capsys.readouterr().out


def _run_data(values: dict[str, dict[str, float]]) -> RunData:
    return RunData(
        path="x",
        info={"run_id": "r", "request_name": "q"},
        metrics=None,
        progress=None,
        live=False,
        primary="correct",
        overview={},
        headline=None,
        rows=[],
        details=[],
        plans=[],
        values=values,
        metric_kinds={"correct": "binary_success"},
    )


_task_values = st.dictionaries(
    st.sampled_from([f"t{i}" for i in range(12)]),
    st.fixed_dictionaries({}, optional={"correct": st.sampled_from([0.0, 0.5, 1.0])}),
)


@given(_task_values, _task_values)
def test_compare_is_antisymmetric_and_counts_add_up(
    va: dict[str, dict[str, float]], vb: dict[str, dict[str, float]]
) -> None:
    # issue 16: swapping the runs negates the difference and its interval and swaps the flips
    ab = compare_runs(_run_data(va), _run_data(vb))
    ba = compare_runs(_run_data(vb), _run_data(va))
    assert ab["matched"] == ba["matched"] == len(set(va) & set(vb))
    assert ab["only_a"] == ba["only_b"] and ab["only_b"] == ba["only_a"]
    m, r = ab["metrics"][0], ba["metrics"][0]
    assert m["n"] + m["unpaired"] == ab["matched"]
    assert m["flipped_up"] == r["flipped_down"] and m["flipped_down"] == r["flipped_up"]
    if m["diff"] is not None:
        assert m["diff"] == pytest.approx(-r["diff"])
    if m["ci95"] is not None:
        assert m["ci95"][0] <= m["diff"] <= m["ci95"][1]
        assert m["ci95"] == pytest.approx([-r["ci95"][1], -r["ci95"][0]])
    same = compare_runs(_run_data(va), _run_data(va))["metrics"][0]
    assert same["flipped_up"] == same["flipped_down"] == [] and same["diff"] in (None, 0.0)
