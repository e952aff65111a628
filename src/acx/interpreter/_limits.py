"""Process-wide limits shared by every request of an orchestration.

* ``task_concurrency``: one global capacity limiter for physical attempts.
* ``provider_limits``: concurrent open sessions per provider (0 disables the limit).
* ``env_open_qps``: minimum interval ``1/qps`` between environment opens per provider (0 disables);
  the queue for this rate limit is not part of a setup deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

__all__ = ["Limits"]


class Limits:
    def __init__(
        self,
        task_concurrency: int,
        provider_limits: Mapping[str, int] | None = None,
        env_open_qps: Mapping[str, float] | None = None,
    ) -> None:
        self.attempts = trio.CapacityLimiter(max(1, task_concurrency))
        self._provider_limits = dict(provider_limits or {})
        self._qps = dict(env_open_qps or {})
        self._providers: dict[str, trio.CapacityLimiter] = {}
        self._open_locks: dict[str, trio.Lock] = {}
        self._last_open: dict[str, float] = {}

    def provider(self, env_id: str) -> trio.CapacityLimiter | None:
        limit = self._provider_limits.get(env_id, 0)
        if limit <= 0:
            return None
        if env_id not in self._providers:
            self._providers[env_id] = trio.CapacityLimiter(limit)
        return self._providers[env_id]

    @asynccontextmanager
    async def provider_slot(self, env_id: str) -> AsyncIterator[None]:
        limiter = self.provider(env_id)
        if limiter is None:
            yield
            return
        async with limiter:
            yield

    async def wait_open_turn(self, env_id: str) -> None:
        """Space environment opens of ``env_id`` at least ``1/qps`` seconds apart."""
        qps = self._qps.get(env_id, 0.0)
        if qps <= 0:
            return
        lock = self._open_locks.setdefault(env_id, trio.Lock())
        async with lock:
            interval = 1.0 / qps
            last = self._last_open.get(env_id)
            now = trio.current_time()
            if last is not None and now - last < interval:
                await trio.sleep(interval - (now - last))
            self._last_open[env_id] = trio.current_time()
