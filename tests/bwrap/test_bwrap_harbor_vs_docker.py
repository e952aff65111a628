"""The Harbor examples score the same on bwrap as on docker, and bwrap needs no daemon once its
image cache is warm (contracts H1-H5, P7, T3).

Three agents per task — the oracle (1), a do-nothing agent (0) and a cheater that forges the reward
and leaves a daemon rewriting it (0) — so the comparison covers verification, artifacts, the
fresh verifier and the stray-process sweep, not only the happy path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "harbor"
TASKS = sorted(p.name for p in EXAMPLES.iterdir() if (p / "task.toml").is_file())

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def _require_engine() -> None:
    try:
        ok = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if not ok:
        message = "!!! DOCKER TESTS NOT RUN: no Docker engine answers (run: bash scripts/setup-docker.sh)"
        if os.environ.get("ACX_REQUIRE_DOCKER") == "1":
            pytest.fail(message + " (ACX_REQUIRE_DOCKER=1)", pytrace=False)
        pytest.skip(message)


def _spec(tmp_path: Path, env: str) -> Path:
    text = (EXAMPLES / "harbor-docker.acx").read_text()
    text = text.replace('path = "."', f'path = "{EXAMPLES}"')
    text = text.replace("environment docker", env)
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = tmp_path / "harbor.acx"
    spec.write_text(text)
    return spec


def _bwrap(cache: Path) -> str:
    return f'environment bwrap {{\n image_cache = "{cache}"\n allow_root = true\n }}'  # CI runs as root


def _run(spec: Path, results: Path, **env: str) -> dict[tuple[str, str], float | None]:
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(results), "--progress", "none"],
        cwd=spec.parent,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    scores: dict[tuple[str, str], float | None] = {}
    for path in results.glob("*/*/details/*/*/attempt-1/result.json"):
        data = json.loads(path.read_text())
        scores[(path.relative_to(results).parts[0], data["task_id"])] = data["metrics"].get("score")
    return scores


def test_harbor_examples_score_the_same_on_bwrap_and_docker(tmp_path: Path) -> None:
    # contract H1-H5: same scores on both drivers, every agent × every example task
    docker = _run(_spec(tmp_path / "d", "environment docker"), tmp_path / "d" / "results")
    cache = tmp_path / "cache"
    bwrap = _run(
        _spec(tmp_path / "b", _bwrap(cache)),
        tmp_path / "b" / "results",
    )
    expected = {(agent, task) for agent in ("oracle", "idle", "cheater") for task in TASKS}
    assert set(docker) == expected and set(bwrap) == expected
    assert bwrap == docker
    assert {t: docker[("oracle", t)] for t in TASKS} == dict.fromkeys(TASKS, 1.0)
    # Warm cache: the same run with no reachable engine at all (no daemon at run time).
    offline = _run(
        _spec(tmp_path / "o", _bwrap(cache)),
        tmp_path / "o" / "results",
        DOCKER_HOST="unix:///nonexistent/acx-no-docker.sock",
    )
    assert offline == docker


def test_missing_images_are_located_errors_with_the_fix(tmp_path: Path) -> None:
    # An unknown image, and a known one with no engine and a cold cache: image_not_found + help.
    import trio

    from acx.drivers._base import OpenRequest
    from acx.drivers.bwrap import BwrapConfig, BwrapDriver
    from acx.errors import EnvironmentSetupError
    from acx.ir import EnvironmentSetup

    def open_image(image: str, **kw: str) -> EnvironmentSetupError:
        driver = BwrapDriver(
            BwrapConfig(image_cache=str(tmp_path / "cache"), workdir_root=str(tmp_path), allow_root=True, **kw)
        )
        request = OpenRequest(session_id="img", setup=EnvironmentSetup(image=image))
        with pytest.raises(EnvironmentSetupError) as info:
            trio.run(driver.open, request)
        return info.value

    unknown = open_image("acx-test/no-such-image:latest")
    assert unknown.code == "image_not_found" and "not present" in str(unknown) and unknown.fields.get("help")
    offline = open_image("acx-test/bookworm:latest", docker_host="unix:///nonexistent/acx-no-docker.sock")
    assert offline.code == "image_not_found" and "no Docker engine answers" in str(offline)
    assert "run once with a Docker engine" in offline.fields.get("help", "")
    assert not list(tmp_path.glob("acx-bwrap-*")), "a failed open leaves no session directory"
