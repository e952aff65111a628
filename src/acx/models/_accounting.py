"""Prices, costs and limits (pure).

A price is per million tokens. Cached prompt tokens cost ``cached_input_per_mtok`` when given,
else the input price. An unknown price makes the cost unknown (``None``) — never 0 — and a total
that includes one unknown cost is unknown too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acx.models._types import Usage

__all__ = ["Limits", "Price", "UsageTotals", "cost_of"]


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None


def cost_of(usage: Usage | None, price: Price | None) -> float | None:
    """USD cost of one call; ``None`` when the usage or the price is unknown."""
    if usage is None or price is None:
        return None
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    cached_rate = price.cached_input_per_mtok if price.cached_input_per_mtok is not None else price.input_per_mtok
    return (
        (usage.prompt_tokens - cached) * price.input_per_mtok
        + cached * cached_rate
        + usage.completion_tokens * price.output_per_mtok
    ) / 1_000_000


@dataclass(frozen=True)
class Limits:
    """Per-task model limits (all roles together). ``None`` = no limit."""

    max_tokens_total: int | None = None
    max_model_calls: int | None = None
    max_cost_usd: float | None = None

    def refusal(self, totals: UsageTotals) -> str | None:
        """Why the next call is refused (a limit already reached), or ``None``.

        Tokens and cost are known only after a call, so the call that *would* cross the limit is
        the first one made once the used amount has reached it; the call count is exact."""
        if self.max_model_calls is not None and totals.calls >= self.max_model_calls:
            return f"max_model_calls = {self.max_model_calls} reached ({totals.calls} calls made)"
        if self.max_tokens_total is not None and totals.usage.total_tokens >= self.max_tokens_total:
            return f"max_tokens_total = {self.max_tokens_total} reached ({totals.usage.total_tokens} tokens used)"
        if self.max_cost_usd is not None:
            if totals.cost_unknown:
                return f"max_cost_usd = {self.max_cost_usd:g} cannot be enforced: a call's cost is unknown"
            if totals.cost_usd >= self.max_cost_usd:
                return f"max_cost_usd = {self.max_cost_usd:g} reached (${totals.cost_usd:.6f} spent)"
        return None


@dataclass
class UsageTotals:
    """Running totals of a session, a task or a run."""

    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    #: Some call's cost is unknown (no price, or no usage reported): the total cost is unknown.
    cost_unknown: bool = False
    #: Calls whose server reported no usage.
    calls_without_usage: int = 0
    #: Calls that failed for good (they count as calls; they have no usage and no cost).
    failed_calls: int = 0
    #: Calls answered from the model-call cache (or a replayed run): counted in ``calls`` and
    #: ``usage`` (what the agent consumed, which the call and token limits count) but not in
    #: ``cost_usd`` (what was paid, which the cost limits count).
    cached_calls: int = 0
    #: Tokens and cost of the cached calls: what was not paid.
    unpaid_tokens: int = 0
    unpaid_cost_usd: float = 0.0
    unpaid_cost_unknown: bool = False

    def add_failed(self) -> None:
        self.calls += 1
        self.failed_calls += 1

    def add(self, usage: Usage | None, cost: float | None, *, cached: bool = False) -> None:
        self.calls += 1
        if usage is None:
            self.calls_without_usage += 1
        else:
            self.usage = self.usage + usage
        if cached:
            self.cached_calls += 1
            self.unpaid_tokens += usage.total_tokens if usage is not None else 0
            if cost is None:
                self.unpaid_cost_unknown = True
            else:
                self.unpaid_cost_usd += cost
        elif cost is None:
            self.cost_unknown = True
        else:
            self.cost_usd += cost

    def merge(self, other: UsageTotals) -> None:
        self.calls += other.calls
        self.usage = self.usage + other.usage
        self.cost_usd += other.cost_usd
        self.cost_unknown = self.cost_unknown or other.cost_unknown
        self.calls_without_usage += other.calls_without_usage
        self.failed_calls += other.failed_calls
        self.cached_calls += other.cached_calls
        self.unpaid_tokens += other.unpaid_tokens
        self.unpaid_cost_usd += other.unpaid_cost_usd
        self.unpaid_cost_unknown = self.unpaid_cost_unknown or other.unpaid_cost_unknown

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "model_calls": self.calls,
            **self.usage.to_dict(),
            "cost_usd": None if self.cost_unknown else round(self.cost_usd, 8),
            "calls_without_usage": self.calls_without_usage,
            "failed_calls": self.failed_calls,
        }
        if self.cached_calls:  # only when the cache answered: records of other runs are unchanged
            out["cached_calls"] = self.cached_calls
            out["unpaid_tokens"] = self.unpaid_tokens
            out["unpaid_cost_usd"] = None if self.unpaid_cost_unknown else round(self.unpaid_cost_usd, 8)
        return out
