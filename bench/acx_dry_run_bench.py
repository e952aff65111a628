"""`acx compile SPEC.acx --dry-run` against its YAML twin (issue 11 item 18).

The two documents compile to identical requests (tests/grammar/test_acx_twins.py checks the
examples), so the difference is what the `.acx` front end costs: importing lark, loading the
cached parser tables, parsing and lowering, and the enum table bare names are checked against
(cached on disk beside the parser tables). Each command runs in fresh processes (imports count,
as for users) after one warm-up run that writes the bytecode and the caches, with
``PYTHONDONTWRITEBYTECODE`` unset for the children. Prints min / median wall seconds and the
median child CPU seconds (user + system: robust when other work loads the machine), and the
ratio of the `.acx` medians to the YAML medians measured in the same run; the target is an
`.acx` dry run under 0.3 s CPU. ``--check`` exits 1 when the `.acx` CPU median misses it.

Usage: ``python bench/acx_dry_run_bench.py [--runs N] [--check]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 0.3
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: (spec, its YAML twin) pairs from examples/ that need nothing but these variables.
TWINS = [("nightly.acx", "nightly.yaml"), ("quickstart.acx", "quickstart.yaml")]
#: Files the specs import or read.
SUPPORT = ["common.acx"]
ENV = {"MODEL_BASE_URL": "http://127.0.0.1:8000/v1", "MODEL_API_KEY": "sk-bench"}


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
            continue  # warm-up: bytecode, lark's parser cache and the enum cache are written
        wall.append(elapsed)
        cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="exit 1 when the .acx CPU median misses the target")
    args = parser.parse_args()
    env = dict(os.environ, **ENV)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, ".git"))  # keep the project-config search inside the temp dir
        env["XDG_CONFIG_HOME"] = os.path.join(tmp, "xdg")
        for sub in ("agents", "data"):
            shutil.copytree(EXAMPLES / sub, Path(tmp) / sub)
        for pair in [*TWINS, tuple(SUPPORT)]:
            for name in pair:
                shutil.copy(EXAMPLES / name, Path(tmp) / name)
        acx = [sys.executable, "-m", "acx", "compile"]
        print(f"{'command':40} {'wall min':>9} {'wall median':>12} {'cpu median':>11}")
        for spec, twin in TWINS:
            a_wall, a_cpu = _time([*acx, spec, "--dry-run"], tmp, env, args.runs)
            y_wall, y_cpu = _time([*acx, twin, "--dry-run"], tmp, env, args.runs)
            for name, wall, cpu in ((spec, a_wall, a_cpu), (twin, y_wall, y_cpu)):
                label = f"acx compile {name} --dry-run"
                print(f"{label:40} {min(wall):9.3f} {statistics.median(wall):12.3f} {statistics.median(cpu):11.3f}")
            cpu_ratio = statistics.median(a_cpu) / statistics.median(y_cpu)
            wall_ratio = statistics.median(a_wall) / statistics.median(y_wall)
            verdict = "ok" if statistics.median(a_cpu) < TARGET_SECONDS else "SLOW"
            ok = ok and verdict == "ok"
            print(
                f"  ratio .acx / YAML twin: cpu {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x; "
                f".acx cpu median {statistics.median(a_cpu):.3f} s vs target {TARGET_SECONDS} s: {verdict}"
            )
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
