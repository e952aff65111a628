"""What the model-gateway benches share (``gateway_overhead.py``, ``cache_overhead.py``): the
fake model server and the load generator, each in its own process, and their measures.

Three processes, so that no side pays for another's Python work (GIL, one event loop): the fake
model server (``acx.testing.fake_models``, loopback, keep-alive), the gateway (the bench's own
process) and the agent, a load generator using acx's model client with ``C`` keep-alive workers.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from typing import Any

import trio

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _serve(port_out: Any, stop: Any) -> None:
    from acx.testing.fake_models import FakeModelServer, text

    with FakeModelServer(default=text("4", usage=(12, 1))) as srv:
        port_out.send(srv.port)
        stop.wait()


async def _load(url: str, token: str, calls: int, concurrency: int) -> tuple[float, list[float], float]:
    from acx.models import Endpoint, ModelClient

    latencies: list[float] = []
    remaining = [calls]
    # acx's own model client as the agent's SDK (keep-alive, one pool of ``concurrency``
    # connections), posting a pre-encoded body: the same work on every side.
    endpoint = Endpoint(base_url=url, model="bench", max_connections=concurrency, max_retries=0, total_timeout=None)
    headers = {"Authorization": f"Bearer {token}"}
    body = json.dumps({"model": "bench", "messages": MESSAGES}).encode()
    async with ModelClient(trust_env=False) as client:

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                t0 = time.perf_counter()
                ex = await client.exchange(endpoint, url, body, headers)
                if ex.status != 200:
                    raise RuntimeError(f"HTTP {ex.status}: {ex.body[:200]!r}")
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        cpu0 = time.process_time()
        async with trio.open_nursery() as n:
            for _ in range(concurrency):
                n.start_soon(worker)
        return time.perf_counter() - start, latencies, time.process_time() - cpu0


def _agent(conn: Any) -> None:
    """The load generator: runs each job it receives and sends back (seconds, latencies, CPU)."""
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(trio.run(_load, *job))


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of another process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Agent:
    """The load generator's end: :meth:`run` posts ``calls`` requests at ``concurrency``."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def run(self, url: str, token: str, calls: int, concurrency: int) -> tuple[float, list[float], float]:
        """(seconds, latencies, agent CPU seconds); this event loop keeps serving meanwhile."""
        self._conn.send((url, token, calls, concurrency))
        result: tuple[float, list[float], float] = await trio.to_thread.run_sync(self._conn.recv)
        return result


@contextlib.contextmanager
def processes() -> Iterator[tuple[str, Agent, int]]:
    """The fake model server and the agent started: (the server's base URL, the agent, the
    server's pid); both stopped on exit."""
    parent, child = multiprocessing.Pipe()
    stop = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(child, stop), daemon=True)
    server.start()
    agent_end, agent_conn = multiprocessing.Pipe()
    agent = multiprocessing.Process(target=_agent, args=(agent_conn,), daemon=True)
    agent.start()
    try:
        yield f"http://127.0.0.1:{parent.recv()}/v1", Agent(agent_end), server.pid or 0
    finally:
        agent_end.send(None)
        stop.set()
        agent.join(5)
        server.join(5)


def load_line() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
