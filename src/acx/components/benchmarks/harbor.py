"""``harbor``: Harbor task directories, scored by the verifier's reward.

Plan-time half (this module): ``path`` is one task directory (it has ``task.toml``) or a directory
of them (sorted by name). Each is loaded with :func:`acx.components.harbor_task.load_harbor_task`.
An invalid task directory inside a dataset is never silently skipped: its error (file and line) is
raised when the task is planned, i.e. when it is selected — so ``task_names``, ``sample_ids`` or
``--tasks`` can leave a broken task out while its error still shows the moment it is included.
A task with no image source (no ``docker_image``, no ``environment/Dockerfile``, no request
``setup.image``) is such an error (E0410), not a failure at run time (:func:`check_task_image`).

Metric contract: ``score`` (scalar, primary) is the verifier's ``reward``; ``correct`` (binary)
is ``reward >= 1``. Harbor tasks write absolute paths (``/logs``, ``/tests``), so they need a
driver with an isolated filesystem (``--env docker``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from acx.components._base import BaseBenchmark
from acx.components._configs import HarborConfig
from acx.components.benchmarks import apply_n_tasks, select_by_globs, select_by_sample_ids
from acx.components.benchmarks._harbor_runtime import HarborRuntime
from acx.components.harbor_task import is_task_dir, load_harbor_task
from acx.errors import AcxPlanError
from acx.ir import BenchmarkPlan, MetricContract, RunRequest, TaskSpec

__all__ = ["HarborBenchmark", "check_task_image", "load_harbor_dataset"]

_EMPTY_PLAN = BenchmarkPlan()


class HarborBenchmark(HarborRuntime, BaseBenchmark):
    id: ClassVar[str] = "harbor"
    description: ClassVar[str] = (
        "Harbor task directories (task.toml, instruction.md, tests/), scored by the verifier's reward."
    )
    config_class = HarborConfig
    #: Harbor's default is a shared verifier; a task's `verifier.environment_mode` overrides it (P5).
    evaluation_environment_mode: ClassVar[str] = "reuse"
    collect_artifacts: ClassVar[bool] = True
    requires_isolated_filesystem: ClassVar[bool] = True
    #: A reward is 0–1 by Harbor's convention (``correct`` is reward ≥ 1); a verifier that writes
    #: a reward outside it widens the range its intervals are clipped to (acx.stats.value_bounds).
    metric_contract: ClassVar[MetricContract] = MetricContract.scalar(binary=("correct",), score_range=(0.0, 1.0))
    evaluation_timeout_metrics: ClassVar[dict[str, Any] | None] = None
    #: Harbor's agent phase runs under `[agent]`'s policy, else the environment baseline
    #: (`resolve_agent_phase_policy`), never `public` when the task said no-network.
    run_policy_follows_baseline: ClassVar[bool] = True

    config: HarborConfig

    def tasks_path(self) -> Path:
        path = Path(os.path.expanduser(self.config.path))  # `~nosuchuser` stays as written (E0410)
        return path if path.is_absolute() else self.base_dir / path

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        self._load_errors: dict[str, AcxPlanError] = {}
        renv = req.environment
        return load_harbor_dataset(
            self.tasks_path(),
            solution_env_for_agent=self.config.solution_env_for_agent,
            errors=self._load_errors,
            image=renv.setup.image,
            evaluation_image=renv.evaluation_setup.image if renv.evaluation_setup is not None else None,
        )

    def select_tasks(self, tasks: list[TaskSpec], req: RunRequest) -> list[TaskSpec]:
        selected = select_by_sample_ids(tasks, self.config.sample_ids)
        selected = select_by_globs(selected, self.config.task_names)
        return apply_n_tasks(selected, self.config.n_tasks)

    def recovery_inputs(self, task: TaskSpec) -> dict[str, str]:
        """What an evaluation checkpoint fingerprints (A9): the task's files, and its tests —
        evaluation inputs a regrade may change on purpose."""
        meta = task.metadata
        pairs = (("task_files", meta.get("task_dir")), ("tests", meta.get("tests_dir")))
        return {kind: str(path) for kind, path in pairs if path}

    def build_plan(self, task: TaskSpec, req: RunRequest) -> BenchmarkPlan:
        error = getattr(self, "_load_errors", {}).get(task.task_id)
        if error is not None:  # a selected task whose directory did not load
            raise error
        # Budgets come from the TaskSpec (agent/verifier timeout_sec); nothing benchmark-private.
        return _EMPTY_PLAN


def load_harbor_dataset(
    path: Path,
    *,
    solution_env_for_agent: bool = False,
    errors: dict[str, AcxPlanError] | None = None,
    image: str | None = None,
    evaluation_image: str | None = None,
) -> list[TaskSpec]:
    """One task dir, or every sub-directory of ``path`` (sorted by name) as a task dir.

    An invalid sub-directory raises, unless ``errors`` is given: then its error is stored there
    under the task id and a placeholder TaskSpec (id = directory name) keeps its place.
    ``image`` / ``evaluation_image`` are the request's ``setup.image`` / ``evaluation_setup.image``:
    a task needs an image from somewhere — its ``docker_image``, its ``environment/Dockerfile`` or
    the request (:func:`check_task_image`).
    """

    def load(d: Path) -> TaskSpec:
        task = load_harbor_task(d, solution_env_for_agent=solution_env_for_agent)
        check_task_image(task, d, image=image, evaluation_image=evaluation_image)
        return task

    if not path.exists():
        raise AcxPlanError(
            f"Harbor path {path} does not exist",
            code="E0410",
            path="benchmark.params.path",
            help="`path` is resolved relative to the spec file's directory",
        )
    if is_task_dir(path):
        return [load(path)]
    if not path.is_dir():
        raise AcxPlanError(
            f"Harbor path {path} is neither a task directory nor a directory of them",
            code="E0410",
            path="benchmark.params.path",
            help="point `path` at a directory containing task.toml, or at its parent",
        )
    subdirs = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not subdirs:
        raise AcxPlanError(
            f"Harbor path {path} contains no task directories",
            code="E0410",
            path="benchmark.params.path",
            help="each task is a sub-directory with task.toml, instruction.md and tests/test.sh",
        )
    tasks = []
    for d in subdirs:
        try:
            tasks.append(load(d))
        except AcxPlanError as exc:
            if errors is None:
                raise
            errors[d.name] = exc
            tasks.append(TaskSpec(task_id=d.name, metadata={"task_dir": str(d.resolve())}))
    return tasks


def check_task_image(
    task: TaskSpec, task_dir: Path, *, image: str | None = None, evaluation_image: str | None = None
) -> None:
    """Refuse, when the task is loaded, a task whose sandbox would have no image to run.

    The run sandbox needs ``[environment] docker_image``, ``environment/Dockerfile`` or the
    request's ``setup.image``. A separate verifier environment (``[verifier.environment]``, which
    does not inherit the task's run set-up) needs its own ``docker_image``, the task's Dockerfile
    or the request's ``setup.image`` / ``evaluation_setup.image`` (layered over it, H2).
    """
    dockerfile = task_dir / "environment" / "Dockerfile"
    if dockerfile.is_file():
        return
    toml = task_dir / "task.toml"
    where = f"{dockerfile} does not exist"
    if image is None and task.environment_setup.image is None:
        raise AcxPlanError(
            f"Harbor task {task_dir} has no environment image: task.toml sets no "
            f"[environment] docker_image and {where}",
            code="E0410",
            path=str(toml),
            help='add `docker_image = "IMAGE"` under [environment] in task.toml, add '
            "environment/Dockerfile to the task, or give every task an image with the request's "
            "environment `setup.image`",
        )
    verifier = task.evaluation_environment_setup
    if verifier is not None and verifier.image is None and evaluation_image is None and image is None:
        raise AcxPlanError(
            f"Harbor task {task_dir} has no image for its separate verifier environment: "
            f"[verifier.environment] sets no docker_image and {where}",
            code="E0410",
            path=str(toml),
            help='add `docker_image = "IMAGE"` under [verifier.environment] in task.toml, add '
            "environment/Dockerfile to the task, or set the request's environment `setup.image` or "
            "`evaluation_setup.image`",
        )
