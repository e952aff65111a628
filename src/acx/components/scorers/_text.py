"""Built-in text scorers: exact, includes, match, regex, numeric, f1. Pure functions of the answer."""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from acx.components.scorers._base import Score, ScoreContext, Scorer, ScorerConfig, as_text

__all__ = [
    "ExactScorer",
    "F1Scorer",
    "GaiaScorer",
    "IncludesScorer",
    "MatchScorer",
    "NumericScorer",
    "RegexScorer",
    "find_numbers",
    "gaia_match",
    "normalize_text",
    "parse_number",
]

_WS = re.compile(r"\s+")
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


def normalize_text(value: Any, *, case_sensitive: bool, normalize_whitespace: bool, strip_punctuation: bool) -> str:
    """The same normalisation ``exact_match`` applies (kept identical for compatibility)."""
    text = as_text(value)
    if normalize_whitespace:
        text = _WS.sub(" ", text).strip()
    if strip_punctuation:
        text = text.strip(string.punctuation + " ")
    if not case_sensitive:
        text = text.casefold()
    return text


def parse_number(text: str) -> float | None:
    """``text`` as one number (``1,234.5``, ``$3``, ``40%`` accepted), else None."""
    t = text.strip().strip("$%").replace(",", "").strip()
    try:
        value = float(t)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def find_numbers(text: str) -> list[float]:
    """Every number written in ``text``, in order (thousands separators allowed)."""
    out = []
    for m in _NUMBER.finditer(text):
        v = parse_number(m.group(0))
        if v is not None:
            out.append(v)
    return out


class _Normalising(ScorerConfig, frozen=True, kw_only=True):
    case_sensitive: Annotated[bool, _d("compare case-sensitively")] = False
    normalize_whitespace: Annotated[bool, _d("collapse runs of whitespace and strip both ends")] = True
    strip_punctuation: Annotated[bool, _d("ignore leading/trailing punctuation such as `.` or `!`")] = False


class ExactConfig(_Normalising, frozen=True, kw_only=True):
    numeric: Annotated[
        bool, _d("a numeric target also matches the same number written differently (`1,000` = `1000.0`)")
    ] = False


def _norm(cfg: _Normalising, value: Any) -> str:
    return normalize_text(
        value,
        case_sensitive=cfg.case_sensitive,
        normalize_whitespace=cfg.normalize_whitespace,
        strip_punctuation=cfg.strip_punctuation,
    )


