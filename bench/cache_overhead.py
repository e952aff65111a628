"""Model-call cache overhead: a cache hit vs a relayed call to the fake model server, in the same
run (issue 26 item 5).

The same three processes as ``bench/gateway_overhead.py`` (fake model server, gateway, load
generator — its helpers are reused). The gateway has two roles on the same endpoint: ``relayed``
(cache off: every call goes to the model server) and ``cached`` (cache ``read`` over a cache
directory warmed with the request: every call is a hit, read from disk and answered without the
model server). The load generator posts the same ``/chat/completions`` request directly to the
server, to the gateway's relayed role and to its cached role, alternately, ``--repeats`` rounds
each after a warm-up.

Prints p50/p99 latency per side and the gateway's CPU per call for a relayed call and for a hit
(the gateway's idle time during direct rounds subtracted), and their ratio. Target: a hit costs
the gateway less CPU than a relayed call (ratio < 1). Usage:
``python bench/cache_overhead.py [--calls N] [--concurrency C] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _model_bench import Agent, load_line, pct, process_cpu, processes

SIDES = ("direct", "relayed", "hit")


async def _gateway_side(args: argparse.Namespace, base_url: str, agent: Agent, server_pid: int) -> dict[str, Any]:
    from acx.models import CallCache, Endpoint, Gateway, Role

    endpoint = Endpoint(base_url=base_url, model="bench", api_key="sk-bench-key", max_connections=args.concurrency)
    results: dict[str, Any] = {side: [] for side in SIDES}
    cpu: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="acx-cache-bench-") as root:
        cache = CallCache(root)
        roles = {
            "relayed": Role("relayed", endpoint),
            "warm": Role("warm", endpoint, cache="write"),
            "cached": Role("cached", endpoint, cache="read"),
        }
        async with trio.open_nursery() as nursery:
            gateway = Gateway(roles, cache=cache)
            await gateway.start(nursery)
            session = gateway.open_session("bench")
            url = f"{session.env('relayed')['OPENAI_BASE_URL']}/chat/completions"
            jobs = {
                "direct": (f"{base_url}/chat/completions", "sk-bench-key"),
                "relayed": (url, session.token("relayed")),
                "hit": (url, session.token("cached")),
            }

            async def run(side: str, calls: int, token: str | None = None) -> tuple[float, list[float]]:
                target, tok = jobs[side]
                cpu0 = time.process_time()
                seconds, latencies, _ = await agent.run(target, token or tok, calls, args.concurrency)
                cpu[side] = cpu.get(side, 0.0) + time.process_time() - cpu0
                return seconds, latencies

            await run("relayed", 1, session.token("warm"))  # stores the answer every hit reads
            assert cache.stats().entries == 1, "the warm-up call was not stored"
            for side in SIDES:  # warm-up: connections, code paths
                await run(side, min(args.calls, 200))
            cpu.clear()
            server0 = process_cpu(server_pid)
            for _ in range(args.repeats):
                for side in SIDES:
                    session.calls.clear()
                    results[side].append(await run(side, args.calls))
            hits = sum(1 for c in session.calls if c.cached)
            await gateway.aclose()
            nursery.cancel_scope.cancel()
    per_call = 1000 / (args.calls * args.repeats)
    results["cpu"] = {side: (cpu[side] - cpu["direct"]) * per_call for side in ("relayed", "hit")}
    results["hits_last_round"] = hits
    results["server_cpu_s"] = process_cpu(server_pid) - server0
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with processes() as (base_url, agent, server_pid):
        results = trio.run(_gateway_side, args, base_url, agent, server_pid)
    cpu = results.pop("cpu")
    hits = results.pop("hits_last_round")
    results.pop("server_cpu_s")
    print(
        f"{args.calls} chat calls at concurrency {args.concurrency}, {args.repeats} rounds per side "
        f"({load_line()}); "
        f"{hits}/{args.calls} calls of the last hit round answered by the cache"
    )
    p50 = {}
    for side in SIDES:
        rounds = results[side]
        rates = [args.calls / seconds for seconds, _ in rounds]
        lat = [x for _, ls in rounds for x in ls]
        p50[side] = pct(lat, 0.5)
        print(
            f"  {side:8s} {statistics.median(rates):8.0f} calls/s   "
            f"p50 {p50[side] * 1000:7.2f} ms   p99 {pct(lat, 0.99) * 1000:7.2f} ms"
        )
    ratio = cpu["hit"] / cpu["relayed"] if cpu["relayed"] > 0 else float("inf")
    print(
        f"  gateway CPU per call: relayed {cpu['relayed']:.3f} ms, cache hit {cpu['hit']:.3f} ms (ratio {ratio:.2f}x)"
    )
    print(f"  latency p50: hit {p50['hit'] / p50['relayed']:.2f}x relayed, {p50['hit'] / p50['direct']:.2f}x direct")
    print(f"  target: a hit costs less gateway CPU than a relayed call -> {'met' if ratio < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
