"""Which cluster node gets the next sandbox: pure bookkeeping, no Ray and no I/O (the driver side
wraps it in :class:`acx.cluster._driver.Dispatcher`, which waits on it).

Per node:

* **capacity** ``acx_slots``: sandboxes open on it at once, whatever their provider;
* **per-node provider limits** (``runtime.cluster.provider_limits``, default: the run's
  ``runtime.provider_limits``): sandboxes of one provider open on it at once;
* **per-node open rate** (``runtime.cluster.env_open_qps``, default: the run's
  ``runtime.env_open_qps``): a token bucket per provider, one token, refilled at ``qps`` per
  second (so opens on one node are at least ``1/qps`` apart, like the run-wide limit);
* **labels**: the providers it serves (declared ``acx_driver_<id>`` resources, minus those whose
  ``prepare`` failed there) and the images it lacks (reported by its provider). A sandbox goes only
  to a node that meets its :class:`Need`.

A node is chosen only when it has a free slot, a free provider slot and an open token: otherwise
the caller waits (back-pressure), so no node ever holds a queue of sandboxes it cannot open yet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Need", "NodeState", "Placer", "TokenBucket"]


@dataclass(frozen=True)
class Need:
    """What a sandbox needs of its node: the provider that opens it, and an image it must have."""

    driver: str
    image: str | None = None

    def describe(self) -> str:
        return f"driver {self.driver}" + (f" with image {self.image}" if self.image else "")


class TokenBucket:
    """At most ``rate`` takes per second, with a burst of one (the run-wide ``env_open_qps`` is a
    minimum interval; a node's is the same, counted on that node). ``rate`` 0: unlimited."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = 1.0
        self.stamp: float | None = None

    def _refill(self, now: float) -> None:
        if self.stamp is not None:
            self.tokens = min(1.0, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def ready_at(self, now: float) -> float:
        """The earliest time (≥ ``now``) a take succeeds."""
        if self.rate <= 0:
            return now
        self._refill(now)
        return now if self.tokens >= 1.0 - 1e-9 else now + (1.0 - self.tokens) / self.rate

    def take(self, now: float) -> None:
        if self.rate <= 0:
            return
        self._refill(now)
        self.tokens -= 1.0


@dataclass
class NodeState:
    """One node as placement sees it."""

    name: str
    slots: int
    #: Providers the node declares (``acx_driver_<id>`` resources); None: it declares none (any).
    drivers: frozenset[str] | None = None
    alive: bool = True
    used: int = 0
    per_provider: dict[str, int] = field(default_factory=dict)
    #: provider → why it cannot serve here (its ``prepare`` failed on this node).
    refused: dict[str, str] = field(default_factory=dict)
    #: (provider, image) → whether the node's provider has it (absent: not asked yet).
    images: dict[tuple[str, str], bool] = field(default_factory=dict)
    buckets: dict[str, TokenBucket] = field(default_factory=dict)

    def why_not(self, need: Need) -> str | None:
        """Why this node cannot take ``need`` (whatever its load), or None when it can."""
        if not self.alive:
            return "lost"
        if self.drivers is not None and need.driver not in self.drivers:
            return f"serves only {', '.join(sorted(self.drivers)) or 'no driver'}"
        if need.driver in self.refused:
            return f"{need.driver} unusable there: {self.refused[need.driver]}"
        if need.image is not None and self.images.get((need.driver, need.image)) is False:
            return f"image {need.image} not present"
        return None


class Placer:
    """The node table and every per-node limit; :meth:`choose` + :meth:`take` place a sandbox."""

    def __init__(
        self,
        nodes: Iterable[NodeState],
        provider_limits: Mapping[str, int] | None = None,
        open_qps: Mapping[str, float] | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.provider_limits = dict(provider_limits or {})
        self.open_qps = dict(open_qps or {})

    def configure(self, provider_limits: Mapping[str, int], open_qps: Mapping[str, float]) -> None:
        """Per-node limits for providers not configured yet (the first run's setting wins in a
        process: nodes are shared by every request on the cluster)."""
        for k, v in provider_limits.items():
            self.provider_limits.setdefault(k, v)
        for k, q in open_qps.items():
            self.open_qps.setdefault(k, q)

    def node(self, name: str) -> NodeState:
        return next(n for n in self.nodes if n.name == name)

    def unmet(self, need: Need) -> str | None:
        """A message naming ``need`` and why each node cannot meet it, when none can; else None."""
        reasons = [(n.name, n.why_not(need)) for n in self.nodes]
        if any(r is None for _, r in reasons):
            return None
        where = "; ".join(f"{name}: {why}" for name, why in reasons) or "the cluster has no acx node"
        return f"no node of the cluster meets the need {need.describe()} ({where})"

    def _free(self, node: NodeState, provider: str) -> bool:
        limit = self.provider_limits.get(provider, 0)
        return node.used < node.slots and (limit <= 0 or node.per_provider.get(provider, 0) < limit)

    def _bucket(self, node: NodeState, provider: str) -> TokenBucket:
        bucket = node.buckets.get(provider)
        if bucket is None:
            bucket = node.buckets[provider] = TokenBucket(self.open_qps.get(provider, 0.0))
        return bucket

    def choose(self, need: Need, now: float) -> tuple[NodeState | None, float]:
        """``(node, now)``: take that node now; ``(None, t)``: nothing fits, try again at ``t`` (an
        open token comes) or when a sandbox is released (``t`` is ``inf`` when only a release
        helps). Among nodes that fit now, the one with the most free slots (spreads the load)."""
        best: NodeState | None = None
        soonest = math.inf
        for node in self.nodes:
            if node.why_not(need) is not None or not self._free(node, need.driver):
                continue
            at = self._bucket(node, need.driver).ready_at(now)
            if at > now:
                soonest = min(soonest, at)
            elif best is None or node.slots - node.used > best.slots - best.used:
                best = node
        return (best, now) if best is not None else (None, soonest)

    def take(self, node: NodeState, need: Need, now: float) -> None:
        node.used += 1
        node.per_provider[need.driver] = node.per_provider.get(need.driver, 0) + 1
        self._bucket(node, need.driver).take(now)

    def release(self, node: NodeState, need: Need) -> None:
        node.used = max(0, node.used - 1)
        node.per_provider[need.driver] = max(0, node.per_provider.get(need.driver, 0) - 1)
