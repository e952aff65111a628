"""Report benchmark (issue 16): a synthetic 10,000-task run directory, its HTML report generated
in under 5 s and opened in headless Chromium in under 3 s.

Baselines measured in the same run: reading every ``task.json``/``result.json`` of the run with
``json.loads`` (the I/O any report must do) for generation, and opening a same-size static HTML
page for the browser. Prints the timings, the ratios against the baselines and the targets.

    python bench/report_bench.py               # 10,000 tasks
    python bench/report_bench.py --tasks 2000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

TARGET_GENERATE = 5.0
TARGET_OPEN = 3.0
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _read_all(run_dir: Path) -> int:
    n = 0
    for path in run_dir.glob("details/*/*/task.json"):
        json.loads(path.read_bytes())
        n += 1
    for path in run_dir.glob("details/*/*/attempt-*/result.json"):
        json.loads(path.read_bytes())
    return n


def _open_seconds(browser: object, url: str, ready: str) -> float:
    page = browser.new_page()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_selector(ready)
    seconds = time.perf_counter() - t0
    page.close()
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    args = ap.parse_args()
    from acx.report import write_report
    from acx.testing.results import synthetic_tasks, write_run

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "synthetic" / "20260101_000000"
        t0 = time.perf_counter()
        write_run(run_dir, synthetic_tasks(args.tasks, seed=1))
        print(f"synthetic run: {args.tasks} tasks written in {time.perf_counter() - t0:.2f} s")

        t0 = time.perf_counter()
        _read_all(run_dir)
        baseline = time.perf_counter() - t0

        t0, c0 = time.perf_counter(), time.process_time()
        written = write_report([run_dir], Path(tmp) / "report.html")
        generate, cpu = time.perf_counter() - t0, time.process_time() - c0
        size_mb = written.bytes / 1e6
        # On a shared machine wall time also measures the neighbours: the CPU time and the load
        # average say how much.
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPU(s)")
        print(
            f"generate: {generate:.2f} s wall, {cpu:.2f} s CPU for {written.tasks} tasks, {size_mb:.1f} MB "
            f"(baseline: reading the run's JSON files {baseline:.2f} s; ratio {generate / baseline:.2f}×) "
            f"target < {TARGET_GENERATE:.0f} s: {'met' if generate < TARGET_GENERATE else 'NOT MET'} "
            f"(on CPU time: {'met' if cpu < TARGET_GENERATE else 'NOT MET'})"
        )

        chromium = os.environ.get("ACX_CHROMIUM") or shutil.which("chromium")
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            chromium = None
        if not chromium:
            print("open: skipped (no chromium/playwright; scripts/test.sh installs them)")
            return 0 if generate < TARGET_GENERATE else 1
        # Baseline: a page of the same size whose bulk is inert JSON (what any self-contained
        # report must make the browser read), with no program.
        static = Path(tmp) / "static.html"
        filler = json.dumps({"k": "x" * 990}) + ","
        with static.open("w", encoding="utf-8") as fh:
            fh.write('<!DOCTYPE html><html><body><p id="ready">static</p><script type="application/json">[')
            for _ in range(written.bytes // len(filler)):
                fh.write(filler)
            fh.write("0]</script></body></html>")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
            _open_seconds(browser, static.as_uri(), "#ready")  # warm the browser
            open_static = _open_seconds(browser, static.as_uri(), "#ready")
            open_report = _open_seconds(browser, written.path.as_uri(), "[data-testid=headline]")
            open_table = _open_seconds(
                browser, written.path.as_uri() + "#tasks/0?sort=duration&desc=1", "[data-testid=task-table] tbody tr"
            )
            open_task = _open_seconds(browser, written.path.as_uri() + "#task/0/9999", "[data-testid=task-title]")
            browser.close()
        worst = max(open_report, open_table, open_task)
        print(
            f"open: overview {open_report:.2f} s, sorted task table {open_table:.2f} s, task page {open_task:.2f} s "
            f"(baseline: a static page of the same size {open_static:.2f} s; ratio {worst / open_static:.2f}×) "
            f"target < {TARGET_OPEN:.0f} s: {'met' if worst < TARGET_OPEN else 'NOT MET'}"
        )
        return 0 if generate < TARGET_GENERATE and worst < TARGET_OPEN else 1


if __name__ == "__main__":
    sys.exit(main())
