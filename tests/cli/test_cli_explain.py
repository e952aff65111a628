"""`acx explain`: winner and shadowed contributions with their sources (git config --show-origin)."""

from __future__ import annotations

import json

from acx.cli import main

ORCH = """
version: 1
task_concurrency: 4
defaults:
  harness: {id: none}
  execution: {run_timeout_seconds: 300}
requests:
  - name: qa
    benchmark: {id: exact_match, dataset: qa.jsonl}
    execution: {run_timeout_seconds: 600}
"""


def test_explain_text_lists_winner_then_shadowed(project, write, capsys) -> None:  # contract R10
    write("orch.yaml", ORCH)
    write("config.yaml", "execution: {run_timeout_seconds: 100}\n")
    code = main(
        [
            "explain",
            "orch.yaml",
            "qa",
            "execution.run_timeout_seconds",
            "--execution-params",
            '{"run_timeout_seconds": 5}',
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("execution.run_timeout_seconds = 5.0")
    assert lines[1].split()[:4] == ["winner", "command", "line", "--execution-params"]
    assert "shadowed  request `qa`" in lines[2] and "orch.yaml:9:38" in lines[2]
    assert "orchestration defaults" in lines[3] and "orch.yaml:5:36" in lines[3]
    assert "project config" in lines[4] and "config.yaml:1:34" in lines[4]
    assert "default" in lines[5] and "null" in lines[5]


def test_explain_json_and_prefix_and_orchestration_scope(project, write, capsys) -> None:
    write("orch.yaml", ORCH)
    assert main(["explain", "orch.yaml", "qa", "execution.attempts", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [f["path"] for f in payload["fields"]] == ["execution.attempts.k", "execution.attempts.strategy"]
    assert payload["fields"][0]["contributions"][-1]["winner"] is True
    assert main(["explain", "orch.yaml", "-", "task_concurrency"]) == 0
    assert "orchestration  orch.yaml:2:19" in capsys.readouterr().out


def test_explain_unknown_names_get_did_you_mean(project, write, capsys) -> None:
    write("orch.yaml", ORCH)
    assert main(["explain", "orch.yaml", "qaa", "execution"]) == 2
    assert "did you mean `qa`" in capsys.readouterr().err
    assert main(["explain", "orch.yaml", "qa", "execution.run_timout_seconds"]) == 2
    assert "did you mean `execution.run_timeout_seconds`" in capsys.readouterr().err
