"""Agent-loop overhead: a 20-turn scripted episode x 50 tasks at concurrency 16, acx's `react`
harness in a full `acx run` vs a minimal loop making the same model calls and the same execs on
the same driver (host_process), in the same run.

The scripted model (``acx.testing.fake_models``, in its own process so neither side pays for its
Python work) answers every call with one `bash` tool call (``echo step``); both sides stop after
20 turns. The minimal loop is what an agent loop cannot do without: per turn one HTTP/1.1 POST of
the growing conversation (stdlib ``http.client`` in a worker thread, a kept-alive connection per
task) and one ``Session.exec`` on an opened host_process session; nothing recorded, nothing
written. acx's side is everything a user gets: compile and plan, the gateway (tokens, limits,
transcript, usage), trajectories, durable result files, metrics and the report.

Same calls: the minimal loop sends the conversation react sends (its default system prompt, its
QA prompt template, the ``bash`` and ``submit`` tool specs), so the server parses the same bodies
for both. acx's endpoint has ``max_connections`` = the concurrency (the minimal loop keeps one
connection per task; acx's default of 8 would queue half the tasks' calls — a cap, not overhead)
and a key shaped like a real one (the scrubber looks for it in everything acx writes; a key such
as ``none`` would also be found in ordinary words and masked there).

The sides alternate (which one goes first changes per repeat). Prints both wall times (each
repeat, the median) and the ratio acx / minimal of the medians and of the best runs (target
<= 1.2x), each side's own CPU time (this process's, without the commands it ran) and the part of
it on the trio thread, and the load average. On a loaded machine a CPU-bound side waits for a
core, so the wall ratio swings from run to run while the CPU ratio stays put; acx does all its
work on the trio thread where the minimal loop's HTTP runs in worker threads, so under load the
wall ratio leans toward the trio-thread CPU ratio. Compare ratios within one run only.
Usage: ``python bench/agent_overhead.py [--tasks 50] [--turns 20] [--concurrency 16] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

# What react sends (its defaults for a QA task with tools [bash, submit]), so both sides make the
# same calls.
from acx.components.harnesses._react_tools import TOOL_SPECS
from acx.components.harnesses.react import DEFAULT_SYSTEM_PROMPT, PROMPT_TEMPLATES

TOOLS = [TOOL_SPECS["bash"], TOOL_SPECS["submit"]]


def _first_messages(index: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": PROMPT_TEMPLATES["submit"].replace("{prompt}", f"task {index}")},
    ]


def _serve(port_out: Any, stop: Any) -> None:
    from acx.testing.fake_models import FakeModelServer, tool_call

    with FakeModelServer(default=tool_call("bash", {"command": "echo step"}, call_id="b", usage=(50, 5))) as srv:
        port_out.send(srv.port)
        stop.wait()


class _Conn:
    """One kept-alive stdlib HTTP connection per task."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post(self, body: bytes) -> dict[str, Any]:
        self.conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        out: dict[str, Any] = json.loads(self.conn.getresponse().read())
        return out


async def _minimal_task(driver: Any, port: int, index: int, turns: int) -> None:
    from acx.drivers import OpenRequest

    session = await driver.open(OpenRequest(session_id=f"bench-min-{index}-{time.monotonic_ns()}"))
    conn = _Conn(port)
    messages = _first_messages(index)
    try:
        for _ in range(turns):
            body = json.dumps({"model": "m", "messages": messages, "tools": TOOLS}).encode()
            reply = await trio.to_thread.run_sync(conn.post, body)
            msg = reply["choices"][0]["message"]
            messages.append(msg)
            for call in msg.get("tool_calls") or []:
                command = json.loads(call["function"]["arguments"])["command"]
                res = await session.exec(["bash", "-c", command], timeout=60)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": res.stdout})
    finally:
        conn.conn.close()
        await session.close()


