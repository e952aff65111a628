"""Interpreter overhead: 1,000 trivial tasks at concurrency 32 on host_process.

Runs the same workload twice in one process:

* acx: an ``exact_match`` request whose ``command`` harness runs ``echo 1`` per task (full
  interpreter: planning per attempt, phases, session directories, results store, journal,
  metrics, summary);
* a bare trio loop spawning the same ``echo 1`` processes under the same concurrency limit.

Prints acx tasks/s, the bare loop's time, their ratio (target ≤ 1.1× the bare loop's time) and
the peak RSS of the process. Usage: ``python bench/run_overhead.py [--tasks N] [--concurrency C]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import trio

COMMAND = ["echo", "1"]


def write_spec(root: Path, n: int, concurrency: int) -> Path:
    (root / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i}", "question": "1?", "answer": "1"}) + "\n" for i in range(n))
    )
    spec = root / "bench.yaml"
    spec.write_text(
        f"""version: 1
name: bench
task_concurrency: {concurrency}
runtime: {{results_dir: {root / "results"}, progress: none}}
requests:
  - name: overhead
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: {json.dumps(COMMAND)}, prompt_file: null}}
    environment: {{id: host_process, evaluation_environment_mode: none}}
    execution: {{run_timeout_seconds: 60}}
"""
    )
    return spec


def run_acx(spec: Path) -> tuple[float, str]:
    from acx.cli._run import build_programs
    from acx.interpreter import run_orchestration

    args = argparse.Namespace(
        config=[],
        task_concurrency=None,
        execution_params=None,
        runtime_params=None,
        results_dir=None,
        timeout_seconds=None,
        cleanup_grace_seconds=None,
        progress=None,
        max_retries=None,
        k=None,
        attempt_strategy=None,
        keep_environment=None,
        tasks=None,
        run_id=None,
    )
    start = time.perf_counter()
    orch, programs = build_programs(args, str(spec))
    result = trio.run(lambda: run_orchestration(orch, programs, environ=os.environ))
    elapsed = time.perf_counter() - start
    assert result.status == "completed", result.status
    return elapsed, str(result.requests[0].headline)


async def bare_loop(n: int, concurrency: int) -> None:
    limiter = trio.CapacityLimiter(concurrency)

    async def one() -> None:
        async with limiter:
            with tempfile.TemporaryDirectory() as d:
                await trio.run_process(
                    COMMAND,
                    cwd=d,
                    capture_stdout=True,
                    capture_stderr=True,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acx-bench-") as tmp:
        spec = write_spec(Path(tmp), ns.tasks, ns.concurrency)
        start = time.perf_counter()
        trio.run(bare_loop, ns.tasks, ns.concurrency)
        bare = time.perf_counter() - start
        acx_time, headline = run_acx(spec)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"tasks: {ns.tasks} at concurrency {ns.concurrency} on host_process")
    print(f"acx:       {acx_time:7.3f} s  ({ns.tasks / acx_time:8.1f} tasks/s)  headline {headline}")
    print(f"bare trio: {bare:7.3f} s  ({ns.tasks / bare:8.1f} tasks/s)")
    print(f"ratio:     {acx_time / bare:7.2f}x the bare loop's time (target <= 1.1x)")
    print(f"peak RSS:  {rss_mb:7.1f} MiB")


if __name__ == "__main__":
    main()
