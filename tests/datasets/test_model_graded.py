"""`model_graded` end to end on the fake model server (acx.testing.fake_models, real HTTP on loopback).

Valid grade, unparseable grade (judge_invalid_output), grader error and grader timeout
(judge_failed): a grader failure is an evaluation error and leaves the attempt unscored, never 0
(contract S2). The judge transcript stays with the attempt; judge usage is counted apart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from acx.components.scorers import ScoreContext, build_scorers
from acx.components.scorers._model_graded import RUBRICS, render_template
from acx.ir import ModelSpec, TaskSpec
from acx.testing.fake_models import FakeModelServer, error, text

CTX = ScoreContext(task=TaskSpec(task_id="t"), question="What is the capital of France?")


def _scorer(srv: FakeModelServer, **extra: Any) -> Any:
    entry = {
        "id": "model_graded",
        "model": {"id": "judge-1", "base_url": srv.base_url, "api_key": "${ACX_TEST_GRADER_KEY}"},
        "max_retries": 0,
        **extra,
    }
    (bound,) = build_scorers([entry])
    return bound.scorer


def _grade(scorer: Any, answer: str, clock: Any = None) -> Any:
    return trio.run(scorer.score, answer, ["Paris"], CTX, clock=clock)


def test_valid_grade(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACX_TEST_GRADER_KEY", "sk-grader-secret")
    with FakeModelServer([text("The submission names Paris.\nGRADE: C", usage=(120, 9))]) as srv:
        score = _grade(_scorer(srv), "It is Paris")
    assert score.value is True and score.extracted == "C" and score.issues == []
    req = srv.requests[0]
    assert req.path == "/v1/chat/completions" and req.body["model"] == "judge-1"
    assert req.headers.get("authorization") == "Bearer sk-grader-secret"
    prompt = req.body["messages"][0]["content"]
    assert "[Question]: What is the capital of France?" in prompt and "[Submission]: It is Paris" in prompt
    assert "[Expert]: Paris" in prompt
    judge = score.record["judge"]
    assert judge["output"].endswith("GRADE: C") and judge["grade"] == "C" and judge["model"] == "judge-1"
    assert "sk-grader-secret" not in json.dumps(score.record)
    assert score.usage == {"prompt_tokens": 120, "completion_tokens": 9, "cached_tokens": 0, "reasoning_tokens": 0}


def test_incorrect_and_partial_grades(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACX_TEST_GRADER_KEY", "k")
    with FakeModelServer([text("GRADE: I"), text("GRADE: P")]) as srv:
        assert _grade(_scorer(srv), "Lyon").value is False
        partial = _scorer(srv, partial_credit=True)
        assert partial.metric_kind() == "scalar"
        assert _grade(partial, "Paris, maybe").value == 0.5


def test_unparseable_grade_is_judge_invalid_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACX_TEST_GRADER_KEY", "k")
    with FakeModelServer([text("Looks right to me!")]) as srv:
        score = _grade(_scorer(srv), "Paris")
    assert score.value is None
    assert [i.code for i in score.issues] == ["judge_invalid_output"] and score.issues[0].severity == "error"
    assert score.record["judge"]["output"] == "Looks right to me!"  # kept for the reader
    assert score.usage["completion_tokens"] == 5  # the call was made and is counted


def test_grader_error_is_judge_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACX_TEST_GRADER_KEY", "k")
    with FakeModelServer([error(500, "overloaded")], default=None) as srv:
        score = _grade(_scorer(srv), "Paris")
    assert score.value is None and score.issues[0].code == "judge_failed"
    assert "server_error" in score.issues[0].message


def test_grader_timeout_is_judge_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACX_TEST_GRADER_KEY", "k")
    clock = trio.testing.MockClock(autojump_threshold=0)  # virtual time: the 30 s budget passes at once
    with FakeModelServer([text("GRADE: C", delay=3)]) as srv:
        score = _grade(_scorer(srv, timeout_seconds=30), "Paris", clock)
    assert score.value is None and score.issues[0].code == "judge_failed"
    assert "30" in score.issues[0].message


def test_missing_key_variable_is_judge_failed_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACX_TEST_GRADER_KEY", raising=False)
    with FakeModelServer([]) as srv:
        score = _grade(_scorer(srv), "Paris")
    assert score.issues[0].code == "judge_failed" and "ACX_TEST_GRADER_KEY" in score.issues[0].message
    assert srv.requests == []


def test_default_grader_is_the_run_model_and_builtin_rubrics() -> None:
    with FakeModelServer([text("extracted_final_answer: Paris\nreasoning: same\ncorrect: yes\nconfidence: 90")]) as srv:
        (bound,) = build_scorers([{"id": "model_graded", "template": "hle", "max_retries": 0}])
        ctx = ScoreContext(task=TaskSpec(task_id="t"), question="q", model=ModelSpec(id="m", base_url=srv.base_url))
        score = trio.run(bound.scorer.score, "Paris", ["Paris"], ctx)
    assert score.value is True and srv.requests[0].body["model"] == "m"
    assert "[correct_answer]: Paris" in srv.requests[0].body["messages"][0]["content"]
    (none,) = build_scorers(["model_graded"])
    no_model = trio.run(none.scorer.score, "x", ["y"], CTX)
    assert no_model.issues[0].code == "judge_failed" and "no grader model" in no_model.issues[0].message


@pytest.mark.parametrize(
    ("rubric", "reply", "value"),
    [
        ("simpleqa", "A", True),
        ("simpleqa", "C", False),
        ("browsecomp", "correct: no", False),
        ("xbench", "最终答案: 巴黎\n结论: 正确", True),
    ],
)
def test_rubric_grade_patterns(rubric: str, reply: str, value: bool) -> None:
    (bound,) = build_scorers([{"id": "model_graded", "template": rubric}])
    assert bound.scorer.parse_grade(reply)[1] == float(value)
    assert "{answer}" in RUBRICS[rubric].template


def test_templates_keep_braces_in_answers() -> None:
    assert render_template("A: {answer} / {target}", {"answer": "{x} {target}", "target": "y"}) == "A: {x} {target} / y"


def test_custom_template_errors_are_located() -> None:
    from acx.errors import AcxPlanError

    with pytest.raises(AcxPlanError) as exc:
        build_scorers([{"id": "model_graded", "template": "no placeholder"}])
    assert exc.value.diagnostics[0].path == "benchmark.params.scorers[0]"
    with pytest.raises(AcxPlanError):
        build_scorers([{"id": "model_graded", "grade_pattern": "GRADE: C"}])  # no group


# ---- a whole run: acx run → harness → evaluation → grader over HTTP → results -------------------


def _run(tmp_path: Path, srv: FakeModelServer, env: dict[str, str]) -> Path:
    data = tmp_path / "qa.csv"
    data.write_text("id,question,answer\nq1,Capital of France?,Paris\nq2,2+2?,4\n")
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: graded
task_concurrency: 1
requests:
  - name: graded
    benchmark:
      id: dataset
      path: qa.csv
      fields: {{input: question, target: answer}}
      scorers:
        - id: model_graded
          max_retries: 0
          model: {{id: judge, base_url: "{srv.base_url}", api_key: "${{GRADER_KEY}}"}}
        - exact
    harness: {{id: command, command: "echo Paris"}}
    environment: {{id: host_process}}
    model: {{id: agent}}
"""
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(tmp_path / "res"), "--progress", "none"],
        capture_output=True,
        text=True,
        env={**env, "GRADER_KEY": "sk-e2e-secret"},
        cwd=tmp_path,
        timeout=120,
    )
    assert "sk-e2e-secret" not in proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "res" / "graded").iterdir()
    return run_dir


