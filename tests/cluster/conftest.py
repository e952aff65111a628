"""Ray cluster fixtures: local clusters started with scripts/ray-local-cluster.sh and always stopped
(by their own directory: other processes are never touched)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ray-local-cluster.sh"


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("ACX_REQUIRE_RAY") == "1":
            pytest.fail("ray is not installed and ACX_REQUIRE_RAY=1 (pip install -e '.[cluster]')")
        pytest.skip("!!! ray is not installed: cluster tests SKIPPED (pip install -e '.[cluster]') !!!")


class LocalCluster:
    def __init__(self, workers: int, slots: int, args: tuple[str, ...] = ()) -> None:
        self.dir = f"/tmp/acxr-{uuid.uuid4().hex[:8]}"  # short: Ray's Unix sockets live under it
        bindir = os.path.dirname(sys.executable)
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "RAY": f"{bindir}/ray"}
        out = subprocess.run(
            ["bash", str(SCRIPT), "start", self.dir, "--workers", str(workers), "--slots", str(slots), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=180,
        )
        if out.returncode != 0:
            self.stop()
            raise RuntimeError(f"local Ray cluster did not start: {out.stderr[-2000:]}")
        self.address = out.stdout.strip().splitlines()[-1]

    @property
    def url(self) -> str:
        return f"ray://{self.address}"

    def kill_node(self, name: str) -> None:
        subprocess.run(["bash", str(SCRIPT), "kill-node", self.dir, name], check=True, env=self.env, timeout=30)

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", self.dir], env=self.env, timeout=120)


@pytest.fixture(scope="module")
def one_node() -> Iterator[LocalCluster]:
    _require_ray()
    cluster = LocalCluster(workers=0, slots=8)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def two_workers() -> Iterator[LocalCluster]:
    _require_ray()
    cluster = LocalCluster(workers=2, slots=4)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def labelled() -> Iterator[LocalCluster]:
    """Two worker nodes declaring the providers they serve: w1 docker only, w2 host_process only."""
    _require_ray()
    cluster = LocalCluster(workers=2, slots=4, args=("--drivers", "w1=docker", "--drivers", "w2=host_process"))
    try:
        yield cluster
    finally:
        cluster.stop()
