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
    """``engine``: ``shared`` (every node uses this machine's default engine) or ``own`` (every node
    with slots gets a dockerd of its own, see :attr:`engines`); ``args``: more ``start`` arguments."""

    def __init__(
        self,
        workers: int,
        slots: int,
        args: tuple[str, ...] = (),
        *,
        engine: str = "shared",
        head_slots: int | None = None,
    ) -> None:
        self.dir = f"/tmp/acxr-{uuid.uuid4().hex[:8]}"  # short: Ray's Unix sockets live under it
        bindir = os.path.dirname(sys.executable)
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "RAY": f"{bindir}/ray"}
        args = ("--workers", str(workers), "--slots", str(slots), "--engine", engine, *args)
        if head_slots is not None:
            args += ("--head-slots", str(head_slots))
        out = subprocess.run(
            ["bash", str(SCRIPT), "start", self.dir, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
        )
        if out.returncode != 0:
            self.stop()
            raise RuntimeError(f"local Ray cluster did not start: {out.stderr[-2000:]}")
        self.address = out.stdout.strip().splitlines()[-1]

    @property
    def url(self) -> str:
        return f"ray://{self.address}"

    @property
    def engines(self) -> dict[str, str]:
        """Node name → DOCKER_HOST of the node's own engine (``engine="own"``)."""
        lines = Path(self.dir, "engines").read_text().splitlines()
        return dict(line.split(" ", 1) for line in lines if line.strip())

    def kill_node(self, name: str) -> None:
        subprocess.run(["bash", str(SCRIPT), "kill-node", self.dir, name], check=True, env=self.env, timeout=30)

    def start_node(self, name: str) -> None:
        subprocess.run(["bash", str(SCRIPT), "start-node", self.dir, name], check=True, env=self.env, timeout=120)

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", self.dir], env=self.env, timeout=120)


@pytest.fixture(scope="module")
def one_node() -> Iterator[LocalCluster]:
    _require_ray()
    cluster = LocalCluster(workers=0, slots=8, engine="shared")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def two_workers() -> Iterator[LocalCluster]:
    _require_ray()
    cluster = LocalCluster(workers=2, slots=4, engine="shared")
    try:
        yield cluster
    finally:
        cluster.stop()


def _own_engine_problem() -> str | None:
    """Why nodes cannot get Docker engines of their own here (None: they can)."""
    import shutil

    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        return "dockerd/docker are not installed (bash scripts/setup-docker.sh)"
    if os.geteuid() != 0 and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
        return "starting a node's dockerd needs root or passwordless sudo"
    probe = subprocess.run(
        ["docker", "image", "inspect", "acx-test/busybox:latest"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0:
        why = probe.stderr.strip()[-300:]
        return f"no default Docker engine or no acx-test/busybox image ({why}); run: bash scripts/setup-docker.sh"
    return None


@pytest.fixture()
def own_engines_problem() -> None:
    """Ray and what node engines need (dockerd, root, the default engine with the test image): a
    skip without them, a failure under ACX_REQUIRE_DOCKER=1."""
    _require_ray()
    problem = _own_engine_problem()
    if problem is not None:
        if os.environ.get("ACX_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{problem} and ACX_REQUIRE_DOCKER=1")
        pytest.skip(f"!!! node engines cannot be started: {problem}: test SKIPPED !!!")


@pytest.fixture()
def three_nodes_own_engines(own_engines_problem: None) -> Iterator[LocalCluster]:
    """Head + 2 workers, 4 slots each, every node with its own dockerd (issue 18 item 4)."""
    cluster = LocalCluster(workers=2, slots=4, engine="own", head_slots=4)
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


@pytest.fixture()
def one_worker_own_engine(own_engines_problem: None) -> Iterator[LocalCluster]:
    """A head without slots and one worker with 2 slots and its own dockerd."""
    cluster = LocalCluster(workers=1, slots=2, engine="own")
    try:
        yield cluster
    finally:
        cluster.stop()  # again when the test stopped it: a no-op then


@pytest.fixture()
def two_workers_own_engines(own_engines_problem: None) -> Iterator[LocalCluster]:
    """Two worker nodes (the head holds no slots), each with a Docker engine of its own."""
    cluster = LocalCluster(workers=2, slots=4, engine="own")
    try:
        yield cluster
    finally:
        cluster.stop()
