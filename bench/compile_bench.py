"""Wall time of `acx --help` and `acx compile --dry-run` (two-request orchestration).

Runs each command several times in fresh processes (so imports count, as they do for users)
after one warm-up run (bytecode cached, as on a user's machine: ``PYTHONDONTWRITEBYTECODE`` is
unset for the children), and prints min / median wall seconds and the median CPU seconds of the
child (user + system; robust when other work loads the machine) against the 0.3 s target.
``--check`` exits 1 when a median misses the target. Usage:
``python bench/compile_bench.py [--runs N] [--check]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_SECONDS = 0.3

ORCHESTRATION = """\
version: 1
name: bench
task_concurrency: 8
defaults:
  harness: {id: openai_chat}
  environment: {id: docker, run_network_policy: no-network, setup: {image: "python:3.12"}}
  model: {id: bench-model, base_url: "${BENCH_BASE_URL}", api_key: "${BENCH_API_KEY}"}
  execution: {attempts: {k: 2}, max_retries: 1}
requests:
  - name: qa
    benchmark: {id: exact_match, dataset: data/qa.jsonl}
    execution: {run_timeout_seconds: 600}
  - name: tb
    benchmark: {id: harbor, path: tasks/}
    harness: {id: oracle}
"""


def _time(argv: list[str], cwd: str, env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, child CPU seconds) per run, after one warm-up run."""
    wall, cpu = [], []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"command failed: {' '.join(argv)}")
        if i == 0:
            continue  # warm-up: writes the bytecode cache
        wall.append(elapsed)
        cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="exit 1 when a median misses the target")
    args = parser.parse_args()
    env = dict(os.environ, BENCH_BASE_URL="http://localhost:8000/v1", BENCH_API_KEY="sk-bench")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, ".git"))  # keep the project-config search inside the temp dir
        env["XDG_CONFIG_HOME"] = os.path.join(tmp, "xdg")
        with open(os.path.join(tmp, "orch.yaml"), "w", encoding="utf-8") as fh:
            fh.write(ORCHESTRATION)
        acx = [sys.executable, "-m", "acx"]
        python = _time([sys.executable, "-c", "pass"], tmp, env, args.runs)
        rows = [
            ("python -c pass (baseline)", python),
            ("acx --help", _time([*acx, "--help"], tmp, env, args.runs)),
            (
                "acx compile --dry-run",
                _time([*acx, "compile", "orch.yaml", "--dry-run"], tmp, env, args.runs),
            ),
            (
                "acx compile --dry-run --format json",
                _time([*acx, "compile", "orch.yaml", "--dry-run", "--format", "json"], tmp, env, args.runs),
            ),
        ]
    ok = True
    print(f"{'command':38} {'wall min':>9} {'wall median':>12} {'cpu median':>11}  target {TARGET_SECONDS} s")
    for name, (wall, cpu) in rows:
        median = statistics.median(wall)
        verdict = "" if name.startswith("python") else ("ok" if median < TARGET_SECONDS else "SLOW")
        ok = ok and verdict != "SLOW"
        print(f"{name:38} {min(wall):9.3f} {median:12.3f} {statistics.median(cpu):11.3f}  {verdict}")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
