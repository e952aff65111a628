"""Benchmarks, plan-time half: exact_match and harbor loading/selection (contracts B1, B2, B4, P1, P2)."""

from __future__ import annotations

from pathlib import Path

import pytest

import acx.ir as ir
from acx.compiler._planner import plan_request
from acx.compiler._recipes import RecipeRegistry
from acx.components._configs import ExactMatchConfig, HarborConfig
from acx.components.benchmarks.exact_match import ExactMatchBenchmark
from acx.components.benchmarks.harbor import HarborBenchmark
from acx.errors import AcxPlanError, CapabilityError

from ._helpers import DOCKER, HOST, make_request

RECORDS = [
    {"id": "q1", "question": "1+1?", "answer": "2", "category": "math", "source": "s1"},
    {"id": 7, "question": "capital of France?", "answer": "Paris"},
    {"id": "q3", "question": "3*3?", "answer": 9},
]


def _plan_em(tmp_path: Path, params: dict, *, task_glob: str | None = None):  # type: ignore[no-untyped-def]
    req = make_request(
        benchmark="exact_match",
        bench_params=params,
        env="host_process",
        harness="command",
        harness_params={"command": "cat"},
    )
    return plan_request(req, base_dir=str(tmp_path), capabilities=HOST, recipes=RecipeRegistry(), task_glob=task_glob)


def test_exact_match_loads_stable_tasks(dataset, tmp_path: Path) -> None:  # contracts B4, P2
    dataset(RECORDS)
    rp = _plan_em(tmp_path, {"dataset": "d.jsonl"})  # relative to base_dir
    assert [t.task_id for t in rp.tasks] == ["q1", "7", "q3"]
    t = rp.tasks[0]
    assert (t.question, t.category, t.ground_truth) == ("1+1?", "math", "2")
    assert t.metadata["record"] == {"source": "s1"}  # raw record stays in metadata, answer only in ground_truth
    assert t.metadata["line"] == 1
    assert rp.tasks[1].category == "all"
    plan = rp.plan_attempt(t, 1)
    assert plan.benchmark_plan.params == {
        "case_sensitive": False,
        "normalize_whitespace": True,
        "strip_punctuation": False,
    }
    assert plan.harness_plan == ir.HarnessPlan()  # harness-free: a bare HarnessPlan (P4 step 5)


def test_exact_match_metric_contract_and_artifacts() -> None:  # contract S1, A1
    assert ExactMatchBenchmark.metric_contract.primary_id() == "correct"
    assert ExactMatchBenchmark.collect_artifacts is False
    assert HarborBenchmark.metric_contract.primary_id() == "score"
    assert HarborBenchmark.metric_contract.metrics["correct"].kind == "binary_success"
    assert HarborBenchmark.evaluation_environment_mode == "reuse"
    assert HarborBenchmark.requires_isolated_filesystem is True


def test_sample_ids_select_in_dataset_order(dataset, tmp_path: Path) -> None:  # contract B4
    dataset(RECORDS)
    rp = _plan_em(tmp_path, {"dataset": "d.jsonl", "sample_ids": ["q3", 7]})
    assert [t.task_id for t in rp.tasks] == ["7", "q3"]
    assert rp.total_tasks == 3
    rp = _plan_em(tmp_path, {"dataset": "d.jsonl", "sample_ids": "q1"})
    assert [t.task_id for t in rp.tasks] == ["q1"]
    assert [t.task_id for t in _plan_em(tmp_path, {"dataset": "d.jsonl", "n_tasks": 2}).tasks] == ["q1", "7"]
    assert [t.task_id for t in _plan_em(tmp_path, {"dataset": "d.jsonl"}, task_glob="q*").tasks] == [
        "q1",
        "q3",
    ]


def test_unknown_sample_ids(dataset, tmp_path: Path) -> None:  # contract B4
    dataset(RECORDS)
    with pytest.raises(AcxPlanError, match="unknown benchmark sample_ids: q11") as e:
        _plan_em(tmp_path, {"dataset": "d.jsonl", "sample_ids": ["q1", "q11"]})
    assert "did you mean 'q1'" in str(e.value)
    assert e.value.code == "E0404"
    with pytest.raises(AcxPlanError, match="matches none") as e:
        _plan_em(tmp_path, {"dataset": "d.jsonl"}, task_glob="zzz*")
    assert e.value.code == "E0440"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('{"id": "a", "question": "q", "answer": "x"}\n{oops\n', 2, "not valid JSON"),
        (
            '{"id": "a", "question": "q", "answer": "x"}\n\n{"id": "a", "question": "q", "answer": "y"}\n',
            3,
            "duplicate task id 'a' \\(first on line 1\\)",
        ),
        ('{"question": "q", "answer": "x"}\n', 1, "no usable `id`"),
        ('{"id": "", "question": "q", "answer": "x"}\n', 1, "no usable `id`"),
        ('{"id": "a", "answer": "x"}\n', 1, "needs a string `question`"),
        ('{"id": "a", "question": "q"}\n', 1, "has no `answer`"),
        ("[1, 2]\n", 1, "not an object"),
    ],
)
def test_malformed_dataset_names_file_and_line(dataset, tmp_path: Path, text: str, line: int, message: str) -> None:
    path = dataset(text)
    with pytest.raises(AcxPlanError, match=message) as e:
        _plan_em(tmp_path, {"dataset": "d.jsonl"})
    assert e.value.span is not None and (e.value.span.file, e.value.span.line) == (str(path), line)