async def _minimal(port: int, tasks: int, turns: int, concurrency: int) -> float:
    from acx.drivers import create_driver

    driver = create_driver("host_process", {})
    limiter = trio.CapacityLimiter(concurrency)
    started = time.perf_counter()

    async def one(i: int) -> None:
        async with limiter:
            await _minimal_task(driver, port, i, turns)

    async with trio.open_nursery() as nursery:
        for i in range(tasks):
            nursery.start_soon(one, i)
    return time.perf_counter() - started


def _spec(root: Path, port: int, tasks: int, turns: int, concurrency: int) -> Path:
    (root / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i}", "question": f"task {i}", "answer": "x"}) + "\n" for i in range(tasks))
    )
    spec = root / "bench.yaml"
    spec.write_text(
        f"""version: 1
name: bench
task_concurrency: {concurrency}
runtime: {{results_dir: {root / "results"}, progress: none}}
requests:
  - name: bench
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: react, max_turns: {turns}, tools: [bash, submit]}}
    model: {{id: m, base_url: "http://127.0.0.1:{port}/v1", api_key: sk-bench-5f0c9a7e31d24b68,
            max_connections: {concurrency}}}
    environment: {{id: host_process}}
"""
    )
    return spec


def _acx(port: int, tasks: int, turns: int, concurrency: int) -> tuple[float, float, float]:
    import acx

    with tempfile.TemporaryDirectory() as tmp:
        spec = _spec(Path(tmp), port, tasks, turns, concurrency)
        started, cpu, main = time.perf_counter(), _cpu(), time.thread_time()
        result = acx.run(spec)
        elapsed, cpu, main = time.perf_counter() - started, _cpu() - cpu, time.thread_time() - main
    if result.exit_code not in (0, 1):
        raise SystemExit(f"acx run failed with exit code {result.exit_code}")
    return elapsed, cpu, main


def _cpu() -> float:
    """This process's CPU seconds so far (user + system; the commands it ran are not counted)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(fn: Any, *args: Any) -> tuple[float, float, float]:
    """(wall seconds ``fn`` reports, CPU seconds it took, of which on this thread)."""
    before, main = _cpu(), time.thread_time()
    wall = fn(*args)
    return wall, _cpu() - before, time.thread_time() - main


def _line(name: str, runs: list[tuple[float, float, float]], calls: int) -> str:
    wall = statistics.median(r[0] for r in runs)
    cpu, main = statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs)
    each = " ".join(f"{r[0]:.2f}" for r in runs)
    return (
        f"{name}: {wall:6.2f} s ({calls / wall:5.0f} turns/s)  cpu {cpu:5.2f} s, "
        f"{main:5.2f} s on the trio thread   runs: {each}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    stop = ctx.Event()
    server = ctx.Process(target=_serve, args=(child, stop), daemon=True)
    server.start()
    port = parent.recv()
    load = os.getloadavg()[0]
    try:
        minimal: list[tuple[float, float, float]] = []
        full: list[tuple[float, float, float]] = []
        _acx(port, 4, 2, 4)  # warm-up: imports, parser tables
        for i in range(args.repeats):
            # Alternating order: neither side always runs on a warmer (or busier) machine.
            for side in ("minimal", "acx") if i % 2 == 0 else ("acx", "minimal"):
                if side == "minimal":
                    minimal.append(_timed(trio.run, _minimal, port, args.tasks, args.turns, args.concurrency))
                else:
                    full.append(_acx(port, args.tasks, args.turns, args.concurrency))
    finally:
        stop.set()
        server.join(5)
    m, a = statistics.median(r[0] for r in minimal), statistics.median(r[0] for r in full)
    mc, ac = statistics.median(r[1] for r in minimal), statistics.median(r[1] for r in full)
    calls = args.tasks * args.turns
    print(f"episodes: {args.tasks} tasks x {args.turns} turns, concurrency {args.concurrency} ({calls} calls/execs)")
    print(_line("minimal loop", minimal, calls))
    print(_line("acx react   ", full, calls))
    best = min(r[0] for r in full) / min(r[0] for r in minimal)
    print(f"ratio acx/minimal: {a / m:.2f}x median, {best:.2f}x best (target <= 1.2x); own CPU {ac / mc:.2f}x")
    print(f"load average (1 min): {load:.2f} before, {os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
