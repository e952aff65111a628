"""A real acx run for the export and import tests: `acx run` on host_process with the react
harness against the scripted model server on loopback (three tasks, two attempts each: tool calls
with reasoning, a wrong then right answer, and a task whose model calls fail), and the peers'
own readers: inspect-ai in this interpreter, harbor (Python >= 3.12) through the pyenv 3.12
interpreter in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acx.testing.fake_models import FakeModelServer, Step, error, tool_call

KEY = "sk-interop-secret-5521"
ROWS = [
    {"id": "q0", "question": "What is 6 times 7?", "answer": "42"},
    {"id": "q1", "question": "What is 2+2?", "answer": "4"},
    {"id": "q/2 odd id", "question": "What is 1+1?", "answer": "2"},
]


def acx(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _script() -> list[Step]:
    bash = Step(
        "message",
        reasoning="multiply first",
        tool_calls=(("c1", "bash", {"command": "echo $((6*7))"}),),
        finish_reason="tool_calls",
        usage=(100, 10, 20),
    )
    submit42 = tool_call("submit", {"answer": "42"}, call_id="c2", usage=(130, 8))
    fail = error(400, "scripted bad request")
    return [
        bash, submit42, bash, submit42,
        tool_call("submit", {"answer": "5"}, call_id="c3", usage=(50, 5)),
        tool_call("submit", {"answer": "4"}, call_id="c4", usage=(50, 5)),
        fail, fail,
    ]  # fmt: skip


@pytest.fixture(scope="session")
def acx_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a finished acx run (read-only for the tests: copy before changing)."""
    root = tmp_path_factory.mktemp("acx-run")
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with FakeModelServer(_script(), default=None) as srv:
        (root / "run.yaml").write_text(
            f"""version: 1
name: interop
task_concurrency: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: interop
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: react}}
    model: {{id: m1, base_url: "{srv.base_url}", api_key: "${{MKEY}}", max_retries: 0}}
    environment: {{id: host_process}}
    execution: {{attempts: {{k: 2, strategy: avg}}}}
    output: {{export: [{{format: inspect}}, {{format: harbor, dir: exports/hb}}]}}
"""
        )
        res = acx("run", "run.yaml", "--no-report", cwd=root)
    assert res.returncode in (0, 1), res.stderr + res.stdout
    assert res.stdout.count("  export: ") == 2 and "export was not written" not in res.stderr, res.stderr
    (run_dir,) = (root / "results" / "interop").iterdir()
    return run_dir


@pytest.fixture(scope="session")
def model_key() -> str:
    """The model key the run used: no export may contain it."""
    return KEY


def harbor_python() -> list[str] | None:
    """The interpreter that has the harbor package (it needs Python >= 3.12), or None."""
    candidates = [[sys.executable]]
    if shutil.which("python3.12"):
        candidates.append(["python3.12"])
    for cmd in candidates:
        env = {**os.environ, "PYENV_VERSION": "3.12.1"}
        probe = subprocess.run([*cmd, "-c", "import harbor.models.trial.result"], env=env, capture_output=True)
        if probe.returncode == 0:
            return cmd
    return None


@pytest.fixture(scope="session")
def harbor_py() -> list[str]:
    cmd = harbor_python()
    if cmd is None:
        if os.environ.get("ACX_REQUIRE_PEERS") == "1":
            pytest.fail("the harbor package is required (ACX_REQUIRE_PEERS=1) but no interpreter has it")
        pytest.skip("!!! harbor tests SKIPPED: pip install harbor under Python >= 3.12 (python3.12) !!!")
    return cmd
