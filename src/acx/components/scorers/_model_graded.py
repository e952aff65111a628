"""``model_graded``: a grader model reads the question, the answer and the target and grades it.

The grader is the ``grader`` model role: the scorer's ``model`` (id, base_url, api_key as a
``${VAR}`` reference, api_protocol, params), or the request's model when none is given. The call
goes through a :class:`GraderClient`; the default one calls the model layer
(:class:`acx.models.ModelClient`, see :mod:`acx.components.scorers._grader_client`); a
``GatewayGrader`` sends it through a run's gateway session instead.

Outcomes, never a silent 0:

- a grade the pattern finds and ``grades`` maps → the score, with the judge transcript kept with
  the attempt (``RunResult.extra["scores"][name]["judge"]``) and the judge's usage counted apart
  (``RunResult.telemetry["judge_usage"]``);
- an answer whose grade cannot be parsed → no score + ERROR ``judge_invalid_output``;
- the grader failing (HTTP error, unreachable, malformed body) or exceeding ``timeout_seconds`` →
  no score + ERROR ``judge_failed`` — an evaluation error, the attempt is unavailable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, Protocol

import msgspec

from acx.components.scorers._base import Score, ScoreContext, Scorer, ScorerConfig, as_text
from acx.ir import ExecutionIssue, ModelSpec

__all__ = [
    "RUBRICS",
    "GraderClient",
    "GraderError",
    "GraderReply",
    "ModelGradedConfig",
    "ModelGradedScorer",
    "Rubric",
    "render_template",
]


@dataclass(frozen=True)
class Rubric:
    """A rubric template (package data under ``rubrics/``) with its grade pattern and values."""

    file: str
    grade_pattern: str
    grades: dict[str, float]

    @property
    def template(self) -> str:
        from importlib.resources import files

        return files("acx.components.scorers").joinpath("rubrics", self.file).read_text(encoding="utf-8")


#: Built-in rubrics by name (``template: hle`` …); a custom template is any other string.
RUBRICS: dict[str, Rubric] = {
    "default": Rubric("default.txt", r"GRADE\s*:\s*([CPI])\b", {"C": 1.0, "P": 0.5, "I": 0.0}),
    "hle": Rubric("extract_judge.txt", r"correct\s*:\s*\**\s*(yes|no)\b", {"yes": 1.0, "no": 0.0}),
    "browsecomp": Rubric("extract_judge.txt", r"correct\s*:\s*\**\s*(yes|no)\b", {"yes": 1.0, "no": 0.0}),
    "simpleqa": Rubric(
        "simpleqa.txt",
        r"^\s*\(?([ABC])\)?\s*$|\b([ABC])\s*:\s*(?:CORRECT|INCORRECT|NOT_ATTEMPTED)",
        {"A": 1.0, "B": 0.0, "C": 0.0},
    ),
    "xbench": Rubric("xbench.txt", r"结论\s*[:：]\s*\**\s*(正确|错误)", {"正确": 1.0, "错误": 0.0}),
}


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class GraderModel(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The ``grader`` role's model (a ModelSpec subset)."""

    id: Annotated[str, _d("grader model id")]
    base_url: Annotated[str, _d("OpenAI-compatible endpoint base URL (may be a ${VAR} reference)")]
    api_key: Annotated[str | None, _d("API key as a ${VAR} reference; resolved only when grading")] = None
    api_protocol: Annotated[
        Literal["openai-chat", "openai-responses", "anthropic"], _d("wire protocol of the grader endpoint")
    ] = "openai-chat"
    params: Annotated[dict[str, Any], _d("inference parameters sent with every grading call")] = {}


