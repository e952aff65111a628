"""The chaos test of issue 18 ("Done when"): Docker tasks over a 3-node local Ray cluster whose nodes
each run their own Docker engine; one worker node SIGKILLed at a random moment and the driver
process SIGKILLed once and resumed → every task exactly once in the results, nothing counted twice
into the metrics, and no acx-labelled container left on any node engine once the killed node is
back and `acx gc --cluster` ran.

The schedule (which node, when, when the driver dies) comes from a seeded RNG whose seed is printed:
``ACX_CHAOS_SEED=<seed>`` replays it. ``ACX_CHAOS_TASKS`` (default 200, what the suite runs) makes
a quicker run while developing.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.docker, pytest.mark.slow]

BUSYBOX = "acx-test/busybox:latest"
#: Each task's agent writes its task id to a file in the sandbox and prints the file back: the
#: exact_match scorer then proves the command ran, for this task, inside a container.
AGENT = 'echo "$ACX_TASK_ID" > out.txt && sleep 0.2 && cat out.txt'


def _spec(root: Path, n: int, run_id: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"t{i:03d}", "question": "which task is this?", "answer": f"t{i:03d}"} for i in range(n)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = root / "spec.yaml"
    spec.write_text(
        f"""version: 1
name: chaos
task_concurrency: 12
runtime: {{progress: none}}
requests:
  - name: chaos
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: {json.dumps(["sh", "-c", AGENT])}, prompt_file: null}}
    environment:
      id: docker
      setup: {{image: "{BUSYBOX}"}}
      run_network_policy: no-network
      evaluation_environment_mode: none
    execution: {{run_timeout_seconds: 120, max_retries: 4}}
    output: {{run_id: "{run_id}"}}
