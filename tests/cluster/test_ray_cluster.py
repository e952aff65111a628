"""acx run --cluster on real local Ray clusters (scripts/ray-local-cluster.sh). Issue 18."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.cluster


def _spec(root: Path, n: int, command: str = "echo 1", max_retries: int = 0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i:03d}", "question": "1?", "answer": "1"}) + "\n" for i in range(n))
    )
    spec = root / "spec.yaml"
    spec.write_text(
        f"""version: 1
name: cl
task_concurrency: 8
runtime: {{progress: none}}
requests:
  - name: cl
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: {json.dumps(command)}, prompt_file: null}}
    environment: {{id: host_process, evaluation_environment_mode: none}}
    execution: {{run_timeout_seconds: 60, max_retries: {max_retries}}}
"""
    )
    return spec


def _acx(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def _results(results_dir: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for p in sorted(results_dir.glob("cl/*/details/*/*/attempt-*/result.json")):
        d = json.loads(p.read_text())
        out.setdefault(d["task_id"], []).append(d)
    return out


# issue 18 item 1: the same results through a 1-node local cluster as without one.
def test_same_results_through_a_one_node_cluster(one_node: Any, tmp_path: Path) -> None:
    spec = _spec(tmp_path, 20)
    local = _acx("run", str(spec), "--results-dir", str(tmp_path / "local"), "--no-report", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    remote = _acx(
        "run",
        str(spec),
        "--results-dir",
        str(tmp_path / "remote"),
        "--no-report",
        "--cluster",
        one_node.url,
        cwd=tmp_path,
    )
    assert remote.returncode == 0, remote.stderr
    assert "1 node(s): head (8 slots)" in remote.stderr
    a, b = _results(tmp_path / "local"), _results(tmp_path / "remote")
    assert len(a) == 20 and sorted(a) == sorted(b)
    for task_id in a:
        assert [(r["status"], r["metrics"]) for r in a[task_id]] == [(r["status"], r["metrics"]) for r in b[task_id]], [
            (r["issues"], r["issues"]) for r in a[task_id] + b[task_id]
        ]
    log = next((tmp_path / "remote").glob("cl/*/run.log")).read_text()
    assert "cluster: " in log and "'head': 20" in log  # every session ran on the cluster node


def test_unreachable_cluster_is_refused_before_anything_runs(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    spec = _spec(tmp_path, 1)
    out = _acx("run", str(spec), "--results-dir", str(tmp_path / "r"), "--cluster", "ray://127.0.0.1:1", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "E0701" in out.stderr and "Ray cluster" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("run_info.json"))


def test_bad_cluster_flag(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 1)
    out = _acx("run", str(spec), "--cluster", "dask://x:1", cwd=tmp_path)
    assert out.returncode == 2 and "E0704" in out.stderr and "Traceback" not in out.stderr


def _wait_for(predicate: Any, timeout: float) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _count(results_dir: Path, pattern: str) -> int:
    """Files matching ``pattern`` now (0 while the run moves a task directory under the glob)."""
    try:
        return sum(1 for _ in results_dir.glob(pattern))
    except OSError:
        return 0


def _started(results_dir: Path) -> int:
    return _count(results_dir, "cl/*/details/*/*/attempt-*/result.json")


# issue 18 item 3: a worker node killed mid-run → its attempts are retried on the other node within
# the retry budget; every task exactly once in the results; the driver killed → --resume
# re-attaches and finishes with nothing lost or duplicated.
def test_node_loss_and_driver_kill_then_resume(two_workers: Any, tmp_path: Path) -> None:
    import signal
    import time

    spec = _spec(tmp_path, 40, command="sleep 2; echo 1", max_retries=3)
    results = tmp_path / "r"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    args = [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(results), "--no-report"]
    proc = subprocess.Popen(
        [*args, "--cluster", two_workers.url], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert _wait_for(lambda: _started(results) >= 4, 120), "no task finished on the cluster"
        two_workers.kill_node("w1")
        # the attempts that were on w1 fail with node_lost and run again (on w2)
        assert _wait_for(lambda: _count(results, "cl/*/details/*/*/attempt-1/retries/*.json") > 0, 120)
        assert _wait_for(lambda: _started(results) >= 20, 120)
        proc.send_signal(signal.SIGKILL)  # the driver killed once
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_dir = next(results.glob("cl/*"))
    # --resume re-attaches to the cluster (--cluster is replayed from the run's invocation)
    resumed = _acx("run", "--resume", str(run_dir), "--no-report", cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = _results(results)
    assert sorted(got) == [f"t{i:03d}" for i in range(40)]
    assert all(len(v) == 1 for v in got.values())  # every task exactly once (k = 1)
    assert all(v[0]["metrics"].get("correct") is True for v in got.values()), {
        k: v[0]["issues"] for k, v in got.items() if v[0]["metrics"].get("correct") is not True
    }
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "40" in json.dumps(metrics)
    log = (run_dir / "run.log").read_text()
    retried = list(run_dir.glob("details/*/*/attempt-1/retries/*.json"))
    # a node loss is its own budget (runtime.cluster.max_node_losses), not max_retries
    assert any("node_lost" in p.read_text() and "w1" in p.read_text() for p in retried)
    assert any(json.loads(p.read_text())["scope"] == "infrastructure" for p in retried)
    assert "cluster: " in log  # the resumed run's cluster summary
    # the killed node's sandboxes (host_process: session directories on this machine) are reclaimed
    # by `acx gc --cluster` through the surviving node's worker: their owner (w1's worker) is gone
    gc = _acx("gc", "--env", "host_process", "--cluster", two_workers.url, cwd=tmp_path)
    # (host_process sessions of this machine's other tests are listed too: one that its own run
    # closes while gc runs is a failure that is not about this run)
    ours = _session_ids(run_dir)
    failed = {line.split(" session ", 1)[1].split(":", 1)[0] for line in gc.stderr.splitlines() if " session " in line}
    assert gc.returncode == 0 or not failed & ours, gc.stderr[-2000:]
    listed = _acx(
        "env", "list", "--env", "host_process", "--format", "json", "--cluster", two_workers.url, cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert ours and [r for r in json.loads(listed.stdout) if r["id"] in ours] == []
    started = time.monotonic()
    # nothing of the run is left running on the surviving node
    assert _wait_for(lambda: not _run_processes(_prefix(run_dir)), 30), time.monotonic() - started


def _session_ids(run_dir: Path) -> set[str]:
    """The sessions the run opened, from its journal (run ids alone are per second: not unique)."""
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    return {e["id"] for e in map(json.loads, lines) if e.get("kind") == "session_opened"}


def _prefix(run_dir: Path) -> str:
    """What every session id of the run starts with (``<run id>-<run key>-``)."""
    ids = _session_ids(run_dir) if (run_dir / "journal.jsonl").exists() else set()
    return next(iter(ids)).rsplit("-", 1)[0] + "-" if ids else "\0no session yet"


def _run_processes(prefix: str) -> list[str]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "environ").read_bytes()
                if prefix.encode() in cmd and b"sleep" in (p / "cmdline").read_bytes():
                    out.append(p.name)
            except OSError:  # ended meanwhile
                continue
    return out


def _docker_problem() -> str | None:
    try:
        from acx.drivers.docker import docker_client

        client = docker_client()
        client.ping()
        client.images.get("acx-test/busybox:latest")
    except Exception as exc:
        return f"no Docker engine or test image ({type(exc).__name__}: {exc}); run: bash scripts/setup-docker.sh"
    return None


# issue 18 item 1 with Docker sandboxes: the node's worker opens them on its own engine; the same
# results as without the cluster; no container of the run left afterwards.
@pytest.mark.docker
def test_docker_tasks_through_the_cluster(one_node: Any, tmp_path: Path) -> None:
    problem = _docker_problem()
    if problem is not None:
        if os.environ.get("ACX_REQUIRE_DOCKER") == "1":
            pytest.fail(problem)
        pytest.skip("!!! " + problem)
    examples = Path(__file__).resolve().parents[2] / "examples"
    spec = str(examples / "docker-smoke.acx")
    common = ["--no-report", "--format", "json"]
    local = _acx("run", spec, "--results-dir", str(tmp_path / "local"), *common, cwd=tmp_path)
    remote = _acx(
        "run", spec, "--results-dir", str(tmp_path / "remote"), *common, "--cluster", one_node.url, cwd=tmp_path
    )
    assert local.returncode == remote.returncode, (local.stderr[-2000:], remote.stderr[-2000:])

    def results(root: Path) -> dict[str, Any]:
        out = {}
        for p in root.rglob("attempt-*/result.json"):
            d = json.loads(p.read_text())
            out[d["task_id"]] = (d["status"], d["metrics"], sorted(i["code"] for i in d["issues"]))
        return out

    a, b = results(tmp_path / "local"), results(tmp_path / "remote")
    assert len(a) == 2 and a == b
    request = json.loads(remote.stdout)["requests"][0]
    assert "'head': 2" in (Path(request["run_dir"]) / "run.log").read_text()  # both sandboxes on the node
    run_id = request["run_id"]
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=acx.run_id={run_id}"], capture_output=True, text=True, check=True
    )
    assert left.stdout.strip() == ""


# issue 18 item 3: Ctrl-C releases every sandbox on the node within the grace period.
def test_ctrl_c_releases_the_sandboxes_on_the_node(one_node: Any, tmp_path: Path) -> None:
    import signal
    import time

    spec = _spec(tmp_path, 6, command="sleep 60; echo 1")
    results = tmp_path / "r"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(results), "--no-report"]
    proc = subprocess.Popen([*cmd, "--cluster", one_node.url], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        # the agents run (on the node): 6 `sleep 60` of this run
        assert _wait_for(lambda: len(_sleepers(results)) >= 6, 120), "the tasks did not start"
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
        assert time.monotonic() - started < 30  # within the grace period, not after the sleeps
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_for(lambda: not _sleepers(results), 10), _sleepers(results)
    listed = _acx("env", "list", "--env", "host_process", "--format", "json", "--cluster", one_node.url, cwd=tmp_path)
    ours = _session_ids(next(results.glob("cl/*")))
    assert ours and [r for r in json.loads(listed.stdout) if r["id"] in ours] == []


def _sleepers(results: Path) -> list[str]:
    """`sleep 60` processes started for the run whose results go to ``results``."""
    runs = list(results.glob("cl/*"))
    out = []
    for pid in _run_processes(_prefix(runs[0])) if runs else []:
        try:
            if b"60" in (Path("/proc") / pid / "cmdline").read_bytes():
                out.append(pid)
        except OSError:  # ended meanwhile
            continue
    return out