def test_missing_dataset(tmp_path: Path) -> None:
    with pytest.raises(AcxPlanError, match="does not exist") as e:
        _plan_em(tmp_path, {"dataset": "nope.jsonl"})
    assert e.value.code == "E0401" and "relative to the spec" in str(e.value)


def test_exact_match_config_normalised_early() -> None:  # contract B2
    import msgspec

    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"dataset": "d", "case_sensitive": "maybe"}, ExactMatchConfig)
    with pytest.raises(AcxPlanError, match="invalid benchmark params"):
        plan_request(
            make_request(benchmark="exact_match", bench_params={"dataset": "d", "bogus": 1}),
            base_dir=".",
            capabilities=HOST,
            recipes=RecipeRegistry(),
        )


def test_harbor_benchmark_selection_and_isolation(harbor_task, tmp_path: Path) -> None:  # contracts B4, P7
    root = tmp_path / "tasks"
    root.mkdir()
    for name in ("alpha", "beta", "gamma"):
        harbor_task(name, "[agent]\ntimeout_sec = 10\nbogus = 'x'\n", root=root)
    req = make_request(benchmark="harbor", bench_params={"path": "tasks", "task_names": ["a*", "g*"]}, harness="oracle")
    rp = plan_request(req, base_dir=str(tmp_path), capabilities=DOCKER, recipes=RecipeRegistry())
    assert [t.task_id for t in rp.tasks] == ["alpha", "gamma"]
    assert rp.tasks[0].load_warnings  # unmapped `agent.bogus` warns, only selected tasks are shown
    assert rp.plan_attempt(rp.tasks[0], 1).run_timeout_seconds == 10.0
    host_req = make_request(benchmark="harbor", bench_params={"path": "tasks"}, harness="oracle", env="host_process")
    rp = plan_request(host_req, base_dir=str(tmp_path), capabilities=HOST, recipes=RecipeRegistry())
    with pytest.raises(CapabilityError, match="--env docker"):
        rp.plan_attempt(rp.tasks[0], 1)
    cfg = HarborConfig(path=str(root), n_tasks=1)
    bench = HarborBenchmark(cfg)
    assert [t.task_id for t in bench.select_tasks(bench.load_tasks(req), req)] == ["alpha"]


def test_base_select_tasks_honours_sample_ids() -> None:  # contract B4
    from acx.components._base import BaseBenchmark
    from acx.components._configs import BenchmarkConfig

    bench = BaseBenchmark(BenchmarkConfig(sample_ids=["b", "a"]))
    tasks = [ir.TaskSpec(task_id=i) for i in ("a", "b", "c")]
    assert [t.task_id for t in bench.select_tasks(tasks, make_request())] == ["a", "b"]
    with pytest.raises(AcxPlanError, match="unknown benchmark sample_ids: z"):
        BaseBenchmark(BenchmarkConfig(sample_ids="z")).select_tasks(tasks, make_request())


def test_broken_harbor_task_blocks_only_when_selected(harbor_task, tmp_path: Path) -> None:  # contracts B4, H6
    root = tmp_path / "tasks"
    root.mkdir()
    harbor_task("good", "[agent]\ntimeout_sec = 10\n", root=root)
    harbor_task("broken", "[agent]\ntimeout_sec = -1\n", root=root)
    (root / "not-a-task").mkdir()

    def planned(**params: object) -> list[str]:
        req = make_request(benchmark="harbor", bench_params={"path": "tasks", **params}, harness="oracle")
        rp = plan_request(req, base_dir=str(tmp_path), capabilities=DOCKER, recipes=RecipeRegistry())
        return [rp.plan_attempt(t, 1).task_id for t in rp.tasks]

    assert planned(task_names=["good"]) == ["good"]  # the broken ones are left out: no error
    with pytest.raises(AcxPlanError, match="finite and positive") as e:
        planned()
    assert e.value.span is not None and e.value.span.file == str(root / "broken" / "task.toml")
    assert e.value.span.line == 2
    with pytest.raises(AcxPlanError, match="not-a-task is not a Harbor task directory"):
        planned(sample_ids=["not-a-task"])