"""
    )
    return spec


def _env() -> dict[str, str]:
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}


def _acx(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env()
    )


def _finished(results: Path) -> int:
    """Result files written so far (0 while the run moves a task directory under the glob)."""
    try:
        return sum(1 for _ in results.glob("chaos/*/details/*/*/attempt-*/result.json"))
    except OSError:
        return 0


def _containers(docker_host: str | None, *filters: str) -> list[str]:
    """Containers with all these labels on the engine ``docker_host`` (None: the default engine, the
    one the cluster script copies images from)."""
    env = {**os.environ}
    if docker_host is not None:
        env["DOCKER_HOST"] = docker_host
    args = ["docker", "ps", "-aq"]
    for f in filters:
        args += ["--filter", f"label={f}"]
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=True)
    return out.stdout.split()


def _networks(docker_host: str) -> list[str]:
    env = {**os.environ, "DOCKER_HOST": docker_host}
    args = ["docker", "network", "ls", "-q", "--filter", "label=acx.managed"]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=True).stdout.split()


class Chaos:
    """Watches a run's progress and fires the scheduled faults (each once)."""

    def __init__(self, cluster: Any, results: Path, run_id: str, rng: random.Random, n: int) -> None:
        self.cluster, self.results, self.run_id, self.n = cluster, results, run_id, n
        self.victim = rng.choice(["w1", "w2"])
        # moments, as numbers of finished attempts (the whole run: the killed one and its resumption)
        self.node_kill_at = rng.randint(n // 10, n * 6 // 10)
        self.driver_kill_at = rng.randint(n // 5, n * 7 // 10)
        self.node_kill_delay = rng.uniform(0, 1.5)
        self.driver_kill_delay = rng.uniform(0, 1.5)
        self.node_killed_in: str | None = None  # "first run" / "resumed run"
        self.seen_on: Counter[str] = Counter()  # containers of the run seen per engine
        self._last_sample = 0.0

    def watch(self, proc: subprocess.Popen[str], phase: str, *, kill_driver: bool, timeout: float) -> None:
        """Until ``proc`` ends (or is killed here): fire the faults that are due."""
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"{phase} still running after {timeout} s"
            done = _finished(self.results)
            if self.node_killed_in is None and done >= self.node_kill_at:
                time.sleep(self.node_kill_delay)
                assert self._victim_raylets(), f"no raylet of node {self.victim} in {self.cluster.dir}"
                self.cluster.kill_node(self.victim)
                assert self._victim_raylets() == [], "kill-node left the node's raylet running"
                self.node_killed_in = phase
            if kill_driver and done >= self.driver_kill_at:
                time.sleep(self.driver_kill_delay)
                proc.kill()  # SIGKILL: no cleanup of any kind in the driver
                proc.wait(30)
                return
            self._sample()
            time.sleep(0.2)

    def _victim_raylets(self) -> list[str]:
        """The victim's raylet in this cluster (never another cluster's node of the same name)."""
        marks = (f"{self.cluster.dir}/t/", f"acx_node_{self.victim},", "raylet")
        return [p for p in _processes_naming(marks[0]) if all(m in _cmdline(p) for m in marks)]

    def _sample(self) -> None:
        """Where the run's containers are: the node engines, never the default one."""
        if time.monotonic() - self._last_sample < 2:
            return
        self._last_sample = time.monotonic()
        label = f"acx.run_id={self.run_id}"
        assert _containers(None, label) == [], "a sandbox of the cluster run was opened on the default engine"
        for node, host in self.cluster.engines.items():
            self.seen_on[node] += len(_containers(host, label))


def _journal(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


# contract: issue 18 "Done when" (chaos test); items 3 (node loss, driver kill + resume, gc) and 4
# (a local cluster whose nodes each have their own Docker engine).
def test_chaos_node_and_driver_killed_every_task_exactly_once(three_nodes_own_engines: Any, tmp_path: Path) -> None:
    cluster = three_nodes_own_engines
    n = int(os.environ.get("ACX_CHAOS_TASKS", "200"))
    seed = int(os.environ.get("ACX_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    chaos = Chaos(cluster, tmp_path / "r", f"chaos-{uuid.uuid4().hex[:10]}", random.Random(seed), n)
    replay = f"ACX_CHAOS_SEED={seed} ACX_CHAOS_TASKS={n}"
    print(
        f"chaos: {replay}: kill node {chaos.victim} after {chaos.node_kill_at} (+{chaos.node_kill_delay:.2f} s), "
        f"the driver after {chaos.driver_kill_at} (+{chaos.driver_kill_delay:.2f} s) finished attempts"
    )
    assert set(cluster.engines) == {"head", "w1", "w2"}, cluster.engines
    spec = _spec(tmp_path, n, chaos.run_id)
    results = tmp_path / "r"
    started = time.monotonic()

    args = [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(results), "--no-report"]
    with (tmp_path / "first.log").open("w") as log:  # a file: a full pipe would stall the driver
        first = subprocess.Popen([*args, "--cluster", cluster.url], cwd=tmp_path, env=_env(), stdout=log, stderr=log)
        try:
            chaos.watch(first, "first run", kill_driver=True, timeout=600)
        finally:
            if first.poll() is None:
                first.kill()
            first.wait(30)
    first_err = (tmp_path / "first.log").read_text()
    assert first.returncode == -9, f"{replay}: the run ended before the driver was killed: {first_err[-3000:]}"
    run_dir = results / "chaos" / chaos.run_id
    killed_at = _finished(results)

    # --resume re-attaches to the cluster (--cluster is replayed from the run's invocation)
    resume = [sys.executable, "-m", "acx", "run", "--resume", str(run_dir), "--no-report"]
    with (tmp_path / "resumed.log").open("w") as log:
        resumed = subprocess.Popen(resume, cwd=tmp_path, env=_env(), stdout=log, stderr=log)
        try:
            chaos.watch(resumed, "resumed run", kill_driver=False, timeout=600)
        finally:
            if resumed.poll() is None:
                resumed.kill()
            resumed.wait(30)
    resumed_err = (tmp_path / "resumed.log").read_text()
    assert resumed.returncode == 0, f"{replay}: {resumed_err[-3000:]}"
    assert chaos.node_killed_in is not None, f"{replay}: node {chaos.victim} was never killed"
    print(
        f"chaos: driver killed after {killed_at} results; node {chaos.victim} killed in the {chaos.node_killed_in}; "
        f"containers sampled per engine {dict(chaos.seen_on)}; run took {time.monotonic() - started:.1f} s"
    )
    _check_results(run_dir, n, replay)
    _check_retries(run_dir, chaos.victim, replay)
    _check_no_containers_left(cluster, chaos, tmp_path, replay)
    print(f"chaos: passed in {time.monotonic() - started:.1f} s ({replay})")


def _check_results(run_dir: Path, n: int, replay: str) -> None:
    expected = [f"t{i:03d}" for i in range(n)]
    # the results store, through the CLI
    listed = _acx("results", "tasks", str(run_dir), "--format", "json", cwd=run_dir)
    assert listed.returncode == 0, listed.stderr[-2000:]
    table = json.loads(listed.stdout)
    ids = [t["task_id"] for t in table["tasks"]]
    assert table["total"] == n and sorted(ids) == expected, f"{replay}: {Counter(ids).most_common(3)}"
    bad = {t["task_id"]: (t["state"], t["codes"], t["answer"]) for t in table["tasks"] if t["score"] != 1.0}
    assert not bad, f"{replay}: tasks not answered correctly: {bad}"
    assert all(t["answer"] == t["task_id"] and t["attempts"] == 1 for t in table["tasks"]), replay
    # the result files: one final attempt per task (k = 1), each for its own task
    files = list(run_dir.glob("details/*/*/attempt-*/result.json"))
    per_task = Counter(json.loads(p.read_text())["task_id"] for p in files)
    assert sorted(per_task) == expected and set(per_task.values()) == {1}, f"{replay}: {per_task.most_common(3)}"
    # the journal: no task or attempt finished twice over both driver processes (a task whose result
    # was stored just before the kill may have no journal line: resume adopts the stored result)
    journal = _journal(run_dir)
    finished = Counter(e["task_id"] for e in journal if e.get("kind") == "task_finished")
    attempts = Counter((e["task_id"], e["attempt"]) for e in journal if e.get("kind") == "attempt_finished")
    assert set(finished.values()) | set(attempts.values()) == {1}, f"{replay}: {finished.most_common(3)}"
    assert len(finished) >= n - 12, f"{replay}: {n - len(finished)} tasks without a journal line"  # ≤ concurrency
    runs = [e["kind"] for e in journal if e["kind"].startswith("run_")]
    assert runs == ["run_started", "run_resumed", "run_finished"], f"{replay}: {runs}"
    # nothing counted twice into the metrics
    counts = json.loads((run_dir / "metrics.json").read_text())["counts"]
    assert counts == {"tasks": n, "normal": n, "error": 0, "fatal": 0}, f"{replay}: {counts}"
    # the cluster's own duplicate counter: replies to calls given up on (the killed node's, the
    # cancelled ones) are discarded, counted and never applied
    log = (run_dir / "run.log").read_text()
    summary = r"cluster: \d+ call\(s\), sessions per node (\{.*\}), nodes lost .*, late replies discarded (\d+)"
    summaries = re.findall(summary, log)
    assert summaries, f"{replay}: no cluster summary in run.log"
    print(f"chaos: cluster summaries (sessions per node, late replies discarded): {summaries}")


def _check_retries(run_dir: Path, victim: str, replay: str) -> None:
    """Every re-run was an infrastructure loss on the killed node: no other failure hid behind a retry."""
    records = [json.loads(p.read_text()) for p in run_dir.glob("details/*/*/attempt-*/retries/*.json")]
    other = [
        (r["task_id"], r["scope"], r["reason"])
        for r in records
        if r["scope"] != "infrastructure" or f"node {victim} was lost" not in json.dumps(r["issues"])
    ]
    assert other == [], f"{replay}: retries not caused by the node loss: {other[:5]}"
    print(f"chaos: {len(records)} attempt(s) re-run after the loss of {victim}")


def _check_no_containers_left(cluster: Any, chaos: Chaos, cwd: Path, replay: str) -> None:
    engines: dict[str, str] = cluster.engines
    left_on_victim = _containers(engines[chaos.victim], "acx.managed")
    cluster.start_node(chaos.victim)  # the killed node comes back (same name, same engine)
    gc = _acx("gc", "--env", "docker", "--cluster", cluster.url, cwd=cwd)
    assert gc.returncode == 0, f"{replay}: {gc.stderr[-3000:]}"
    left = {node: _containers(host, "acx.managed") + _networks(host) for node, host in engines.items()}
    assert left == {node: [] for node in engines}, f"{replay}: acx objects left after gc: {left}\n{gc.stderr[-2000:]}"
    assert _containers(None, f"acx.run_id={chaos.run_id}") == [], replay
    print(f"chaos: {len(left_on_victim)} container(s) of the killed node {chaos.victim} reclaimed by gc")


def _mounts_under(path: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(path + "/")]


def _cmdline(pid: str) -> str:
    try:
        return Path("/proc", pid, "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:  # ended meanwhile
        return ""


def _processes_naming(text: str) -> list[str]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if text.encode() in (p / "cmdline").read_bytes():
                    out.append(p.name)
            except OSError:  # ended meanwhile
                continue
    return out


# issue 18 item 4: a node engine is its own dockerd (own data root, socket, the test image copied
# in), and `stop` leaves nothing of it: no process, no mount, no directory.
def test_node_engine_is_separate_and_stop_leaves_nothing(one_worker_own_engine: Any) -> None:
    cluster = one_worker_own_engine
    try:
        engines = cluster.engines
        assert list(engines) == ["w1"]
        env = {**os.environ, "DOCKER_HOST": engines["w1"]}
        info = subprocess.run(
            ["docker", "info", "--format", "{{.DockerRootDir}}"], env=env, capture_output=True, text=True, timeout=60
        )
        assert info.stdout.strip() == f"{cluster.dir}/e1/d", info.stderr
        image = subprocess.run(["docker", "image", "inspect", BUSYBOX], env=env, capture_output=True, timeout=60)
        assert image.returncode == 0
        started = subprocess.run(
            ["docker", "run", "-d", "--label", "acx.managed=test", BUSYBOX, "sleep", "300"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert started.returncode == 0, started.stderr  # a container the stop must remove with its mounts
        assert _processes_naming(f"{cluster.dir}/e1/") and _mounts_under(cluster.dir)
        bridge = (Path(cluster.dir) / "e1" / "bridge").read_text().strip()
        assert bridge.startswith("acxe") and Path(f"/sys/class/net/{bridge}").exists()
        # the default engine keeps its own default bridge: a node engine started with --bridge=none
        # deleted the machine's docker0, and every default-network container of other runs failed
        default = subprocess.run(
            ["docker", "run", "--rm", BUSYBOX, "true"],
            env=_default_engine_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert default.returncode == 0, default.stderr
    finally:
        cluster.stop()
    assert _processes_naming(cluster.dir + "/") == []
    assert _mounts_under(cluster.dir) == []
    assert not Path(cluster.dir).exists()
    assert not Path(f"/sys/class/net/{bridge}").exists()


def _default_engine_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
