"""``dataset``: question answering over a local dataset file, scored by a list of scorers.

Plan-time half (this module): the file is read lazily (:mod:`acx.components.datasets`), the
field mapping checked on every row, the selection applied while loading (filters →
``sample_ids`` → seeded shuffle → ``limit``), and the ``scorers`` list built and declared as the
metric contract — the first scorer is the primary metric (``correct`` or ``score``), every other
one a metric under its ``name``. The run-time half is :class:`DatasetRuntime`.

A task the scorers cannot score (a grader failure, an unparseable grade) has no value for that
metric — it counts as *unavailable*, never as 0 — and carries an evaluation error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from acx.components._base import BaseBenchmark
from acx.components._configs import DatasetConfig
from acx.components.benchmarks._dataset_runtime import DatasetRuntime
from acx.components.datasets import load_dataset
from acx.components.scorers import BoundScorer, build_scorers, metric_contract_for
from acx.ir import BenchmarkPlan, MetricContract, RunRequest, TaskSpec

__all__ = ["DatasetBenchmark"]


class DatasetBenchmark(DatasetRuntime, BaseBenchmark):
    id: ClassVar[str] = "dataset"
    description: ClassVar[str] = (
        "Question answering over a local JSONL/JSON/CSV/TSV/Parquet file with a field mapping and scorers."
    )
    config_class = DatasetConfig
    evaluation_environment_mode: ClassVar[str] = "none"
    # Text QA produces no files; on host_process `/logs/artifacts` would be a *host* path.
    collect_artifacts: ClassVar[bool] = False
    parallel_attempts_safe: ClassVar[bool] = True
    #: An evaluation timeout leaves the attempt unscored (an error), never a 0.
    evaluation_timeout_metrics: ClassVar[dict[str, Any] | None] = None

    config: DatasetConfig

    def __init__(self, config: DatasetConfig, *, base_dir: Path | None = None) -> None:
        super().__init__(config, base_dir=base_dir)
        self.scorers: list[BoundScorer] = build_scorers(self.scorer_entries())
        self.metric_contract: MetricContract = metric_contract_for(self.scorers)  # type: ignore[misc]
        self._plan = BenchmarkPlan(params={"scorers": [b.metric for b in self.scorers]})

    @property
    def calls_model(self) -> bool:
        """A scorer grades with the run's models: the run starts its model gateway for it."""
        return any(b.scorer.uses_run_models() for b in self.scorers)

    def default_scorers(self) -> list[Any]:
        return ["choice"] if self.config.fields.choices is not None else ["exact"]

    def scorer_entries(self) -> list[Any]:
        """The ``scorers`` param, or the benchmark's default scorers."""
        return list(self.config.scorers) if self.config.scorers is not None else self.default_scorers()

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        self._check_reducers(req.execution.attempts.k)
        return load_dataset(self.config, self.base_dir, benchmark=self.id)

    def _check_reducers(self, attempts: int) -> None:
        """``pass_at_<k>``/``at_least_<m>`` over more attempts than planned: refused at planning,
        not a metric that is unavailable (or 0) for every task."""
        from acx.errors import AcxPlanError

        for i, bound in enumerate(self.scorers):
            for reducer in bound.reducers:
                head, _, n = reducer.rpartition("_")
                if head in ("pass_at", "at_least") and int(n) > attempts:
                    raise AcxPlanError(
                        f"reducer `{reducer}` needs at least {n} attempts per task; the request plans {attempts}",
                        code="E0406",
                        path=f"benchmark.params.scorers[{i}].reducers",
                        help=f"set execution.attempts.k to {n} or more, or drop the reducer",
                    )

    def select_tasks(self, tasks: list[TaskSpec], req: RunRequest) -> list[TaskSpec]:
        return tasks  # selection is applied while loading (only selected rows become tasks)

    def build_plan(self, task: TaskSpec, req: RunRequest) -> BenchmarkPlan:
        return self._plan
