"""Results (contracts S1, S2): issues, one RunResult per attempt, the metric contract."""

from __future__ import annotations

from typing import Any, Literal

from acx.ir._common import IRStruct

__all__ = [
    "ExecutionIssue",
    "MetricContract",
    "MetricDisplay",
    "MetricSpec",
    "RunResult",
    "TaskStatus",
    "status_from_issues",
]

Severity = Literal["fatal", "error", "warning"]
IssuePhase = Literal["setup", "run", "collect", "evaluate", "cleanup"]
TaskStatus = Literal[
    "completed", "run_error", "eval_error", "run_error_or_eval_error", "skipped", "cancelled", "interrupted"
]


class ExecutionIssue(IRStruct, frozen=True):
    severity: Severity
    phase: IssuePhase
    code: str
    message: str = ""


class RunResult(IRStruct, frozen=True):
    """One execution/evaluation attempt (S1)."""

    task_id: str
    attempt: int = 1
    status: TaskStatus = "completed"
    category: str = "all"
    final_answer: Any = None
    ground_truth: Any = None
    trajectory: Any = None
    issues: list[ExecutionIssue] = []
    artifacts: dict[str, Any] = {}
    metrics: dict[str, bool | int | float] = {}
    telemetry: dict[str, Any] = {}
    retry_count: int = 0
    extra: dict[str, Any] = {}


def status_from_issues(issues: list[ExecutionIssue], *, skipped: bool = False) -> TaskStatus:
    """S2: evaluate-only → eval_error; run/setup/collect → run_error; both → run_error_or_eval_error."""
    if skipped:
        return "skipped"
    phases = {i.phase for i in issues if i.severity != "warning" and i.phase != "cleanup"}
    run_side = bool(phases & {"setup", "run", "collect"})
    eval_side = "evaluate" in phases
    if run_side and eval_side:
        return "run_error_or_eval_error"
    if run_side:
        return "run_error"
    if eval_side:
        return "eval_error"
    return "completed"


class MetricDisplay(IRStruct, frozen=True):
    label: str | None = None
    description: str | None = None
    unit: str | None = None
    precision: int | None = None


class MetricSpec(IRStruct, frozen=True):
    kind: Literal["binary_success", "scalar"]
    reducers: list[str] = []
    primary: bool = False
    role: Literal["success", "score", "component"] = "component"
    display: MetricDisplay = MetricDisplay()
    #: ``[low, high]`` every observation lies in (``[0, 1]`` for binary metrics, always); the
    #: summary's 95 % intervals never leave it. Unset: the range of the observed values.
    range: tuple[float, float] | None = None

    def bounds(self) -> tuple[float, float] | None:
        """The declared range (binary metrics: [0, 1])."""
        return (0.0, 1.0) if self.kind == "binary_success" else self.range


class MetricContract(IRStruct, frozen=True):
    """Declared observations; exactly one primary, which is `correct` or `score`."""

    metrics: dict[str, MetricSpec]

    def primary_id(self) -> str:
        prim = [k for k, v in self.metrics.items() if v.primary]
        if len(prim) != 1 or prim[0] not in ("correct", "score"):
            raise ValueError("a MetricContract needs exactly one primary metric, `correct` or `score`")
        return prim[0]

    @classmethod
    def binary(cls, primary: str = "correct", *extra_binary: str, scalars: tuple[str, ...] = ()) -> MetricContract:
        metrics: dict[str, MetricSpec] = {
            primary: MetricSpec(kind="binary_success", reducers=["avg", "pass"], primary=True, role="success")
        }
        for name in extra_binary:
            metrics[name] = MetricSpec(kind="binary_success", reducers=["avg", "pass"])
        for name in scalars:
            metrics[name] = MetricSpec(kind="scalar", reducers=["avg"])
        return cls(metrics=metrics)

    @classmethod
    def scalar(
        cls, *extra_scalars: str, binary: tuple[str, ...] = (), score_range: tuple[float, float] | None = None
    ) -> MetricContract:
        metrics: dict[str, MetricSpec] = {
            "score": MetricSpec(kind="scalar", reducers=["avg"], primary=True, role="score", range=score_range)
        }
        for name in binary:
            metrics[name] = MetricSpec(kind="binary_success", reducers=["avg", "pass"])
        for name in extra_scalars:
            metrics[name] = MetricSpec(kind="scalar", reducers=["avg"])
        return cls(metrics=metrics)
