"""The `dataset` benchmark at run time: prompts, per-attempt choice shuffles, files, several scorers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import trio
from hypothesis import given
from hypothesis import strategies as st

from acx.components._configs import DatasetConfig
from acx.components.benchmarks.dataset import DatasetBenchmark
from acx.ir import BenchmarkSpec, EnvironmentSpec, ExecutionPlan, HarnessSpec, ModelSpec, RunRequest, RunResult


def _bench(tmp_path: Path, rows: list[dict[str, Any]], **params: Any) -> DatasetBenchmark:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return DatasetBenchmark(msgspec.convert({"path": str(path), **params}, DatasetConfig), base_dir=tmp_path)


REQ = RunRequest(
    model=ModelSpec(id="m"),
    benchmark=BenchmarkSpec(id="dataset"),
    harness=HarnessSpec(id="command"),
    environment=EnvironmentSpec(id="host_process"),
)


def _plan(task_id: str, attempt: int) -> ExecutionPlan:
    return ExecutionPlan(task_id=task_id, attempt=attempt, environment=EnvironmentSpec(id="host_process"))


async def _attempt(
    bench: DatasetBenchmark, answer: str, attempt: int = 1, session: Any = None
) -> tuple[Any, RunResult]:
    (task,) = bench.load_tasks(REQ)
    plan = _plan(task.task_id, attempt)
    prepared = await bench.prepare_task(task, session, REQ, plan)
    result = await bench.evaluate(task, prepared, RunResult(task_id=task.task_id, final_answer=answer), REQ, plan)
    return prepared, result


MC = [{"id": "m1", "input": "Which is a fruit?", "choices": ["car", "apple", "rock", "pen"], "target": "apple"}]


def test_multiple_choice_prompt_without_shuffle() -> None:
    async def main(tmp: Path) -> None:
        bench = _bench(tmp, MC, fields={"choices": "choices"})
        prepared, result = await _attempt(bench, "ANSWER: B")
        assert "A) car\nB) apple\nC) rock\nD) pen" in prepared.input.prompt
        assert "ANSWER: $LETTER" in prepared.input.prompt and "apple" not in prepared.input.prompt.split("D)")[0][:20]
        assert result.metrics == {"correct": True}
        assert result.extra["choices"] == {
            "shown": ["car", "apple", "rock", "pen"],
            "order": [0, 1, 2, 3],
            "correct": ["B"],
        }

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        trio.run(main, Path(tmp))


def test_shuffled_choices_differ_per_attempt_and_are_recorded(tmp_path: Path) -> None:
    bench = _bench(tmp_path, MC, fields={"choices": "choices"}, shuffle_choices=True, seed=1)

    async def main() -> list[Any]:
        out = []
        for attempt in (1, 2, 3, 1):
            prepared, result = await _attempt(bench, "ANSWER: A", attempt)
            order = result.extra["choices"]["order"]
            correct = result.extra["choices"]["correct"]
            assert result.extra["choices"]["shown"][ord(correct[0]) - 65] == "apple"
            assert result.metrics["correct"] is (correct == ["A"])
            assert prepared.metadata["choice_order"] == order
            out.append(order)
        return out

    orders = trio.run(main)
    assert orders[0] == orders[3]  # the same attempt sees the same order (resume-safe)
    assert len({tuple(o) for o in orders[:3]}) > 1


def test_several_scorers_each_a_metric(tmp_path: Path) -> None:
    rows = [{"id": "q", "input": "Name the tower", "target": "Eiffel Tower"}]
    bench = _bench(tmp_path, rows, scorers=["exact", "includes", {"id": "f1", "name": "overlap"}])
    assert set(bench.metric_contract.metrics) == {"correct", "includes", "overlap"}
    _, result = trio.run(_attempt, bench, "It is the Eiffel Tower")
    assert result.metrics["correct"] is False and result.metrics["includes"] is True
    assert 0 < result.metrics["overlap"] < 1
    assert result.extra["scores"]["includes"]["scorer"] == "includes"
    _, empty = trio.run(_attempt, bench, "")
    assert [i.code for i in empty.issues] == ["output_missing"]


def test_chat_input_and_prompt_template(tmp_path: Path) -> None:
    rows = [
        {"id": "c", "input": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi?"}], "target": "x"}
    ]
    bench = _bench(tmp_path, rows, prompt_template="Q: {input}\nAnswer briefly.", system_prompt="sys")
    prepared, _ = trio.run(_attempt, bench, "x")
    assert prepared.input.prompt == "Q: Hi?\nAnswer briefly."
    assert [(m.role, m.content) for m in prepared.input.messages] == [
        ("system", "S"),
        ("user", "Q: Hi?\nAnswer briefly."),
    ]
    assert prepared.input.system_prompt == "sys"


class _Session:
    workdir = "/work"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        self.files[path] = data

    async def upload(self, local: str, remote: str) -> None:
        self.files[remote] = Path(local).read_bytes()


def test_files_are_placed_in_the_sandbox(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("host bytes")
    rows = [
        {
            "id": "f",
            "input": "cat",
            "target": "x",
            "files": {"a/in.txt": "in.txt", "/abs/b.txt": "data:text/plain;base64,aGk="},
        }
    ]
    bench = _bench(tmp_path, rows, fields={"files": "files"})
    session = _Session()
    prepared, _ = trio.run(_attempt, bench, "x", 1, session)
    assert session.files == {"/work/a/in.txt": b"host bytes", "/abs/b.txt": b"hi"}
    assert [f.path for f in prepared.input.files] == ["/work/a/in.txt", "/abs/b.txt"]


@given(st.integers(2, 26), st.data())
def test_shuffled_target_letters_point_at_the_right_choice(n: int, data: st.DataObject) -> None:
    from acx.components.datasets import choice_order, render_choices, target_letters

    choices = [f"choice-{i}" for i in range(n)]
    target = data.draw(st.integers(0, n - 1))
    order = choice_order(
        n, shuffle=True, seed=data.draw(st.integers()), task_id="t", attempt=data.draw(st.integers(1, 9))
    )
    assert sorted(order) == list(range(n))
    (letter,) = target_letters(target, choices, order)
    shown = render_choices(choices, order).splitlines()
    assert shown[ord(letter) - 65] == f"{letter}) choice-{target}"
