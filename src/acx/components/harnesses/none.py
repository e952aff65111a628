"""``none``: no harness; selects a harness-free benchmark that runs tasks itself (``run_task``)."""

from __future__ import annotations

from typing import Any, ClassVar

from acx.components._base import BaseHarness
from acx.components._configs import HarnessConfig
from acx.errors import AcxInternalError

__all__ = ["NoneHarness", "NoneHarnessConfig"]


class NoneHarnessConfig(HarnessConfig, frozen=True, kw_only=True):
    """Placeholder for harness-free benchmarks."""


class NoneHarness(BaseHarness):
    id: ClassVar[str] = "none"
    description: ClassVar[str] = "No harness: selects a harness-free benchmark."
    config_class = NoneHarnessConfig

    async def execute_task(self, ctx: Any) -> Any:
        # The planner refuses `harness none` with a benchmark that is not harness-free, and the
        # interpreter calls `benchmark.run_task` for harness-free ones: reaching this is a bug.
        raise AcxInternalError("harness `none` has no agent to execute; the benchmark must be harness-free")
