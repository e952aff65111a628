"""A model named only by role (`model.roles.agent`, no `model.id`/`model.base_url`) passes E0306 at
compile time, so the harnesses that call a model must use it: `react` and `openai_chat` answer a
QA task through the agent role's endpoint, end to end (real `acx run`, scripted model server on
loopback). Contracts M4 (model calls through the gateway), M6."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acx.testing.fake_models import FakeModelServer, text, tool_call

KEY = "sk-role-only-secret-5521"


def _run(tmp_path: Path, harness: str, base_url: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "What is 6 times 7?", "answer": "42"}))
    (tmp_path / "run.yaml").write_text(
        f"""version: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: r
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: {harness}}}
    model:
      roles:
        agent: {{id: role-model, base_url: "{base_url}", api_key: "${{MKEY}}"}}
    environment: {{id: host_process}}
"""
    )
    return subprocess.run(
        [sys.executable, "-m", "acx", "run", "run.yaml", "--no-report"],
        cwd=tmp_path,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=180,
    )


def _result(tmp_path: Path) -> dict[str, Any]:
    (path,) = (tmp_path / "results" / "r").rglob("attempt-1/result.json")
    result: dict[str, Any] = json.loads(path.read_text())
    return result


@pytest.mark.parametrize(
    ("harness", "script"),
    [
        ("react", [tool_call("submit", {"answer": "42"}, call_id="c1")]),
        ("openai_chat", [text("42")]),
    ],
)
def test_a_harness_uses_the_agent_role_when_no_top_level_model_is_given(
    tmp_path: Path, harness: str, script: list[Any]
) -> None:  # contracts M4, M6
    with FakeModelServer(script, default=None) as srv:
        res = _run(tmp_path, harness, srv.base_url)
        assert res.returncode == 0, res.stderr + res.stdout
        assert len(srv.requests) == 1
        (call,) = srv.requests
        assert call.body["model"] == "role-model"
        assert call.headers.get("authorization", call.headers.get("Authorization")) == f"Bearer {KEY}"
    r = _result(tmp_path)
    assert r["status"] == "completed" and not [i for i in r["issues"] if i["severity"] in ("error", "fatal")], r
    assert r["final_answer"] == "42" and r["metrics"]["correct"] is True, r
