"""Retry timing under trio.testing.MockClock on a stand-in transport (virtual time, instant):
Retry-After in seconds / milliseconds / HTTP date, exponential backoff with jitter, never waiting
past the deadline, cancellation never retried. Contracts M2, M3."""

from __future__ import annotations

import itertools
import json as _json
import random
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from acx.models import ChatRequest, Endpoint, ModelCallError, ModelClient, RetryPolicy, parse_retry_after

OK = {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
REQ = ChatRequest(messages=[{"role": "user", "content": "hi"}])
EP = Endpoint(base_url="http://model.invalid/v1", model="m", max_retries=5, total_timeout=None)


Reply = tuple[int, dict[str, str], bytes]


def Response(status: int, headers: dict[str, str] | None = None, json: Any = None) -> Reply:
    """An HTTP answer for the stand-in transport (``ModelClient(transport=...)``)."""
    return status, dict(headers or {}), b"" if json is None else _json.dumps(json).encode()


def scripted(responses: list[Reply]) -> tuple[Any, list[float]]:
    times: list[float] = []

    def handler(method: str, url: str, headers: dict[str, str], body: bytes) -> Reply:
        times.append(trio.current_time())
        return responses.pop(0)

    return handler, times


def go(transport, endpoint=EP, policy=None):
    async def main():
        async with ModelClient(transport=transport, retry=policy or RetryPolicy(), rng=random.Random(1)) as c:
            return await c.complete(endpoint, REQ)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_retry_after_seconds_exact_virtual_time() -> None:  # contract M2
    t, times = scripted([Response(429, headers={"Retry-After": "30"})] * 2 + [Response(200, json=OK)])
    resp, _ex = go(t)
    assert resp.content == "ok"
    assert times[1] - times[0] == pytest.approx(30) and times[2] - times[1] == pytest.approx(30)


def test_retry_after_ms_and_http_date() -> None:  # contract M2
    t, times = scripted([Response(503, headers={"retry-after-ms": "1500"}), Response(200, json=OK)])
    go(t)
    assert times[1] - times[0] == pytest.approx(1.5)
    now = 1_000_000.0
    date = format_datetime(datetime.fromtimestamp(now + 42, tz=UTC), usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now) == pytest.approx(42)
    assert parse_retry_after({"Retry-After": "soon"}, now) is None


def test_retry_after_beyond_cap_gives_up() -> None:  # contract M2
    t, times = scripted([Response(429, headers={"Retry-After": "3600"}), Response(200, json=OK)])
    with pytest.raises(ModelCallError) as info:
        go(t)
    assert info.value.kind == "rate_limited" and len(times) == 1 and "retry after 3600 s" in info.value.message


def test_never_waits_past_the_deadline() -> None:  # contract M3
    t, times = scripted([Response(429, headers={"Retry-After": "50"}), Response(200, json=OK)])
    ep = Endpoint(base_url="http://model.invalid/v1", model="m", total_timeout=20)
    with pytest.raises(ModelCallError) as info:
        go(t, ep)
    assert len(times) == 1 and info.value.kind == "rate_limited"


def test_exponential_backoff_with_jitter() -> None:  # contract M2
    t, times = scripted([Response(500)] * 4 + [Response(200, json=OK)])
    go(t, policy=RetryPolicy(base_delay=2, max_delay=5))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    nominal = [2, 4, 5, 5]
    for gap, nom in zip(gaps, nominal, strict=True):
        assert 0.75 * nom - 1e-9 <= gap <= nom + 1e-9


@given(st.integers(min_value=0, max_value=20), st.floats(min_value=0, max_value=1))
def test_backoff_bounds_property(index: int, seed: float) -> None:  # contract M2
    p = RetryPolicy(base_delay=1, max_delay=30)
    d = p.delay(index, None, random.Random(seed))
    assert d is not None and 0.75 * min(30, 2**index) <= d <= min(30, 2**index)


def test_cancellation_is_never_retried() -> None:  # contract M2
    calls: list[float] = []

    def handler(method: str, url: str, headers: dict[str, str], body: bytes) -> Reply:
        calls.append(trio.current_time())
        return Response(503, headers={"Retry-After": "10"})

    async def main():
        async with ModelClient(transport=handler) as c:
            async with trio.open_nursery() as n:

                async def cancel_later() -> None:
                    await trio.sleep(5)  # cancelled during the 10 s wait (no deadline to foresee it)
                    n.cancel_scope.cancel()

                n.start_soon(cancel_later)
                await c.complete(EP, REQ)
            return trio.current_time()

    end = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(calls) == 1 and end == pytest.approx(5)


def test_total_deadline_bounds_retries() -> None:  # contract M3
    t, times = scripted([Response(500)] * 50)
    ep = Endpoint(base_url="http://model.invalid/v1", model="m", max_retries=50, total_timeout=10)
    with pytest.raises(ModelCallError) as info:
        go(t, ep, RetryPolicy(base_delay=1, max_delay=2))
    assert info.value.kind == "server_error" and times[-1] <= 10
