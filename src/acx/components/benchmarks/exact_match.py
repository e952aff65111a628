"""``exact_match``: question answering over a JSONL dataset, scored by normalised exact match.

Plan-time half (this module): load and select tasks, build the per-task BenchmarkPlan. The
run-time half (prepare_task, evaluate) is the :class:`ExactMatchRuntime` mixin.

Dataset format, one JSON object per line: ``id`` (string or integer; unique), ``question``,
``answer``, optional ``category``; other keys are kept in ``TaskSpec.metadata["record"]``.
Blank lines are skipped. The answer is the publishable reference answer (``ground_truth``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from acx.components._base import BaseBenchmark
from acx.components._configs import ExactMatchConfig
from acx.components.benchmarks import apply_n_tasks, select_by_sample_ids
from acx.components.benchmarks._exact_match_runtime import ExactMatchRuntime
from acx.diagnostics import Span
from acx.errors import AcxPlanError
from acx.inputs import MAX_DATASET_BYTES, MAX_NESTING_DEPTH, InputFileError, input_file_error, read_regular_file
from acx.ir import BenchmarkPlan, MetricContract, RunRequest, TaskSpec

__all__ = ["ExactMatchBenchmark", "load_exact_match_dataset"]

_DECODER = msgspec.json.Decoder()


class ExactMatchBenchmark(ExactMatchRuntime, BaseBenchmark):
    id: ClassVar[str] = "exact_match"
    description: ClassVar[str] = "Question answering over a JSONL dataset, scored by normalised exact match."
    config_class = ExactMatchConfig
    evaluation_environment_mode: ClassVar[str] = "none"
    # Text QA produces no files; on host_process `/logs/artifacts` would be a *host* path.
    collect_artifacts: ClassVar[bool] = False
    requires_isolated_filesystem: ClassVar[bool] = False
    metric_contract: ClassVar[MetricContract] = MetricContract.binary("correct")
    evaluation_timeout_metrics: ClassVar[dict[str, Any] | None] = {"correct": False}

    config: ExactMatchConfig

    def dataset_path(self) -> Path:
        # os.path.expanduser leaves `~nosuchuser/x` as it is (Path.expanduser raises): the
        # path then simply does not exist (E0401).
        path = Path(os.path.expanduser(self.config.dataset))
        return path if path.is_absolute() else self.base_dir / path

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        return load_exact_match_dataset(self.dataset_path())

    def select_tasks(self, tasks: list[TaskSpec], req: RunRequest) -> list[TaskSpec]:
        return apply_n_tasks(select_by_sample_ids(tasks, self.config.sample_ids), self.config.n_tasks)

    def build_plan(self, task: TaskSpec, req: RunRequest) -> BenchmarkPlan:
        # One shared, never-mutated plan: the comparison settings are per request, not per task.
        plan = getattr(self, "_plan", None)
        if plan is None:
            c = self.config
            plan = BenchmarkPlan(
                params={
                    "case_sensitive": c.case_sensitive,
                    "normalize_whitespace": c.normalize_whitespace,
                    "strip_punctuation": c.strip_punctuation,
                }
            )
            self._plan = plan
        return plan


def _bad(path: Path, line: int, message: str, help: str, code: str = "E0402") -> AcxPlanError:
    return AcxPlanError(message, code=code, span=Span(str(path), line, 1), help=help)


def load_exact_match_dataset(path: Path) -> list[TaskSpec]:
    """Read a JSONL dataset; every malformed record is an error with file:line (B4: stable ids)."""
    try:
        data = read_regular_file(path, max_bytes=MAX_DATASET_BYTES)
    except InputFileError as exc:
        raise input_file_error(
            AcxPlanError, exc, what="exact_match dataset ", path="benchmark.params.dataset"
        ) from None
    except FileNotFoundError:
        secret = "${" in path.name and path.name.endswith("}")
        raise AcxPlanError(
            f"exact_match dataset {path} does not exist",
            code="E0401",
            path="benchmark.params.dataset",
            help="the path is a secret reference, which only `acx run` resolves (compiling never reads "
            "secrets): use a variable with an ordinary name for a path you want to plan"
            if secret
            else "`dataset` is resolved relative to the spec file's directory; check the path",
        ) from None
    except ValueError:  # an embedded NUL: no file system has such a path
        raise AcxPlanError(
            f"exact_match dataset path {str(path)!r} contains a NUL character",
            code="E0401",
            path="benchmark.params.dataset",
            help="fix `dataset`: a file path cannot contain NUL (\\u0000)",
        ) from None
    except OSError as exc:
        raise AcxPlanError(
            f"cannot read exact_match dataset {path}: {exc.strerror}",
            code="E0401",
            path="benchmark.params.dataset",
            help="make the file readable",
        ) from None
    tasks: list[TaskSpec] = []
    seen: dict[str, int] = {}
    source = str(path)
    for lineno, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        tasks.append(_task(path, source, lineno, raw, seen))
    if not tasks:
        raise _bad(
            path,
            1,
            f"exact_match dataset {path} has no records",
            'add one JSON object per line: {"id": "q1", "question": "…", "answer": "…"}',
        )
    return tasks


def _depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists/dicts deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _task(path: Path, source: str, lineno: int, raw: bytes, seen: dict[str, int]) -> TaskSpec:
    try:
        record = _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise _bad(
            path, lineno, f"line {lineno} is not valid JSON: {exc}", "each line must be one JSON object"
        ) from None
    except RecursionError:  # the decoder recurses per nesting level
        raise _bad(
            path,
            lineno,
            f"line {lineno} nests JSON arrays or objects too deeply",
            f"records may nest at most about {MAX_NESTING_DEPTH} levels (docs/errors.md#E0219)",
            code="E0219",
        ) from None
    if _depth_exceeds(record, MAX_NESTING_DEPTH):
        raise _bad(
            path,
            lineno,
            f"line {lineno} nests JSON arrays or objects more than {MAX_NESTING_DEPTH} levels deep",
            f"records may nest at most {MAX_NESTING_DEPTH} levels (docs/errors.md#E0219)",
            code="E0219",
        )
    if not isinstance(record, dict):
        raise _bad(
            path,
            lineno,
            f"line {lineno} is a JSON {type(record).__name__}, not an object",
            'write {"id": …, "question": …, "answer": …}',
        )
    task_id = record.get("id")
    if isinstance(task_id, int) and not isinstance(task_id, bool):
        task_id = str(task_id)
    if not isinstance(task_id, str) or not task_id.strip():
        raise _bad(
            path,
            lineno,
            f"record on line {lineno} has no usable `id` (got {record.get('id')!r})",
            "every record needs a unique non-empty string id",
            code="E0403",
        )
    if task_id in seen:
        raise _bad(
            path,
            lineno,
            f"duplicate task id {task_id!r} (first on line {seen[task_id]})",
            "task ids must be unique within a dataset",
            code="E0403",
        )
    seen[task_id] = lineno
    question = record.get("question")
    if not isinstance(question, str):
        raise _bad(
            path,
            lineno,
            f"record {task_id!r} (line {lineno}) needs a string `question`",
            "add the question text",
        )
    if "answer" not in record:
        raise _bad(path, lineno, f"record {task_id!r} (line {lineno}) has no `answer`", "add the reference answer")
    category = record.get("category", "all")
    if not isinstance(category, str) or not category:
        raise _bad(
            path,
            lineno,
            f"record {task_id!r} (line {lineno}): `category` must be a non-empty string",
            "remove it or give a name",
        )
    rest = {k: v for k, v in record.items() if k not in ("id", "question", "answer", "category")}
    return TaskSpec(
        task_id=task_id,
        question=question,
        category=category,
        ground_truth=record["answer"],
        metadata={"dataset": source, "line": lineno, "record": rest},
    )
