"""Python built-in recipes for Harbor tasks."""

from __future__ import annotations

import msgspec

from acx.compiler import BaseRecipe
from acx.ir import ExecutionPlan, RunRequest, TaskSpec

__all__ = ["HarborDockerfileWorkdir"]


class HarborDockerfileWorkdir(BaseRecipe):
    """Harbor on docker: default ``setup.workdir`` to the task Dockerfile's ``WORKDIR``.

    Harbor runs commands in the image's WORKDIR when ``environment.workdir`` is not declared; acx
    makes that explicit in the plan so ``exec`` without ``cwd`` lands in the same directory (H5).
    The loader recorded the WORKDIR in ``task.metadata["dockerfile_workdir"]`` (this recipe reads
    no files, RC4). Only fills a missing workdir: task and user values win. Only when the image
    is built from that Dockerfile (no ``setup.image`` given).
    """

    id = "harbor_docker_dockerfile_workdir"
    description = "Harbor on docker: default workdir from the task Dockerfile's WORKDIR"

    def matches(self, req: RunRequest, task: TaskSpec, plan: ExecutionPlan) -> bool:
        setup = plan.environment.setup
        return (
            req.benchmark.id == "harbor"
            and req.environment.id == "docker"
            and setup.workdir is None
            and setup.image is None
            and isinstance(task.metadata.get("dockerfile_workdir"), str)
        )

    def apply(self, plan: ExecutionPlan, req: RunRequest, task: TaskSpec) -> ExecutionPlan:
        env = plan.environment
        setup = msgspec.structs.replace(env.setup, workdir=task.metadata["dockerfile_workdir"])
        return msgspec.structs.replace(plan, environment=msgspec.structs.replace(env, setup=setup))