def _same_number(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


class ExactScorer(Scorer):
    id: ClassVar[str] = "exact"
    description: ClassVar[str] = "The answer equals a target after normalisation (case, whitespace, punctuation)."
    config_class = ExactConfig
    config: ExactConfig

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        got = _norm(self.config, answer)
        for t in targets:
            if got == _norm(self.config, t):
                return Score(True, extracted=got)
            if self.config.numeric and _same_number(parse_number(got), parse_number(t)):
                return Score(True, extracted=got)
        return Score(False, extracted=got)


class IncludesConfig(_Normalising, frozen=True, kw_only=True):
    pass


class IncludesScorer(Scorer):
    id: ClassVar[str] = "includes"
    description: ClassVar[str] = "A target appears somewhere in the answer (after normalisation)."
    config_class = IncludesConfig
    config: IncludesConfig

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        got = _norm(self.config, answer)
        hit = next((t for t in targets if _norm(self.config, t) and _norm(self.config, t) in got), None)
        return Score(hit is not None, extracted=hit)


class MatchConfig(_Normalising, frozen=True, kw_only=True):
    location: Annotated[Literal["start", "end", "any", "exact"], _d("where in the answer the target must be")] = "end"
    numeric: Annotated[
        bool, _d("a numeric target is compared by value with the number at that location (first/last/any/whole)")
    ] = True


class MatchScorer(Scorer):
    id: ClassVar[str] = "match"
    description: ClassVar[str] = "The target is at the start, the end, anywhere in or all of the answer; numeric-aware."
    config_class = MatchConfig
    config: MatchConfig

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        c = self.config
        got = _norm(c, answer)
        for t in targets:
            want = _norm(c, t)
            number = parse_number(t) if c.numeric else None
            if number is not None:
                found = self._numbers_at(got)
                if any(_same_number(v, number) for v in found):
                    return Score(True, extracted=number)
                continue
            if want and self._text_at(got, want):
                return Score(True, extracted=want)
        return Score(False, extracted=got)

    def _numbers_at(self, text: str) -> list[float]:
        loc = self.config.location
        if loc == "exact":
            whole = parse_number(text)
            return [] if whole is None else [whole]
        numbers = find_numbers(text)
        if not numbers or loc == "any":
            return numbers
        return [numbers[0]] if loc == "start" else [numbers[-1]]

    def _text_at(self, text: str, want: str) -> bool:
        loc = self.config.location
        if loc == "exact":
            return text == want
        if loc == "start":
            return text.startswith(want)
        if loc == "end":
            return text.rstrip(string.punctuation + " ").endswith(want) or text.endswith(want)
        return want in text


class RegexConfig(_Normalising, frozen=True, kw_only=True):
    pattern: Annotated[str, _d("regular expression applied to the answer (Python syntax); its last match counts")]
    group: Annotated[
        Annotated[int, msgspec.Meta(ge=0)] | None, _d("group compared with the target (default: 1 if any, else 0)")
    ] = None
    ignore_case: Annotated[bool, _d("match the pattern case-insensitively")] = True


class RegexScorer(Scorer):
    id: ClassVar[str] = "regex"
    description: ClassVar[str] = "Extract with a regular expression, then compare the extraction with the target."
    config_class = RegexConfig
    config: RegexConfig

    def __init__(self, config: RegexConfig) -> None:
        super().__init__(config)
        # Validated at plan time (scorer construction): a bad pattern is a located config error.
        self.regex = re.compile(config.pattern, re.IGNORECASE if config.ignore_case else 0)
        group = config.group if config.group is not None else (1 if self.regex.groups else 0)
        if group > self.regex.groups:
            raise ValueError(f"`group` {group} but the pattern has {self.regex.groups} group(s)")
        self.group_index = group

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        matches = list(self.regex.finditer(as_text(answer)))
        if not matches:
            return Score(False, explanation="the pattern does not match the answer")
        extracted = matches[-1].group(self.group_index) or ""
        got = _norm(self.config, extracted)
        return Score(any(got == _norm(self.config, t) for t in targets), extracted=extracted)


class NumericConfig(ScorerConfig, frozen=True, kw_only=True):
    tolerance: Annotated[float, msgspec.Meta(ge=0, description="absolute tolerance")] = 0.0
    relative_tolerance: Annotated[float, msgspec.Meta(ge=0, description="relative tolerance (0.01 = 1 %)")] = 0.0
    extract: Annotated[
        Literal["last", "first", "whole"], _d("which number of the answer counts (whole: the answer must be a number)")
    ] = "last"


class NumericScorer(Scorer):
    id: ClassVar[str] = "numeric"
    description: ClassVar[str] = "The answer's number is within a tolerance of the numeric target."
    config_class = NumericConfig
    config: NumericConfig

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        from acx.ir import ExecutionIssue

        c = self.config
        text = as_text(answer)
        if c.extract == "whole":
            whole = parse_number(text)
            got = whole
        else:
            numbers = find_numbers(text)
            got = (numbers[-1] if c.extract == "last" else numbers[0]) if numbers else None
        wanted = [parse_number(t) for t in targets]
        if not any(w is not None for w in wanted):
            return Score(
                None,
                issues=[
                    ExecutionIssue(
                        severity="error",
                        phase="evaluate",
                        code="scorer_target_invalid",
                        message=f"scorer numeric: the task's target is not a number ({', '.join(targets)[:80]!r})",
                    )
                ],
            )
        if got is None:
            return Score(False, explanation="no number in the answer")
        ok = any(
            w is not None and math.isclose(got, w, rel_tol=c.relative_tolerance, abs_tol=c.tolerance) for w in wanted
        )
        return Score(ok or any(_same_number(got, w) for w in wanted), extracted=got)


def _f1_tokens(text: str) -> list[str]:
    text = text.casefold()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return _ARTICLES.sub(" ", text).split()


def token_f1(answer: str, target: str) -> float:
    got, want = _f1_tokens(answer), _f1_tokens(target)
    if not got or not want:
        return float(got == want)
    common = sum((Counter(got) & Counter(want)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


class F1Config(ScorerConfig, frozen=True, kw_only=True):
    pass


class F1Scorer(Scorer):
    id: ClassVar[str] = "f1"
    description: ClassVar[str] = "Token-level F1 between answer and target (SQuAD normalisation), best over targets."
    config_class = F1Config
    kind = "scalar"

    def metric_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        text = as_text(answer)
        return Score(max((token_f1(text, t) for t in targets), default=0.0))


_FINAL = re.compile(r"FINAL ANSWER\s*:\s*(.*)", re.IGNORECASE | re.DOTALL)


def _gaia_number(text: str) -> float | None:
    for ch in ("$", "%", ","):
        text = text.replace(ch, "")
    try:
        return float(text.strip())
    except ValueError:
        return None


def _gaia_str(text: str, *, punctuation: bool) -> str:
    text = re.sub(r"\s", "", text).lower()
    return text.translate(str.maketrans("", "", string.punctuation)) if punctuation else text


def gaia_match(answer: str, truth: str) -> bool:
    """GAIA's official ``question_scorer``: numbers by value, comma/semicolon lists element-wise,
    strings without whitespace, case or punctuation."""
    if _gaia_number(truth) is not None:
        return _gaia_number(answer) == _gaia_number(truth)
    if any(ch in truth for ch in ",;"):
        want, got = re.split(r"[,;]", truth), re.split(r"[,;]", answer)
        if len(want) != len(got):
            return False
        for w, g in zip(want, got, strict=True):
            if _gaia_number(w) is not None:
                if _gaia_number(g) != _gaia_number(w):
                    return False
            elif _gaia_str(g, punctuation=False) != _gaia_str(w, punctuation=False):
                return False
        return True
    return _gaia_str(answer, punctuation=True) == _gaia_str(truth, punctuation=True)


class GaiaConfig(ScorerConfig, frozen=True, kw_only=True):
    pass


class GaiaScorer(Scorer):
    id: ClassVar[str] = "gaia"
    description: ClassVar[str] = (
        "GAIA's scorer: the text after `FINAL ANSWER:` (or the whole answer) against the target."
    )
    config_class = GaiaConfig

    def check(self, answer: Any, targets: Sequence[str], ctx: ScoreContext) -> Score:
        text = as_text(answer)
        final = _FINAL.findall(text)
        got = final[-1].strip() if final else text.strip()
        return Score(any(gaia_match(got, t) for t in targets), extracted=got)
