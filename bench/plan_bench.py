"""Planner benchmark: N exact_match tasks × 3 attempts, timed and measured (issue 4 target).

Target: 10,000 tasks × 3 attempts planned in under 3 s and under 500 MB peak RSS, time growing
linearly. Each size runs in a fresh child process so its peak RSS is its own. Prints the figures
for 1k and 10k and their ratio (≈10 means linear).

    python bench/plan_bench.py            # 1k and 10k
    python bench/plan_bench.py --sizes 1000 10000 50000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ATTEMPTS = 3
TARGET_SECONDS = 3.0
TARGET_MB = 500.0


def _child(n: int) -> dict[str, float]:
    import resource

    import acx.ir as ir
    from acx.compiler._planner import plan_request
    from acx.drivers import probe_capabilities

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "qa.jsonl"
        with data.open("w") as fh:
            for i in range(n):
                fh.write(
                    json.dumps(
                        {
                            "id": f"q{i}",
                            "question": f"What is {i} + 1?",
                            "answer": str(i + 1),
                            "category": f"c{i % 7}",
                        }
                    )
                    + "\n"
                )
        req = ir.RunRequest(
            model=ir.ModelSpec(id="bench-model"),
            benchmark=ir.BenchmarkSpec(id="exact_match", params={"dataset": str(data)}),
            harness=ir.HarnessSpec(id="command", params={"command": "cat"}),
            environment=ir.EnvironmentSpec(id="host_process", env_variables={"TOKEN": "${BENCH_TOKEN}"}),
            execution=ir.ExecutionSpec(attempts=ir.AttemptsSpec(k=ATTEMPTS), timeout_multiplier=1.5),
            metadata=ir.RunMetadata(request_name="bench"),
        )
        caps = probe_capabilities("host_process")
        start = time.perf_counter()
        rp = plan_request(req, base_dir=tmp, capabilities=caps)
        loaded = time.perf_counter()
        plans = [rp.plan_attempt(task, attempt) for task in rp.tasks for attempt in rp.attempts()]
        end = time.perf_counter()
        assert len(plans) == n * ATTEMPTS
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "n": n,
        "plans": len(plans),
        "load_s": loaded - start,
        "plan_s": end - loaded,
        "total_s": end - start,
        "peak_rss_mb": rss_mb,
    }


def _run(n: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", str(n)], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return 0
    results = [_run(n) for n in args.sizes]
    print(f"{'tasks':>8} {'plans':>8} {'load s':>8} {'plan s':>8} {'total s':>8} {'peak RSS MB':>12}")
    for r in results:
        print(
            f"{r['n']:>8} {r['plans']:>8} {r['load_s']:>8.3f} {r['plan_s']:>8.3f} {r['total_s']:>8.3f} "
            f"{r['peak_rss_mb']:>12.1f}"
        )
    ok = True
    by_n = {int(r["n"]): r for r in results}
    if 1000 in by_n and 10000 in by_n:
        ratio = by_n[10000]["total_s"] / by_n[1000]["total_s"]
        plan_ratio = by_n[10000]["plan_s"] / by_n[1000]["plan_s"]
        print(
            f"time ratio 10k/1k: total {ratio:.1f}, planning only {plan_ratio:.1f} (10 = linear; the total "
            "includes a fixed start-up: component imports and the built-in recipe registry)"
        )
    if 10000 in by_n:
        big = by_n[10000]
        ok = big["total_s"] < TARGET_SECONDS and big["peak_rss_mb"] < TARGET_MB
        print(
            f"10k × {ATTEMPTS}: {big['total_s']:.2f} s (target < {TARGET_SECONDS} s), "
            f"{big['peak_rss_mb']:.0f} MB (target < {TARGET_MB:.0f} MB): {'OK' if ok else 'MISSED'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
