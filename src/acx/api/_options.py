"""The one list of options :func:`acx.run`, :func:`acx.run_async` and :func:`acx.api.build_programs`
take (as keyword arguments); each function reads the fields it uses."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acx.interpreter import ProgressEvent

__all__ = ["RunOptions"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Options of a run; the keyword arguments mirror the command-line flags.

    A compiled program runs exactly as compiled: with one, only ``runtime``, ``run_id``,
    ``reuse``, ``cluster`` and the callbacks apply (the compile-time options are E0614).
    """

    #: ``--config`` files, lowest precedence first.
    configs: Sequence[str | os.PathLike[str]] = ()
    #: ``--env``: the environment driver id of every request.
    environment: str | None = None
    task_concurrency: int | None = None
    #: ``--execution-params``.
    execution: Mapping[str, Any] | None = None
    #: ``--runtime-params`` (process options; apply to a compiled program too).
    runtime: Mapping[str, Any] | None = None
    #: ``--tasks``: a glob of task ids.
    tasks: str | None = None
    run_id: str | None = None
    #: ``True``: copy verified finished tasks of the newest earlier run; ``"RUN_ID"``: of that run.
    reuse: bool | str = False
    #: Supplies ``${VAR}`` references and secrets (default ``os.environ``).
    environ: Mapping[str, str] | None = None
    #: Receives progress events.
    progress: Callable[[ProgressEvent], None] | None = None
    #: Receives warnings and notes, one text per call (default: the ``acx`` logger).
    report: Callable[[str], None] | None = None
    #: ``"ray"`` or ``"ray://HEAD_HOST:GCS_PORT"`` (``--cluster``; docs/cluster.md).
    cluster: str | None = None
    #: A run directory whose transcripts answer every model call (``--replay``; docs/models.md).
    replay: str | os.PathLike[str] | None = None
    #: Merged over every request's benchmark params (``acx regrade --benchmark-params``).
    benchmark_params: Mapping[str, Any] | None = None

    def compile_time(self) -> bool:
        """Whether an option that only compiling a spec can honour is set."""
        return bool(
            self.configs
            or self.execution
            or self.task_concurrency
            or self.tasks
            or self.environment
            or self.benchmark_params
        )
