"""Interpreter overhead: 1,000 trivial tasks at concurrency 32 on host_process.

Runs the same workload both ways in one process, alternating, ``--repeats`` times each:

* acx: an ``exact_match`` request whose ``command`` harness runs ``echo 1`` per task — the full
  interpreter from compile to summary: compile + plan every task, per task a session directory,
  phases and progress events, the session record, ``result.json``/``task.json`` written
  atomically and group-committed (syncfs), the journal, metrics, summary;
* a bare trio loop spawning the same ``echo 1`` processes under the same concurrency limit, each
  in its own temporary directory (created and removed inline, as a naive loop would), with the
  same process settings (new session, stdout/stderr captured, stdin closed).

Modules are imported before timing on both sides (start-up is not per-task overhead). Prints
the median acx time and tasks/s, the median bare-loop time, their ratio (target ≤ 1.1× the bare
loop's time), a spawn-only bare loop (no temporary directories) and the bare loop plus only the
durable per-task result files (``bare+files``: what the results contract alone costs), the
same without the ``syncfs`` (``bare+layout``) and with the files written by a separate
idle-priority process (``bare+writer``: the best case for taking them off the loop), for
reference, CPU seconds per side, peak RSS and the load average. ``--containment`` picks the
host_process containment of acx's side: the default ``auto`` puts every session in its own cgroup
where the machine allows (each command joins it between vfork and exec through the C helper
``acx.drivers._cspawn``, or through a ``/bin/sh`` wrapper — an extra exec — where it is not built);
``process_group`` measures without cgroups. The target (project brief): acx ≤ 1.15× ``bare+files``
at the default containment. Usage:
``python bench/run_overhead.py [--tasks N] [--concurrency C] [--repeats R] [--containment MODE]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

COMMAND = ["echo", "1"]


def write_spec(root: Path, n: int, concurrency: int, containment: str = "auto") -> Path:
    root.mkdir(parents=True, exist_ok=True)
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
    environment: {{id: host_process, evaluation_environment_mode: none, containment: {containment}}}
    execution: {{run_timeout_seconds: 60}}
"""
    )
    return spec


