"""Process-wide limits shared by every request of an orchestration.

* ``task_concurrency``: one global capacity limiter for physical attempts.
* ``provider_limits``: concurrent open sessions per provider (0 disables the limit).
* ``env_open_qps``: minimum interval ``1/qps`` between environment opens per provider (0 disables);
  the queue for this rate limit is not part of a setup deadline.
* open files: :func:`fit_open_files` raises the soft ``RLIMIT_NOFILE`` to the hard limit and
  lowers the concurrency (or refuses the run) when even that cannot carry it.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio

__all__ = ["OPEN_FILES_BASE", "OPEN_FILES_PER_TASK", "Limits", "fit_open_files"]

#: Descriptors acx holds whatever the concurrency (interpreter, trio, store files, logs), with room.
OPEN_FILES_BASE = 32
#: Descriptors one running task may hold (measured ~5 on host_process: the session directory, the
#: command's pipes, epoll and pidfd; a container's engine connections), with room.
OPEN_FILES_PER_TASK = 8


def fit_open_files(task_concurrency: int, tasks: int | None = None) -> tuple[int, str | None]:
    """The concurrency the open-files limit can carry, and a warning when it is below the one asked.

    Raises the soft ``RLIMIT_NOFILE`` to the hard limit first (issue 11 item 15: with a soft limit
    of 64, every task of a 64-way run failed with EMFILE). Only ``min(task_concurrency, tasks)``
    slots can be busy at once. Raises :class:`~acx.errors.AcxConfigError` (E0635) when not even one
    task fits.
    """
    import resource

    wanted = max(1, min(task_concurrency, tasks if tasks is not None else task_concurrency))
    need = OPEN_FILES_BASE + OPEN_FILES_PER_TASK * wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        target = max(soft, need) if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # a kernel cap below the hard limit (nr_open): keep the soft one
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return task_concurrency, None
    fits = (soft - OPEN_FILES_BASE) // OPEN_FILES_PER_TASK
    if fits < 1:
        from acx.errors import AcxConfigError

        raise AcxConfigError(
            f"the open-files limit ({soft}, hard limit {hard}) cannot carry even one task: acx needs about "
            f"{OPEN_FILES_BASE + OPEN_FILES_PER_TASK} descriptors",
            code="E0635",
            path="task_concurrency",
            help=f"raise it before running acx, e.g. `ulimit -n {need}` (the hard limit may need root or "
            "/etc/security/limits.conf)",
        )
    return fits, (
        f"the open-files limit ({soft}, hard limit {hard}) carries {fits} concurrent task(s), not "
        f"{task_concurrency}: task_concurrency lowered to {fits} (raise it with `ulimit -n {need}`)"
    )


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
