"""Run-time half of the ``exact_match`` benchmark: prepare the prompt, score by normalised match.

Normalisation follows the benchmark config (``case_sensitive``, ``normalize_whitespace``,
``strip_punctuation``) and is applied to both sides. The reference answer may be a string, a
number, or a list of acceptable answers. The agent never sees the answer (B1): it stays in
``TaskSpec.ground_truth`` and is published only in ``RunResult.ground_truth``.
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING, Any

from acx.components._network_notice import with_network_notice
from acx.ir import ExecutionIssue, ExecutionPlan, PreparedTask, RunRequest, RunResult, TaskInput, TaskSpec

if TYPE_CHECKING:
    from acx.drivers import Session

__all__ = ["ExactMatchRuntime", "normalize_answer"]

_WS = re.compile(r"\s+")


def normalize_answer(value: Any, *, case_sensitive: bool, normalize_whitespace: bool, strip_punctuation: bool) -> str:
    text = "" if value is None else str(value)
    if normalize_whitespace:
        text = _WS.sub(" ", text).strip()
    if strip_punctuation:
        text = text.strip(string.punctuation + " ")
    if not case_sensitive:
        text = text.casefold()
    return text


class ExactMatchRuntime:
    config: Any

    async def prepare_task(
        self, task: TaskSpec, session: Session | None, req: RunRequest, plan: ExecutionPlan
    ) -> PreparedTask:
        prompt = with_network_notice(task.question, plan)
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            input=TaskInput(prompt=prompt, system_prompt=getattr(self.config, "system_prompt", None)),
            metadata={"benchmark": "exact_match"},
        )

    def is_correct(self, answer: Any, reference: Any) -> bool:
        c = self.config
        opts = {
            "case_sensitive": c.case_sensitive,
            "normalize_whitespace": c.normalize_whitespace,
            "strip_punctuation": c.strip_punctuation,
        }
        got = normalize_answer(answer, **opts)
        refs = reference if isinstance(reference, list) else [reference]
        return any(got == normalize_answer(r, **opts) for r in refs)

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

        issues = list(result.issues)
        if result.final_answer is None or str(result.final_answer).strip() == "":
            issues.append(
                ExecutionIssue(
                    severity="warning",
                    phase="evaluate",
                    code="output_missing",
                    message="the harness produced no answer; scored as incorrect",
                )
            )
        correct = self.is_correct(result.final_answer, task.ground_truth)
        return msgspec.structs.replace(
            result, metrics={"correct": correct}, ground_truth=task.ground_truth, issues=issues
        )
