"""The cluster in config (issue 18: `runtime.cluster`, `--cluster`, `acx.run(cluster=)`): located
errors for bad values, provenance in `acx explain`, the flag and the keyword override the config,
and the per-node options reach the drivers. No cluster is started here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import acx
from acx.errors import AcxUserError


def _spec(root: Path, cluster: str = "") -> Path:
    (root / "data.jsonl").write_text(json.dumps({"id": "t1", "question": "1?", "answer": "1"}) + "\n")
    spec = root / "spec.yaml"
    spec.write_text(
        f"""version: 1
name: cc
runtime:
  progress: none
  provider_limits: {{host_process: 7}}
  env_open_qps: {{host_process: 3}}
{cluster}requests:
  - name: cc
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: "echo 1", prompt_file: null}}
    environment: {{id: host_process, evaluation_environment_mode: none}}
"""
    )
    return spec


def _acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


def test_bad_cluster_values_are_located_errors(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        "  cluster:\n    address: ray://head:70000\n    max_node_losses: -1\n"
        "    provider_limits: {dockr: 2}\n    env_open_qps: {host_process: -1}\n    nodes: 3\n",
    )
    out = _acx("validate", str(spec), cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    err = out.stderr
    assert "spec.yaml:8:14: error[E0204]: `runtime.cluster.address`" in err
    assert "ray://HEAD_HOST:GCS_PORT" in err  # the help says the form
    assert "spec.yaml:9:22: error[E0204]: `runtime.cluster.max_node_losses`" in err
    assert (
        "spec.yaml:10:23: error[E0203]: `runtime.cluster.provider_limits`: unknown environment provider `dockr`" in err
    )
    assert "did you mean `docker`" in err
    assert "`runtime.cluster.env_open_qps.host_process`" in err
    assert "E0203" in err and "nodes" in err  # an unknown key of the cluster record


def test_explain_shows_where_the_cluster_setting_comes_from(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  cluster: {address: ray, max_node_losses: 4}\n")
    out = _acx("explain", str(spec), "-", "runtime.cluster.address", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert 'runtime.cluster.address = "ray"' in out.stdout and "spec.yaml:7" in out.stdout
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("runtime:\n  cluster: {max_node_losses: 5}\n")
    out = _acx(
        "explain", str(_spec(tmp_path)), "-", "runtime.cluster.max_node_losses", "--config", str(cfg), cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "runtime.cluster.max_node_losses = 5" in out.stdout and "cfg.yaml" in out.stdout


def test_the_flag_overrides_the_config_address(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="needs acx-eval[cluster] (ray)")
    spec = _spec(tmp_path, "  cluster: {address: 'ray://127.0.0.1:1'}\n")
    # the config's address is used: nothing listens there → refused before anything runs
    out = _acx("run", str(spec), "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert out.returncode == 2 and "E0701" in out.stderr and "127.0.0.1:1" in out.stderr, out.stderr
    # the flag wins over it
    out = _acx("run", str(spec), "--results-dir", str(tmp_path / "r"), "--cluster", "dask://x:1", cwd=tmp_path)
    assert out.returncode == 2 and "E0704" in out.stderr and "--cluster" in out.stderr, out.stderr
    assert not list((tmp_path / "r").rglob("run_info.json"))


def test_library_cluster_keyword(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="needs acx-eval[cluster] (ray)")
    spec = _spec(tmp_path)
    with pytest.raises(AcxUserError) as exc:
        acx.run(spec, cluster="ray://127.0.0.1:1", runtime={"results_dir": str(tmp_path / "r")})
    assert exc.value.code == "E0701"
    with pytest.raises(AcxUserError) as bad:
        acx.run(spec, cluster="dask://x:1", runtime={"results_dir": str(tmp_path / "r")})
    assert bad.value.code == "E0704"
    assert not list((tmp_path / "r").rglob("run_info.json"))


def test_per_node_options_default_to_the_runs_limits(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="needs acx-eval[cluster] (ray)")
    from acx.api import build_programs
    from acx.cluster._driver import RemoteDriver

    spec = _spec(
        tmp_path, "  cluster: {address: 'ray://127.0.0.1:1', max_node_losses: 3, env_open_qps: {host_process: 0.5}}\n"
    )
    _, programs = build_programs(str(spec))  # attaching connects nothing yet
    driver = programs[0].driver
    assert isinstance(driver, RemoteDriver)
    assert driver.max_infrastructure_losses == 3
    assert driver.node_provider_limits["host_process"] == 7  # runtime.provider_limits, per node too
    assert driver.node_open_qps["host_process"] == 0.5  # runtime.cluster.env_open_qps wins


def test_bad_runtime_override_of_a_compiled_plan_is_a_located_error(tmp_path: Path) -> None:
    # was: "internal error" (a msgspec ValidationError) for any bad --runtime-params with a plan.json
    spec = _spec(tmp_path)
    assert _acx("compile", str(spec), "-o", str(tmp_path / "plan.json"), cwd=tmp_path).returncode == 0
    for params, where in (
        ('{"cluster": {"address": "ray://h:0"}}', "--runtime-params cluster.address"),
        ('{"timeout_seconds": -1}', "--runtime-params timeout_seconds"),
    ):
        out = _acx("run", str(tmp_path / "plan.json"), "--runtime-params", params, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert f"`{where}`" in out.stderr and "E0204" in out.stderr and "internal error" not in out.stderr
