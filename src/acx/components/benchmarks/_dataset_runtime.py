"""Run-time half of the ``dataset`` benchmark: build the prompt, place files, run the scorers.

The prompt is the input (or ``prompt_template`` with ``{input}``); a multiple-choice task lists
its choices lettered A, B, … in this attempt's order (shuffled per attempt with
``shuffle_choices``). The target never reaches the agent (B1). Every scorer's outcome is kept
with the attempt in ``RunResult.extra["scores"]`` (a judge's transcript included) and the shown
choice order in ``extra["choices"]``; judge token usage is ``telemetry["judge_usage"]``, apart
from the agent's own ``usage``.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import urllib.parse
from typing import TYPE_CHECKING, Any

from acx.components._network_notice import with_network_notice
from acx.components.datasets import DEFAULT_MC_TEMPLATE, choice_order, letters_for, render_choices, target_letters
from acx.components.scorers import Score, ScoreContext, targets_of
from acx.ir import (
    ExecutionIssue,
    ExecutionPlan,
    FileRef,
    Message,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskSpec,
)

if TYPE_CHECKING:
    from acx.drivers import Session

__all__ = ["DatasetRuntime", "decode_data_uri", "sum_usage"]


def decode_data_uri(uri: str) -> bytes:
    """``data:[<mime>][;base64],<data>`` → bytes (ValueError when malformed)."""
    head, sep, data = uri.partition(",")
    if not sep or not head.startswith("data:"):
        raise ValueError("not a data: URI")
    if head.endswith(";base64"):
        try:
            return base64.b64decode(data, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"bad base64 in data: URI: {exc}") from None
    return urllib.parse.unquote_to_bytes(data)


def sum_usage(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Add token counts (and cost) of several usage records; other keys are dropped."""
    total: dict[str, Any] = {}
    for usage in parts:
        for key, value in usage.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return total


class DatasetRuntime:
    config: Any
    scorers: Any

    def _order(self, task: TaskSpec, attempt: int) -> list[int] | None:
        choices = task.metadata.get("choices")
        if not choices:
            return None
        return choice_order(
            len(choices),
            shuffle=self.config.shuffle_choices,
            seed=self.config.seed,
            task_id=task.task_id,
            attempt=attempt,
        )

    def render_prompt(self, task: TaskSpec, order: list[int] | None) -> str:
        template = self.config.prompt_template
        values = {"input": task.question}
        if order is not None:
            choices = task.metadata["choices"]
            values["choices"] = render_choices(choices, order)
            values["letters"] = ", ".join(letters_for(len(choices)))
            template = template or DEFAULT_MC_TEMPLATE
        if template is None:
            return task.question
        import re

        return re.sub(r"\{(input|choices|letters)\}", lambda m: values.get(m.group(1), m.group(0)), template)

    async def prepare_task(
        self, task: TaskSpec, session: Session | None, req: RunRequest, plan: ExecutionPlan
    ) -> PreparedTask:
        order = self._order(task, plan.attempt)
        prompt = with_network_notice(self.render_prompt(task, order), plan)
        messages = [Message(role=m["role"], content=m["content"]) for m in task.metadata.get("messages", [])]
        if messages:  # the rendered prompt (template, notice) replaces the last user message
            last = max(i for i, m in enumerate(messages) if m.role == "user")
            messages[last] = Message(role="user", content=prompt)
        files = await self._place_files(task, session)
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            input=TaskInput(
                prompt=prompt,
                system_prompt=task.metadata.get("system_prompt") or self.config.system_prompt,
                messages=messages,
                files=files,
            ),
            metadata={"benchmark": getattr(self, "id", "dataset"), **({"choice_order": order} if order else {})},
        )

    async def _place_files(self, task: TaskSpec, session: Session | None) -> list[FileRef]:
        files: dict[str, str] = task.metadata.get("files") or {}
        if not files:
            return []
        if session is None:
            from acx.errors import AcxRuntimeError

            raise AcxRuntimeError(f"task {task.task_id} has files to place but the run has no sandbox session")
        placed = []
        for dest, source in files.items():
            target = dest if posixpath.isabs(dest) or session.workdir is None else posixpath.join(session.workdir, dest)
            if source.startswith("data:"):
                await session.write_bytes(target, decode_data_uri(source))
            else:
                await session.upload(source, target)
            placed.append(FileRef(path=target))
        return placed

    def score_context(self, task: TaskSpec, prepared: PreparedTask, req: RunRequest) -> ScoreContext:
        choices = task.metadata.get("choices") or []
        order = prepared.metadata.get("choice_order")
        shown = [choices[i] for i in order] if order else list(choices)
        letters = target_letters(task.ground_truth, choices, order) if order else []
        return ScoreContext(task=task, question=task.question, choices=shown, target_letters=letters, model=req.model)

    async def evaluate(
        self,
        task: TaskSpec,
        prepared: PreparedTask,
        result: RunResult,
        req: RunRequest,
        plan: ExecutionPlan,
        session: Session | None = None,
    ) -> RunResult:
        import msgspec

        ctx = self.score_context(task, prepared, req)
        targets = list(ctx.target_letters) if ctx.choices else targets_of(task.ground_truth)
        issues = list(result.issues)
        if result.final_answer is None or str(result.final_answer).strip() == "":
            issues.append(
                ExecutionIssue(
                    severity="warning",
                    phase="evaluate",
                    code="output_missing",
                    message="the harness produced no answer; scored as given (empty)",
                )
            )
        metrics: dict[str, bool | int | float] = {}
        records: dict[str, Any] = {}
        usages: list[dict[str, Any]] = []
        for bound in self.scorers:
            score = await self._run_scorer(bound, result.final_answer, targets, ctx)
            issues += score.issues
            if score.value is not None:
                metrics[bound.metric] = score.value
            records[bound.metric] = {
                "scorer": bound.label,
                "value": score.value,
                "extracted": score.extracted,
                "explanation": score.explanation,
                **score.record,
            }
            if score.usage:
                usages.append(score.usage)
        extra = {**result.extra, "scores": records}
        if ctx.choices:
            extra["choices"] = {
                "shown": ctx.choices,
                "order": prepared.metadata.get("choice_order"),
                "correct": list(ctx.target_letters),
            }
        telemetry = dict(result.telemetry)
        if usages:
            telemetry["judge_usage"] = sum_usage(usages)
        return msgspec.structs.replace(
            result, metrics=metrics, ground_truth=task.ground_truth, issues=issues, extra=extra, telemetry=telemetry
        )

    async def _run_scorer(self, bound: Any, answer: Any, targets: list[str], ctx: ScoreContext) -> Score:
        try:
            score: Score = await bound.scorer.score(answer, targets, ctx)
            return score
        except Exception as exc:  # a plugin scorer's bug is this attempt's evaluation error, not a crash
            return Score(
                None,
                issues=[
                    ExecutionIssue(
                        severity="error",
                        phase="evaluate",
                        code="scorer_failed",
                        message=f"scorer {bound.label} raised {type(exc).__name__}: {str(exc)[:200]}",
                    )
                ],
            )