def _attempt(run_dir: Path, task: str) -> dict[str, Any]:
    (path,) = run_dir.glob(f"details/*/{task}--*/attempt-1/result.json")
    return json.loads(path.read_text())


def test_end_to_end_run_with_a_grader(tmp_path: Path) -> None:
    import os

    with FakeModelServer([text("GRADE: C", usage=(30, 3)), text("no verdict", usage=(30, 4))]) as srv:
        run_dir = _run(tmp_path, srv, dict(os.environ))
    q1, q2 = _attempt(run_dir, "q1"), _attempt(run_dir, "q2")
    assert q1["metrics"] == {"correct": True, "exact": True}
    assert q1["extra"]["scores"]["correct"]["judge"]["grade"] == "C"
    assert q1["telemetry"]["judge_usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 3,
        "cached_tokens": 0,
        "reasoning_tokens": 0,
    }
    # q2: the grader's answer had no grade → no `correct` value (unavailable, not 0), an eval error
    assert q2["metrics"] == {"exact": False}
    assert [i["code"] for i in q2["issues"]] == ["judge_invalid_output"] and q2["status"] == "eval_error"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    head = next(s for s in metrics["series"] if s["series_id"] == "correct.avg@1")
    assert head["value"] == 1.0 and head["counts"]["unavailable"] == 1 and head["counts"]["evaluated"] == 1
    exact = next(s for s in metrics["series"] if s["series_id"] == "exact.avg@1")
    assert exact["value"] == 0.5 and exact["stderr"] == pytest.approx(0.5)
    blob = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())
    assert "sk-e2e-secret" not in blob


