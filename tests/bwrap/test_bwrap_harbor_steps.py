"""Harbor multi-step tasks on bwrap score as on docker and as Harbor defines them (issue 22
item 4): each step's agent and verifier in order in one sandbox, a reward per step, the task's
reward by Harbor's mean / final rules. The tasks are the parity corpus's (tests/docker/harbor_parity);
steps-user-env and steps-network need per-user commands and network switching, which the docker
run covers (tests/docker/test_harbor_parity.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.bwrap.test_bwrap_harbor_vs_docker import _require_engine as _require_engine
from tests.docker.test_harbor_parity import CORPUS, EXPECTED, STEP_REWARDS

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ["steps-final-gate", "steps-mean"]


def test_multi_step_tasks_score_on_bwrap_as_harbor_defines(tmp_path: Path) -> None:
    spec = tmp_path / "steps.acx"
    spec.write_text(
        "orchestration steps {\n  task_concurrency = 2\n"
        f'  defaults {{\n    benchmark harbor {{ path = "{CORPUS}"; task_names = {json.dumps(TASKS)} }}\n'
        f'    environment bwrap {{\n      image_cache = "{tmp_path / "cache"}"\n      allow_root = true\n    }}\n  }}\n'
        "  run oracle { harness oracle }\n"
        '  run idle { harness command { command = ["true"] } }\n'
        "}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(tmp_path / "r"), "--progress", "none"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for column, run in enumerate(("oracle", "idle")):
        results = {}
        for path in (tmp_path / "r" / run).glob("*/details/*/*/attempt-1/result.json"):
            data = json.loads(path.read_text())
            results[data["task_id"]] = data
        for task in TASKS:
            assert results[task]["metrics"]["score"] == pytest.approx(EXPECTED[task][column]), results[task]["issues"]
            want, skipped = STEP_REWARDS[(task, run)]
            assert [s["rewards"] for s in results[task]["extra"]["steps"]] == want
            assert results[task]["extra"].get("steps_skipped", []) == skipped