class ModelGradedConfig(ScorerConfig, frozen=True, kw_only=True):
    template: Annotated[
        str,
        _d(
            "rubric: a built-in name (default, hle, browsecomp, simpleqa, xbench) or a template with "
            "{question}, {answer}, {target}, {criterion}, {partial}"
        ),
    ] = "default"
    grade_pattern: Annotated[
        str | None, _d("regex whose first non-empty group is the grade (default: the rubric's)")
    ] = None
    grades: Annotated[dict[str, float] | None, _d("grade → score (default: the rubric's)")] = None
    partial_credit: Annotated[bool, _d("scalar scores (grade values between 0 and 1 allowed)")] = False
    criterion: Annotated[str, _d("extra grading instruction put into {criterion}")] = ""
    model: Annotated[GraderModel | None, _d("the grader; default: the model under evaluation")] = None
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0, description="bound on one grading call")] = 120.0
    max_retries: Annotated[
        Annotated[int, msgspec.Meta(ge=0, le=10)], _d("retries of a failed grading call (429, 5xx, dropped)")
    ] = 2
    max_tokens: Annotated[Annotated[int, msgspec.Meta(ge=1)] | None, _d("grader completion token cap")] = None
    temperature: Annotated[Annotated[float, msgspec.Meta(ge=0)] | None, _d("grader temperature")] = 0.0


class GraderError(Exception):
    """The grader call failed; the message is safe to record (no key, no URL credentials)."""


@dataclass(frozen=True)
class GraderReply:
    text: str
    usage: dict[str, Any] = field(default_factory=dict)


class GraderClient(Protocol):
    """One chat completion for the grader role (the model gateway implements this)."""

    async def complete(
        self, model: ModelSpec, messages: list[dict[str, Any]], *, timeout_seconds: float
    ) -> GraderReply: ...


def render_template(template: str, values: dict[str, str]) -> str:
    """Fill ``{name}`` placeholders without ``str.format`` (answers may contain braces)."""
    return re.sub(
        r"\{(question|answer|target|criterion|partial|choices)\}", lambda m: values.get(m.group(1), ""), template
    )


