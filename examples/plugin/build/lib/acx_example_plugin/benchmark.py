"""``word_count``: how many words does a sentence have? Tasks come from the config itself.

Plan-time half: ``load_tasks`` builds one task per sentence (pure: no sandbox, model or secret).
Run-time half: ``prepare_task`` writes the prompt, ``evaluate`` compares the answer with the count.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec

from acx.components import BaseBenchmark, BenchmarkConfig
from acx.ir import ExecutionPlan, MetricContract, PreparedTask, RunRequest, RunResult, TaskInput, TaskSpec


class WordCountConfig(BenchmarkConfig, frozen=True, kw_only=True):
    """Params of ``word_count`` (validated, documented and schema'd by acx like a built-in's)."""

    sentences: Annotated[list[str], msgspec.Meta(min_length=1, description="one task per sentence")]
    category: Annotated[str, msgspec.Meta(description="category of every task")] = "words"


class WordCountBenchmark(BaseBenchmark):
    """Count the words of a sentence; scored by exact integer match."""

    description: ClassVar[str] = "Count the words of each configured sentence (example plugin)."
    config_class = WordCountConfig
    metric_contract: ClassVar[MetricContract] = MetricContract.binary("correct")
    # Text tasks produce no files to collect.
    collect_artifacts: ClassVar[bool] = False

    config: WordCountConfig

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        return [
            TaskSpec(
                task_id=f"s-{i}",
                question=sentence,
                category=self.config.category,
                ground_truth=len(sentence.split()),
            )
            for i, sentence in enumerate(self.config.sentences, start=1)
        ]

    async def prepare_task(self, task: TaskSpec, session: Any, req: RunRequest, plan: ExecutionPlan) -> PreparedTask:
        # The agent sees the sentence, never the count (the ground truth stays here).
        return PreparedTask(task_id=task.task_id, category=task.category, input=TaskInput(prompt=task.question))

    async def evaluate(
        self,
        task: TaskSpec,
        prepared: PreparedTask,
        result: RunResult,
        req: RunRequest,
        plan: ExecutionPlan,
        session: Any = None,
    ) -> RunResult:
        try:
            correct = int(str(result.final_answer).strip()) == task.ground_truth
        except ValueError:
            correct = False
        return msgspec.structs.replace(result, metrics={"correct": correct}, ground_truth=task.ground_truth)
