"""Process-wide limits shared by every request of an orchestration.

* ``task_concurrency``: one global capacity limiter for physical attempts.
* ``provider_limits``: concurrent open sessions per provider (0 disables the limit).
* ``env_open_qps``: minimum interval ``1/qps`` between environment opens per provider (0 disables);
  the queue for this rate limit is not part of a setup deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

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

    def provider_slot(self, env_id: str) -> AbstractAsyncContextManager[Any]:
        """A slot of ``env_id``'s session limit (an async context manager; a no-op when unlimited)."""
        limiter = self.provider(env_id)
        return _NO_LIMIT if limiter is None else limiter

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


class _NoLimit:
    """``async with`` that does nothing (cheaper than a generator-based context manager)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_LIMIT = _NoLimit()
