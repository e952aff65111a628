"""Placement and the node-loss budget on real local Ray clusters (scripts/ray-local-cluster.sh).
Issue 18 item 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.cluster


def _spec(root: Path, n: int, *, env: str = "host_process", command: str = "echo 1", extra_runtime: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i:03d}", "question": "1?", "answer": "1"}) + "\n" for i in range(n))
    )
    spec = root / "spec.yaml"
    spec.write_text(
        f"""version: 1
name: pl
task_concurrency: 8
runtime: {{progress: none{extra_runtime}}}
requests:
  - name: pl
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: {json.dumps(command)}, prompt_file: null}}
    environment: {{id: {env}, evaluation_environment_mode: none}}
    execution: {{run_timeout_seconds: 60, max_retries: 0}}
"""
    )
    return spec


def _acx(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def _results(results_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for p in results_dir.glob("pl/*/details/*/*/attempt-1/result.json"):
        d = json.loads(p.read_text())
        out[d["task_id"]] = d
    return out


# issue 18 item 2: node labels. Tasks needing a driver only one node serves all land there; a
# need no node meets is refused before anything runs (exit 2), naming the need and the nodes.
def test_labels_place_tasks_on_the_node_that_serves_them(labelled: Any, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "host", 8)
    out = _acx(
        "run", str(spec), "--results-dir", str(tmp_path / "r"), "--no-report", "--cluster", labelled.url, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = _results(tmp_path / "r")
    assert len(got) == 8 and all(r["status"] == "completed" for r in got.values())
    log = next((tmp_path / "r").glob("pl/*/run.log")).read_text()
    assert "sessions per node {'w2': 8}" in log, log[-2000:]

    bad = _spec(tmp_path / "bwrap", 1, env="bwrap")
    refused = _acx(
        "run", str(bad), "--results-dir", str(tmp_path / "r2"), "--no-report", "--cluster", labelled.url, cwd=tmp_path
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    err = refused.stderr
    assert "E0701" in err and "need driver bwrap" in err, err[-2000:]
    assert "w1: serves only docker" in err and "w2: serves only host_process" in err, err
    assert "Traceback" not in err
    assert not list((tmp_path / "r2").rglob("run_info.json"))


def _wait_for(predicate: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _finished(results: Path) -> int:
    try:
        return sum(1 for _ in results.glob("pl/*/details/*/*/attempt-1/result.json"))
    except OSError:  # a task directory moved while globbing
        return 0


# issue 18 item 2: a worker node killed mid-run; its attempts run again on the other node without
# consuming max_retries (0 here), within runtime.cluster.max_node_losses — the cluster set in the
# spec's runtime, not on the command line.
def test_node_loss_does_not_consume_max_retries(two_workers: Any, tmp_path: Path) -> None:
    extra = f", cluster: {{address: {json.dumps(two_workers.url)}, max_node_losses: 1}}"
    # 3 waves of 8 (2 nodes × 4 slots) × 5 s: w1 still holds sandboxes when it is killed, even on a
    # loaded machine where the kill itself takes seconds
    spec = _spec(tmp_path, 24, command="sleep 5; echo 1", extra_runtime=extra)
    results = tmp_path / "r"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(results), "--no-report"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: _finished(results) >= 2, 180), "no task finished on the cluster"
        two_workers.kill_node("w1")
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    got = _results(results)
    assert sorted(got) == [f"t{i:03d}" for i in range(24)]
    assert all(r["status"] == "completed" and r["retry_count"] == 0 for r in got.values())
    lost = [r for r in got.values() if r["telemetry"].get("infrastructure_losses")]
    assert lost, f"no attempt was on the killed node: {stderr[-2000:]}"
    records = [json.loads(p.read_text()) for p in results.glob("pl/*/details/*/*/attempt-1/retries/*.json")]
    assert len(records) == len(lost)
    assert all(r["scope"] == "infrastructure" and "node_lost" in r["reason"] for r in records)


def _docker_spec(root: Path, n: int, image: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i:03d}", "question": "1?", "answer": "1"}) + "\n" for i in range(n))
    )
    spec = root / "spec.yaml"
    spec.write_text(
        f"""version: 1
name: pl
task_concurrency: 4
runtime: {{progress: none}}
requests:
  - name: pl
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: ["sh", "-c", "echo 1"], prompt_file: null}}
    environment:
      id: docker
      setup: {{image: {json.dumps(image)}}}
      run_network_policy: no-network
      evaluation_environment_mode: none
    execution: {{run_timeout_seconds: 60, max_retries: 0}}
"""
    )
    return spec


# issue 18 item 2: an image present is a node label. Each node has its own Docker engine; w2's
# lacks the image: every sandbox needing it lands on w1; an image no node has is refused at start.
@pytest.mark.docker
def test_image_labels_on_nodes_with_their_own_engines(two_workers_own_engines: Any, tmp_path: Path) -> None:
    cluster = two_workers_own_engines
    image = "acx-test/busybox:latest"
    engines = cluster.engines
    assert set(engines) == {"w1", "w2"}, engines
    env = {**os.environ, "DOCKER_HOST": engines["w2"]}
    subprocess.run(["docker", "rmi", "-f", image], env=env, check=True, capture_output=True, timeout=60)

    spec = _docker_spec(tmp_path / "present", 4, image)
    out = _acx(
        "run", str(spec), "--results-dir", str(tmp_path / "r"), "--no-report", "--cluster", cluster.url, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = _results(tmp_path / "r")
    assert len(got) == 4 and all(r["status"] == "completed" for r in got.values()), [r["issues"] for r in got.values()]
    log = next((tmp_path / "r").glob("pl/*/run.log")).read_text()
    assert "sessions per node {'w1': 4}" in log, log[-2000:]

    absent = "acx-test/never-there:0"
    refused = _acx(
        "run",
        str(_docker_spec(tmp_path / "absent", 1, absent)),
        "--results-dir",
        str(tmp_path / "r2"),
        "--no-report",
        "--cluster",
        cluster.url,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    err = refused.stderr
    assert f"need driver docker with image {absent}" in err, err[-2000:]
    assert f"w1: image {absent} not present" in err and f"w2: image {absent} not present" in err, err
    assert not list((tmp_path / "r2").rglob("run_info.json"))
