"""Model gateway overhead: N chat calls at concurrency C against the fake model server, direct vs
through the gateway, in the same run.

Three processes, so that no side pays for another's Python work (GIL, one event loop):

* the fake model server (``acx.testing.fake_models``, loopback, keep-alive);
* the gateway (this process): a run gateway with one ``agent`` role pointing at the fake server;
  per call it checks the session token and limits, forwards with acx's model client, records the
  call (request, response, usage) and counts it;
* the agent: a load generator (acx's model client, keep-alive, ``C`` workers) posting the same
  ``/chat/completions`` request either to the fake server (direct) or to the gateway with the
  session token (through the gateway), alternately, ``--repeats`` rounds each after a warm-up.

Prints per side the median calls/s and the p50/p99 latency per call, and the latency the gateway
adds (p50 and p99 of through-gateway minus direct; target: under 1 ms at p50), and the CPU the
gateway process spends per call. On a loaded machine the latencies are noisy (scheduling delays
dominate): compare the sides and the CPU per call, not the absolute values. Usage:
``python bench/gateway_overhead.py [--calls N] [--concurrency C] [--repeats R] [--floor]`` (``--floor``
also measures a bare byte relay in the gateway's place: the least any relay on this event loop adds).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from typing import Any

import trio

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def _pct(values: list[float], q: float) -> float:
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
    # connections), posting a pre-encoded body: the same work on both sides.
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


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of another process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _relay(port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """``--floor``: a byte relay to the model server in the gateway's place — the least any
    relay on this event loop costs (no HTTP parsing, no token, no record)."""

    async def pump(src: trio.SocketStream, dst: trio.SocketStream, done: trio.CancelScope) -> None:
        try:
            while data := await src.receive_some(65536):
                await dst.send_all(data)
        except trio.BrokenResourceError:
            pass
        done.cancel()

    async def one(down: trio.SocketStream) -> None:
        async with down, await trio.open_tcp_stream("127.0.0.1", port) as up, trio.open_nursery() as n:
            n.start_soon(pump, down, up, n.cancel_scope)
            n.start_soon(pump, up, down, n.cancel_scope)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(one, listeners)


async def _gateway_side(args: argparse.Namespace, base_url: str, agent: Any, server_pid: int) -> dict[str, Any]:
    from acx.models import Endpoint, Gateway, Role

    endpoint = Endpoint(base_url=base_url, model="bench", api_key="sk-bench", max_connections=args.concurrency)
    sides = ("direct", "gateway", "relay") if args.floor else ("direct", "gateway")
    results: dict[str, Any] = {side: [] for side in sides}
    cpu: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        gateway = Gateway({"agent": Role("agent", endpoint)})
        await gateway.start(nursery)
        session = gateway.open_session("bench")
        env = session.env()
        jobs = {
            "direct": (f"{base_url}/chat/completions", "sk-bench"),
            "gateway": (f"{env['OPENAI_BASE_URL']}/chat/completions", env["OPENAI_API_KEY"]),
        }
        if args.floor:
            model_port = int(base_url.rsplit(":", 1)[1].split("/")[0])
            relay_port = await nursery.start(_relay, model_port)
            jobs["relay"] = (f"http://127.0.0.1:{relay_port}/v1/chat/completions", "sk-bench")

        async def run(side: str, calls: int) -> tuple[float, list[float]]:
            url, token = jobs[side]
            cpu0, server0 = time.process_time(), _process_cpu(server_pid)
            agent.send((url, token, calls, args.concurrency))
            # The agent works in its own process; this loop keeps serving the gateway meanwhile.
            seconds, latencies, agent_cpu = await trio.to_thread.run_sync(agent.recv)
            cpu[side] = cpu.get(side, 0.0) + time.process_time() - cpu0
            cpu[f"{side} agent"] = cpu.get(f"{side} agent", 0.0) + agent_cpu
            cpu[f"{side} server"] = cpu.get(f"{side} server", 0.0) + _process_cpu(server_pid) - server0
            return seconds, latencies

        for side in sides:  # warm-up: connections, code paths
            await run(side, min(args.calls, 200))
        cpu.clear()  # count the measured rounds only
        for _ in range(args.repeats):
            for side in sides:
                session.calls.clear()  # keep the transcript from growing across rounds
                results[side].append(await run(side, args.calls))
        await gateway.aclose()
        nursery.cancel_scope.cancel()
    # CPU the gateway process spent per call (its idle waiting during direct rounds subtracted):
    # the gateway's own work, much less sensitive to a loaded machine than wall-clock latency.
    per_call = 1000 / (args.calls * args.repeats)
    results["gateway_cpu_ms_per_call"] = [(cpu.get("gateway", 0.0) - cpu.get("direct", 0.0)) * per_call]
    results["cpu"] = {k: v * per_call for k, v in cpu.items() if " " in k}
    if args.floor:
        results["relay_cpu_ms_per_call"] = (cpu.get("relay", 0.0) - cpu.get("direct", 0.0)) * per_call
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--floor", action="store_true", help="also measure a bare byte relay in the gateway's place (the floor)"
    )
    args = ap.parse_args()
    parent, child = multiprocessing.Pipe()
    stop = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(child, stop), daemon=True)
    server.start()
    agent_end, agent_conn = multiprocessing.Pipe()
    agent = multiprocessing.Process(target=_agent, args=(agent_conn,), daemon=True)
    agent.start()
    try:
        base_url = f"http://127.0.0.1:{parent.recv()}/v1"
        results = trio.run(_gateway_side, args, base_url, agent_end, server.pid)
    finally:
        agent_end.send(None)
        stop.set()
        agent.join(5)
        server.join(5)
    print(
        f"{args.calls} chat calls at concurrency {args.concurrency}, {args.repeats} rounds per side "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    summary = {}
    gateway_cpu = results.pop("gateway_cpu_ms_per_call")[0]
    others = results.pop("cpu")
    relay_cpu = results.pop("relay_cpu_ms_per_call", None)
    for side, rounds in results.items():
        rates = [args.calls / seconds for seconds, _ in rounds]
        lat = [x for _, ls in rounds for x in ls]
        summary[side] = (_pct(lat, 0.5), _pct(lat, 0.99))
        print(
            f"  {side:8s} {statistics.median(rates):8.0f} calls/s   "
            f"p50 {summary[side][0] * 1000:7.2f} ms   p99 {summary[side][1] * 1000:7.2f} ms"
        )
    added50 = (summary["gateway"][0] - summary["direct"][0]) * 1000
    added99 = (summary["gateway"][1] - summary["direct"][1]) * 1000
    ratio = summary["gateway"][0] / summary["direct"][0]
    print(f"  added by the gateway: p50 {added50:+.2f} ms, p99 {added99:+.2f} ms (p50 ratio {ratio:.2f}x direct)")
    print(f"  gateway CPU per call: {gateway_cpu:.3f} ms (token check, forward, record, count)")
    if relay_cpu is not None:
        floor50 = (summary["relay"][0] - summary["direct"][0]) * 1000
        print(f"  floor: a bare byte relay adds p50 {floor50:+.2f} ms for {relay_cpu:.3f} ms CPU per call")
    print(
        "  other processes' CPU per call: "
        + ", ".join(f"{name} {ms:.3f} ms" for name, ms in sorted(others.items()))
        + f" ({os.cpu_count()} CPUs shared by all three: the gateway's CPU also slows the others)"
    )
    print(f"  target: under 1 ms added at p50 -> {'met' if added50 < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
