"""Cluster overhead: the same 200 host_process tasks run locally vs through a 1-node local Ray
cluster (scripts/ray-local-cluster.sh, started and stopped here), in one process, alternating.

Both sides run the full interpreter (``exact_match`` + ``command`` harness running ``echo 1``, at
task concurrency 8). Connecting to the cluster and starting its worker (``Driver.prepare``) is
outside the timing on both sides (a once-per-run cost, printed separately): the ratio is the
per-task cost of sending every session operation to the node's worker. Prints the median times
and their ratio (target ≤ 1.15×). Usage: ``python bench/cluster_overhead.py [--tasks N]
[--repeats R]`` (needs ``pip install 'acx-eval[cluster]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]


def write_spec(root: Path, n: int) -> Path:
    (root / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i}", "question": "1?", "answer": "1"}) + "\n" for i in range(n))
    )
    spec = root / "bench.yaml"
    spec.write_text(
        f"""version: 1
name: bench
task_concurrency: 8
runtime: {{results_dir: {root / "results"}, progress: none}}
requests:
  - name: overhead
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: ["echo", "1"], prompt_file: null}}
    environment: {{id: host_process, evaluation_environment_mode: none}}
    execution: {{run_timeout_seconds: 60}}
"""
    )
    return spec


def run_once(spec: Path, cluster: str | None) -> tuple[float, float, float]:
    """(prepare seconds, run seconds, this process's CPU seconds during the run) of one full run."""
    from acx.api import build_programs, prepare_drivers
    from acx.interpreter import run_orchestration

    orch, programs = build_programs(spec, report=lambda s: None, cluster=cluster)
    t0 = time.perf_counter()
    trio.run(prepare_drivers, programs, lambda s: None)
    t1, c1 = time.perf_counter(), time.process_time()
    result = trio.run(lambda: run_orchestration(orch, programs, environ=os.environ))
    t2, c2 = time.perf_counter(), time.process_time()
    if result.status != "completed" or result.requests[0].counts.get("tasks") != len(programs[0].tasks):
        raise SystemExit(f"run did not complete: {result.status} {result.requests[0].counts} {result}"[:3000])
    return t1 - t0, t2 - t1, c2 - c1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "RAY": f"{bindir}/ray"}
    cdir = f"/tmp/acxr-{uuid.uuid4().hex[:8]}"
    script = str(ROOT / "scripts" / "ray-local-cluster.sh")
    t0 = time.perf_counter()
    started = subprocess.run(
        # host tasks: the node needs no Docker engine of its own
        ["bash", script, "start", cdir, "--workers", "0", "--slots", "8", "--engine", "shared"],
        capture_output=True,
        text=True,
        env=env,
    )
    if started.returncode != 0:
        # The script stops what a failed start began; stopped here too (an interrupted script, an
        # older copy) so a failed bench never leaves a cluster running on a shared machine.
        subprocess.run(["bash", script, "stop", cdir], env=env)
        raise SystemExit(f"cluster did not start: {started.stderr}")
    cluster = "ray://" + started.stdout.strip().splitlines()[-1]
    print(f"local 1-node cluster started in {time.perf_counter() - t0:.1f} s at {cluster}")
    try:
        with tempfile.TemporaryDirectory(prefix="acx-cl-bench-") as tmp:
            spec = write_spec(Path(tmp), args.tasks)
            local: list[float] = []
            remote: list[float] = []
            prep: list[float] = []
            cpu: dict[str, list[float]] = {"local": [], "cluster": []}
            run_once(spec, cluster)  # warm-up: connects, starts the node's worker
            for _ in range(args.repeats):
                _, r, c = run_once(spec, None)
                local.append(r)
                cpu["local"].append(c)
                p, r, c = run_once(spec, cluster)
                prep.append(p)
                remote.append(r)
                cpu["cluster"].append(c)
    finally:
        subprocess.run(["bash", script, "stop", cdir], env=env)
    lm, rm = statistics.median(local), statistics.median(remote)
    print(f"tasks: {args.tasks}, repeats: {args.repeats}, load average: {os.getloadavg()[0]:.2f}")
    print(f"local:   median {lm:.3f} s ({args.tasks / lm:.0f} tasks/s)  runs {[round(x, 3) for x in local]}")
    print(f"cluster: median {rm:.3f} s ({args.tasks / rm:.0f} tasks/s)  runs {[round(x, 3) for x in remote]}")
    print(
        "driver process CPU (median; the cluster side's sandboxes run in the node's worker): "
        + ", ".join(f"{k} {statistics.median(v):.3f} s" for k, v in cpu.items())
    )
    print(f"cluster prepare (connect, worker check): median {statistics.median(prep):.3f} s (not in the ratio)")
    ratio = rm / lm
    print(f"ratio cluster/local: {ratio:.2f}x (target <= 1.15x) -> {'OK' if ratio <= 1.15 else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