class ModelGradedScorer(Scorer):
    id: ClassVar[str] = "model_graded"
    description: ClassVar[str] = "A grader model grades the answer against the target with a rubric."
    config_class = ModelGradedConfig
    calls_model: ClassVar[bool] = True
    config: ModelGradedConfig

    def __init__(self, config: ModelGradedConfig, client: GraderClient | None = None) -> None:
        super().__init__(config)
        rubric = RUBRICS.get(config.template)
        self.template = rubric.template if rubric else config.template
        if rubric is None and "{answer}" not in config.template:
            raise ValueError("a custom `template` must contain {answer} (the text being graded)")
        pattern = config.grade_pattern or (rubric.grade_pattern if rubric else RUBRICS["default"].grade_pattern)
        self.grade_re = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
        if self.grade_re.groups < 1:
            raise ValueError("`grade_pattern` needs a capturing group (the grade)")
        grades = (
            config.grades if config.grades is not None else (rubric.grades if rubric else RUBRICS["default"].grades)
        )
        self.grades = {k.casefold(): float(v) for k, v in grades.items()}
        if not self.grades:
            raise ValueError("`grades` must map at least one grade to a score")
        if not config.partial_credit and any(v not in (0.0, 1.0) for v in self.grades.values()):
            # A binary metric cannot hold 0.5: drop partial grades unless partial credit is on.
            self.grades = {k: v for k, v in self.grades.items() if v in (0.0, 1.0)}
        self.kind = "scalar" if config.partial_credit else "binary_success"  # type: ignore[misc]
        self._client = client

    def metric_kind(self) -> Any:
        return self.kind

    def metric_range(self) -> tuple[float, float]:
        # A grade's score is one of the configured ones (partial credit) or 0/1.
        return (min(self.grades.values()), max(self.grades.values()))

    def client(self) -> GraderClient:
        if self._client is None:
            from acx.components.scorers._grader_client import ModelLayerGrader

            self._client = ModelLayerGrader(max_retries=self.config.max_retries)
        return self._client

    def uses_run_models(self) -> bool:
        """Grades with the run's models (its ``grader`` role, else its ``agent``) rather than an
        endpoint of its own: the run then needs its model gateway during evaluation."""
        return self.config.model is None and self._client is None

    def route(self, ctx: ScoreContext) -> tuple[GraderClient, ModelSpec] | None:
        """Where the grading call goes: the scorer's own ``model`` directly (acx.models client);
        else the run's model gateway, role ``grader`` if the run defines it (``model.roles``),
        else ``agent``; outside a run, the request's model directly."""
        m = self.config.model
        if m is not None:
            spec = ModelSpec(
                id=m.id, base_url=m.base_url, api_key=m.api_key, api_protocol=m.api_protocol, params=dict(m.params)
            )
            return self.client(), spec
        if self._client is None:
            from acx.models import current_session

            session = current_session()
            if session is not None:
                from acx.components.scorers._grader_client import GatewayGrader

                roles = session.gateway.roles
                role = "grader" if "grader" in roles else "agent" if "agent" in roles else None
                if role is not None:
                    return GatewayGrader(session, role), ModelSpec(id=roles[role].endpoint.model)
        model = ctx.model if isinstance(ctx.model, ModelSpec) and ctx.model.base_url else None
        return (self.client(), model) if model is not None else None

    def messages(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> list[dict[str, Any]]:
        values = {
            "question": ctx.question,
            "answer": as_text(answer),
            "target": " | ".join(targets),
            "criterion": self.config.criterion,
            "partial": ', or "GRADE: P" if it is partially correct' if self.config.partial_credit else "",
            "choices": "\n".join(f"{chr(65 + i)}) {c}" for i, c in enumerate(ctx.choices)),
        }
        return [{"role": "user", "content": render_template(self.template, values)}]

    def parse_grade(self, text: str) -> tuple[str, float] | None:
        matches = list(self.grade_re.finditer(text))
        for m in reversed(matches):
            grade = next((g for g in m.groups() if g), None)
            if grade is not None and grade.casefold() in self.grades:
                return grade, self.grades[grade.casefold()]
        return None

    async def score(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        import trio

        route = self.route(ctx)
        if route is None:
            return _failed(
                "no grader model: set the scorer's `model` (id, base_url), a `grader` role in the run's "
                "`model.roles`, or give the run a model",
                {},
            )
        client, model = route
        messages = self.messages(answer, targets, ctx)
        params: dict[str, Any] = {}
        if self.config.max_tokens is not None:
            params["max_tokens"] = self.config.max_tokens
        if self.config.temperature is not None:
            params["temperature"] = self.config.temperature
        model = msgspec.structs.replace(model, params={**model.params, **params})
        via = "gateway" if type(client).__name__ == "GatewayGrader" else "direct"
        judge: dict[str, Any] = {"role": "grader", "model": model.id, "via": via, "messages": messages}
        timeout = self.config.timeout_seconds
        try:
            with trio.fail_after(timeout):
                reply = await client.complete(model, messages, timeout_seconds=timeout)
        except trio.TooSlowError:
            return _failed(f"the grader did not answer within {timeout:g} s", judge)
        except GraderError as exc:
            return _failed(f"the grader call failed: {exc}", judge)
        judge["output"] = reply.text
        judge["usage"] = reply.usage
        parsed = self.parse_grade(reply.text)
        if parsed is None:
            return Score(
                None,
                issues=[
                    ExecutionIssue(
                        severity="error",
                        phase="evaluate",
                        code="judge_invalid_output",
                        message="the grader's reply has no grade the rubric recognises "
                        f"(pattern {self.grade_re.pattern!r}, grades {sorted(self.grades)})",
                    )
                ],
                record={"judge": judge},
                usage=reply.usage,
            )
        grade, value = parsed
        judge["grade"] = grade
        result: bool | float = value if self.config.partial_credit else value >= 1.0
        return Score(
            result, extracted=grade, explanation=reply.text[-2000:], record={"judge": judge}, usage=reply.usage
        )


def _failed(message: str, judge: dict[str, Any]) -> Score:
    return Score(
        None,
        issues=[ExecutionIssue(severity="error", phase="evaluate", code="judge_failed", message=message)],
        record={"judge": judge} if judge else {},
    )