def test_grader_role_through_the_run_gateway(tmp_path: Path) -> None:
    """No `model` on the scorer: it grades with the run's `grader` role, through the model gateway."""
    import os

    (tmp_path / "qa.jsonl").write_text('{"id": "q1", "input": "Capital of France?", "target": "Paris"}\n')
    with (
        FakeModelServer([text("Paris.")]) as agent,
        FakeModelServer([text("GRADE: C", usage=(40, 2))], default=None) as grader,
    ):
        (tmp_path / "run.yaml").write_text(
            f"""version: 1
name: gw
requests:
  - name: gw
    benchmark: {{id: dataset, path: qa.jsonl, scorers: [model_graded]}}
    harness: {{id: openai_chat}}
    environment: {{id: host_process}}
    model:
      id: agent-m
      base_url: "{agent.base_url}"
      api_key: "${{AGENT_KEY}}"
      roles:
        grader: {{id: judge-m, base_url: "{grader.base_url}", api_key: "${{JUDGE_KEY}}"}}
"""
        )
        env = {**os.environ, "AGENT_KEY": "sk-agent-1", "JUDGE_KEY": "sk-judge-2"}
        cmd = [sys.executable, "-m", "acx", "run", "run.yaml", "--results-dir", "res", "--progress", "none"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r.body["model"] for r in agent.requests] == ["agent-m"]
    assert [r.body["model"] for r in grader.requests] == ["judge-m"]
    assert grader.requests[0].body["temperature"] == 0.0  # the scorer's params reach the gateway call
    assert grader.requests[0].headers.get("authorization") == "Bearer sk-judge-2"
    (run_dir,) = (tmp_path / "res" / "gw").iterdir()
    q1 = _attempt(run_dir, "q1")
    assert q1["metrics"] == {"correct": True}
    judge = q1["extra"]["scores"]["correct"]["judge"]
    assert judge["via"] == "gateway" and judge["model"] == "judge-m"
    (calls_file,) = run_dir.glob("details/*/q1--*/attempt-1/judge_calls.json")
    calls = json.loads(calls_file.read_text())["calls"]
    assert [c["role"] for c in calls] == ["grader"] and calls[0]["model"] == "judge-m"
    assert q1["telemetry"]["judge_usage"]["prompt_tokens"] == 40
    blob = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())
    assert "sk-judge-2" not in blob and "sk-agent-1" not in blob