def _args() -> argparse.Namespace:
    return argparse.Namespace(
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


def run_acx(spec: Path) -> tuple[float, str]:
    from acx.cli._run import build_programs
    from acx.interpreter import run_orchestration

    start = time.perf_counter()
    orch, programs = build_programs(_args(), str(spec))
    result = trio.run(lambda: run_orchestration(orch, programs, environ=os.environ))
    elapsed = time.perf_counter() - start
    assert result.status == "completed", result.status
    assert result.requests[0].counts.get("normal") == len(programs[0].tasks), result.requests[0].counts
    return elapsed, str(result.requests[0].headline)


async def bare_loop(n: int, concurrency: int, *, tempdirs: bool = True) -> None:
    limiter = trio.CapacityLimiter(concurrency)

    async def spawn(cwd: str | None) -> None:
        await trio.run_process(
            COMMAND,
            cwd=cwd,
            capture_stdout=True,
            capture_stderr=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def one() -> None:
        async with limiter:
            if tempdirs:
                with tempfile.TemporaryDirectory() as d:
                    await spawn(d)
            else:
                await spawn(None)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)


def _task_ops(i: int, stdout: bytes, running: Path, final: Path, *, checkpoint: bool = False) -> list[tuple[str, ...]]:
    """The metadata operations one finished task costs in the results layout, cheapest correct
    order: ``running/<task>/attempt-1/result.json`` (temp + rename), ``task.json`` (written in the
    not yet visible directory), the directory's rename into ``normal/``."""
    name = f"t{i}--{i:016x}"
    task_dir = f"{running}/{name}"
    result = {"task_id": f"t{i}", "status": "normal", "metrics": {"correct": stdout.strip() == b"1"}}
    res = f"{task_dir}/attempt-1/result.json"
    ckpt = f"{task_dir}/attempt-1/checkpoint.json"
    extra = [("write", f"{ckpt}.tmp", _checkpoint_text(i)), ("rename", f"{ckpt}.tmp", ckpt)] if checkpoint else []
    return [
        ("mkdir", task_dir),
        ("mkdir", f"{task_dir}/attempt-1"),
        *extra,
        ("write", f"{res}.tmp", json.dumps(result, indent=2)),
        ("rename", f"{res}.tmp", res),
        ("write", f"{task_dir}/task.json", json.dumps({"task_id": f"t{i}", "state": "normal"})),
        ("rename", task_dir, f"{final}/{name}"),
    ]


def _checkpoint_text(i: int) -> str:
    """An evaluation checkpoint of the size acx writes for this workload: what ran, its
    fingerprints and the run's answer."""
    fingerprint = f"{i:064x}"
    return json.dumps(
        {
            "version": 1,
            "task_id": f"t{i}",
            "attempt": 1,
            "fingerprints": {"task": fingerprint, "benchmark": fingerprint, "evaluation": fingerprint},
            "run": {"exit_code": 0, "answer": "1", "duration_ms": 3, "timed_out": False},
            "artifacts": {},
        }
    )


#: Whether the ``full`` floor makes a cgroup per task (acx's side runs with cgroups).
_CGROUPS = True


def _cgroup_parent() -> str | None:
    from acx.drivers.host_process import cgroup_parent

    return cgroup_parent() if _CGROUPS else None


def _make_cgroup(parent: str, i: int) -> str:
    path = os.path.join(parent, f"acx-bench-{os.getpid()}-{i}")
    os.mkdir(path)
    return path


def _joining(cgroup: str | None, argv: list[str]) -> list[str]:
    """``argv`` started inside ``cgroup``: through the joining shell, as host_process does
    without its C spawn helper (with it, the join costs less than this floor charges)."""
    if cgroup is None:
        return argv
    return ["/bin/sh", "-c", 'echo 0 > "$0" || exit 125; exec "$@"', os.path.join(cgroup, "cgroup.procs"), *argv]


def _remove_cgroup(path: str) -> None:
    with open(os.path.join(path, "cgroup.kill"), "w", encoding="ascii") as fh:
        fh.write("1")
    for _ in range(1000):
        try:
            os.rmdir(path)
            return
        except OSError:  # EBUSY until the killed processes are gone
            time.sleep(0.001)
    os.rmdir(path)


def _apply(ops: list[tuple[str, ...]]) -> None:
    for op in ops:
        if op[0] == "mkdir":
            os.mkdir(op[1])
        elif op[0] == "write":
            fd = os.open(op[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, op[2].encode())
            os.close(fd)
        else:
            os.rename(op[1], op[2])


def _syncfs(path: Path) -> None:
    import ctypes

    fd = os.open(path, os.O_RDONLY)
    try:
        ctypes.CDLL(None, use_errno=True).syncfs(fd)
    finally:
        os.close(fd)


def _apply_durably(ops: list[tuple[str, ...]], root: Path) -> None:
    _apply(ops)
    _syncfs(root)


# A results writer in its own process, at idle CPU priority (no GIL shared with the loop, and only
# CPU time nobody else wants): reads pickled batches of _task_ops from stdin, applies them, syncfs,
# acknowledges each batch with one byte. The best case for moving the result files off the loop.
WRITER = """
import os, pickle, sys
sys.path.insert(0, sys.argv[1])
from run_overhead import _apply, _syncfs
try:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):
    os.nice(19)
os.write(1, b"R")
src = os.fdopen(0, "rb")
while header := src.read(4):
    root, ops = pickle.loads(src.read(int.from_bytes(header, "little")))
    _apply(ops)
    _syncfs(root)
    os.write(1, b"!")
"""


class _Writer:
    """The parent's end of WRITER; started before the timer (start-up is not per-task cost)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(Path(__file__).resolve().parent)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        if os.read(self.proc.stdout.fileno(), 1) != b"R":
            raise RuntimeError("the results writer process did not start")

    def send(self, root: Path, ops: list[tuple[str, ...]]) -> None:
        import pickle

        data = pickle.dumps((root, ops))
        assert self.proc.stdin is not None
        self.proc.stdin.write(len(data).to_bytes(4, "little") + data)
        self.proc.stdin.flush()

    async def acked(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        await trio.lowlevel.wait_readable(fd)
        if os.read(fd, 1) != b"!":
            raise RuntimeError("the results writer process died")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


async def files_loop(
    n: int,
    concurrency: int,
    run_dir: Path,
    *,
    sink: str = "sync",
    writer: _Writer | None = None,
    full: bool = False,
) -> None:
    """The bare loop plus the files the results contract asks for, written the cheapest correct way.

    ``sink``: ``sync`` — written by a worker thread, made durable by a shared ``syncfs`` round
    (group commit), as acx does; ``nosync`` — written inline, no ``syncfs``; ``process`` — sent
    to ``writer`` (WRITER, an idle-priority process) in group-commit batches. No interpreter, no
    events, no journal: what the durable results layout alone costs here. ``full``: also what
    acx's run adds per task by contract (issue 30) — the A9 evaluation checkpoint (its own temp
    file + rename in the attempt directory, in the same group commit) and, where the machine
    allows, per-session containment: a cgroup made for the task, the command started inside it
    the way acx starts it, ``cgroup.kill`` and the cgroup removed after.
    """
    parent = _cgroup_parent() if full else None
    running, final = run_dir / "details" / "running", run_dir / "details" / "normal"
    running.mkdir(parents=True)
    final.mkdir(parents=True)
    limiter = trio.CapacityLimiter(concurrency)
    pending: list[tuple[str, ...]] = []
    waiters: list[trio.Event] = []
    busy = [False]

    async def one_round(ops: list[tuple[str, ...]]) -> None:
        if writer is not None:
            writer.send(run_dir, ops)
            await writer.acked()
        else:
            await trio.to_thread.run_sync(_apply_durably, ops, run_dir)

    async def commit() -> None:
        done = trio.Event()
        waiters.append(done)
        if busy[0]:
            await done.wait()
            return
        busy[0] = True
        while waiters:
            batch, ops = waiters[:], pending[:]
            waiters.clear()
            pending.clear()
            await one_round(ops)
            for event in batch:
                event.set()
        busy[0] = False

    async def one(i: int) -> None:
        async with limiter:
            with tempfile.TemporaryDirectory() as d:
                cgroup = _make_cgroup(parent, i) if parent is not None else None
                try:
                    res = await trio.run_process(
                        _joining(cgroup, COMMAND),
                        cwd=d,
                        capture_stdout=True,
                        capture_stderr=True,
                        stdin=b"1?",
                        start_new_session=True,
                    )
                finally:
                    if cgroup is not None:
                        _remove_cgroup(cgroup)
        ops = _task_ops(i, res.stdout, running, final, checkpoint=full)
        if sink == "nosync":
            _apply(ops)
        else:
            pending.extend(ops)
            await commit()

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    if len(os.listdir(final)) != n:
        raise RuntimeError(f"{run_dir}: {len(os.listdir(final))} of {n} task directories written")


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn: Callable[[], float]) -> tuple[float, float]:
    cpu = _cpu()
    elapsed = fn()
    return elapsed, _cpu() - cpu


def _bare(n: int, c: int, tempdirs: bool) -> float:
    start = time.perf_counter()
    trio.run(lambda: bare_loop(n, c, tempdirs=tempdirs))
    return time.perf_counter() - start


def _files(n: int, c: int, run_dir: Path, sink: str = "sync", contained: bool = True) -> float:
    """One floor round; ``sink`` ``full`` is ``sync`` plus the checkpoint and (``contained``) the
    per-session cgroup."""
    writer = _Writer() if sink == "process" else None
    full = sink == "full"
    try:
        start = time.perf_counter()
        if full:
            global _CGROUPS
            _CGROUPS = contained
        trio.run(lambda: files_loop(n, c, run_dir, sink="sync" if full else sink, writer=writer, full=full))
        return time.perf_counter() - start
    finally:
        if writer is not None:
            writer.close()


def _warm_up() -> None:
    import acx.cli._run
    import acx.compiler
    import acx.components.benchmarks.exact_match
    import acx.components.harnesses.command
    import acx.drivers.host_process
    import acx.interpreter  # noqa: F401


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--containment",
        choices=["auto", "cgroup", "process_group"],
        default="auto",
        help="host_process containment of acx's side (auto: a cgroup per session where available, each "
        "command joining it before exec; process_group: no cgroups)",
    )
    ns = parser.parse_args()
    _warm_up()
    load_before = os.getloadavg()
    acx_runs: list[tuple[float, float]] = []
    bare_runs: list[tuple[float, float]] = []
    spawn_runs: list[tuple[float, float]] = []
    floors: dict[str, list[tuple[float, float]]] = {"sync": [], "nosync": [], "process": [], "full": []}
    contained = ns.containment != "process_group" and _cgroup_parent() is not None
    headline = ""
    with tempfile.TemporaryDirectory(prefix="acx-bench-") as tmp:
        for i in range(ns.repeats):
            spec = write_spec(Path(tmp) / f"r{i}", ns.tasks, ns.concurrency, ns.containment)

            def acx_once(spec: Path = spec) -> float:
                nonlocal headline
                elapsed, headline = run_acx(spec)
                return elapsed

            def bare_once() -> float:
                return _bare(ns.tasks, ns.concurrency, True)

            # Alternate the order so neither side always runs on a warmer (or busier) machine.
            first, second = (acx_once, bare_once) if i % 2 else (bare_once, acx_once)
            a, b = _timed(first), _timed(second)
            acx_t, bare_t = (a, b) if i % 2 else (b, a)
            acx_runs.append(acx_t)
            bare_runs.append(bare_t)
            spawn_runs.append(_timed(lambda: _bare(ns.tasks, ns.concurrency, False)))
            for sink, sink_runs in floors.items():
                floor_dir = Path(tmp) / f"files-{sink}-{i}"
                sink_runs.append(
                    _timed(functools.partial(_files, ns.tasks, ns.concurrency, floor_dir, sink, contained))
                )
    load_after = os.getloadavg()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    med = {name: statistics.median(t for t, _ in runs) for name, runs in (("acx", acx_runs), ("bare", bare_runs))}
    cpu = {name: statistics.median(c for _, c in runs) for name, runs in (("acx", acx_runs), ("bare", bare_runs))}
    spawn = statistics.median(t for t, _ in spawn_runs)
    n = ns.tasks
    print(f"tasks: {n} at concurrency {ns.concurrency} on host_process; median of {ns.repeats} alternating repeats")
    print(f"acx:         {med['acx']:7.3f} s  ({n / med['acx']:8.1f} tasks/s)  cpu {cpu['acx']:6.2f} s  {headline}")
    print(f"bare trio:   {med['bare']:7.3f} s  ({n / med['bare']:8.1f} tasks/s)  cpu {cpu['bare']:6.2f} s")
    print(f"ratio:       {med['acx'] / med['bare']:7.2f}x the bare loop's time (target <= 1.1x)")
    print(f"spawn only:  {spawn:7.3f} s  ({n / spawn:8.1f} tasks/s)  bare loop without temporary directories")
    floor = {sink: statistics.median(t for t, _ in runs) for sink, runs in floors.items()}
    for label, sink, what in (
        ("bare+files", "sync", "the bare loop plus the durable per-task result files alone"),
        ("bare+layout", "nosync", "the same files without the syncfs (not durable against a machine crash)"),
        ("bare+writer", "process", "the durable files written by a separate idle-priority process"),
    ):
        print(f"{label + ':':13}{floor[sink]:7.3f} s  ({floor[sink] / med['bare']:5.2f}x bare)  {what}")
    full_what = "the durable files plus the A9 checkpoint" + (
        " and a cgroup per session (made, joined, killed, removed)" if contained else " (no cgroups on this side)"
    )
    print(f"{'bare+full:':13}{floor['full']:7.3f} s  ({floor['full'] / med['bare']:5.2f}x bare)  {full_what}")
    files = floor["sync"]
    print(f"acx/files:   {med['acx'] / files:7.2f}x  acx against the bare loop plus the result files")
    fcpu = {sink: statistics.median(c for _, c in runs) for sink, runs in floors.items()}
    print(
        f"acx/full:    {med['acx'] / floor['full']:7.2f}x wall, {cpu['acx'] / fcpu['full']:.2f}x CPU  acx against "
        "bare+full, the floor with what acx's run must also do (target <= 1.15x; issue 30)"
    )
    times = " ".join(f"{t:.3f}" for t, _ in acx_runs) + " | bare " + " ".join(f"{t:.3f}" for t, _ in bare_runs)
    print(f"runs (s):    acx {times}")
    print(f"peak RSS:    {rss_mb:7.1f} MiB")
    print(f"load avg:    {load_before[0]:.2f} before, {load_after[0]:.2f} after (1 min), {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
