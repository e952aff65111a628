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
        assert [(r["status"], r["metrics"]) for r in a[task_id]] == [(r["status"], r["metrics"]) for r in b[task_id]]
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
