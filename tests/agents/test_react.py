"""The `react` harness end to end on host_process with a scripted model server on loopback:
QA answered through submit, tool observations and timings in the trajectory, every limit stopping
a model that loops forever with its own issue, malformed tool calls corrected then bounded, and
golden trajectories. Contracts M4, M5, M6 (model calls through the gateway), T1 (budgets)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acx.testing.fake_models import FakeModelServer, Step, text, tool_call

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
UPDATE = os.environ.get("ACX_UPDATE_GOLDEN") == "1"
KEY = "sk-react-secret-7781"


def acx(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, "MKEY": KEY, **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )


def write_spec(
    tmp_path: Path, srv: FakeModelServer, *, harness: str = "", model: str = "", execution: str = ""
) -> Path:
    rows = [{"id": "q0", "question": "What is 6 times 7?", "answer": "42"}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: r
task_concurrency: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: r
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: react{harness}}}
    model: {{id: m1, base_url: "{srv.base_url}", api_key: "${{MKEY}}"{model}}}
    environment: {{id: host_process}}
{execution}"""
    )
    return spec


def run_result(tmp_path: Path) -> dict[str, Any]:
    (run_dir,) = (tmp_path / "results" / "r").iterdir()
    (path,) = sorted(run_dir.rglob("attempt-1/result.json"))
    for p in run_dir.rglob("*"):
        if p.is_file():
            assert KEY not in p.read_bytes().decode("utf-8", "replace"), p
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def codes(result: dict[str, Any]) -> list[str]:
    return [i["code"] for i in result["issues"]]


def normalise(traj: dict[str, Any]) -> dict[str, Any]:
    """Timestamps, durations and ports out of a trajectory, for golden files."""
    text_ = json.dumps(traj, sort_keys=True)
    text_ = re.sub(r'"(started_at|finished_at)": "[^"]*"', r'"\1": "T"', text_)
    text_ = re.sub(r'"(llm_infer_ms|env_action_ms|duration_ms)": \d+', r'"\1": 0', text_)
    text_ = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text_)
    out: dict[str, Any] = json.loads(text_)
    return out


def check_golden(name: str, traj: dict[str, Any]) -> None:
    path = GOLDEN / f"{name}.json"
    got = json.dumps(normalise(traj), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"missing golden {path.name}; run with ACX_UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"trajectory differs from {path.name} (ACX_UPDATE_GOLDEN=1 to accept)"


def test_react_answers_a_qa_task_through_submit(tmp_path: Path) -> None:  # contracts M4, M6
    script = [
        tool_call("bash", {"command": "echo $((6*7))"}, call_id="c1", usage=(100, 10)),
        tool_call("submit", {"answer": "42"}, call_id="c2", usage=(130, 8)),
    ]
    with FakeModelServer(script, default=None) as srv:
        res = acx("run", str(write_spec(tmp_path, srv)), cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    r = run_result(tmp_path)
    assert r["final_answer"] == "42" and r["metrics"]["correct"] is True, r
    assert r["telemetry"]["react"] == {
        "turns": 2,
        "tool_calls": 2,
        "format_errors": 0,
        "stop_reason": "submitted",
        "answer_mode": "submit",
    }
    steps = r["trajectory"]["steps"]
    assert steps[0]["observation"][0]["content"].strip() == "42"
    assert steps[0]["observation"][0]["exit_code"] == 0 and steps[0]["observation"][0]["tool"] == "bash"
    assert steps[1]["observation"][0]["content"] == "[submitted]"  # the last turn's observation too
    # The second call carried the first call's observation as a tool message.
    second = srv.requests[1].body["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "c1", "content": "42\n"}
    assert r["telemetry"]["model_usage"]["prompt_tokens"] == 230
    check_golden("react_qa_submit", r["trajectory"])
    # contract A9: the evaluation checkpoint names the transcript by the digest of its bytes on disk
    # (taken when it was written, off the trio thread; no fsync of its own: the result's commit).
    (attempt,) = (tmp_path / "results" / "r").rglob("attempt-1")
    calls = (attempt / "model_calls.json").read_bytes()
    inference = json.loads((attempt / "checkpoint.json").read_text())["inference"]
    assert inference["trajectory_file"] == "model_calls.json"
    assert inference["trajectory_sha256"] == hashlib.sha256(calls).hexdigest()
    assert [c["seq"] for c in json.loads(calls)["calls"]] == [1, 2]


def test_react_parallel_calls_truncation_and_timeouts(tmp_path: Path) -> None:
    both = Step(
        "message",
        tool_calls=(
            ("p1", "bash", {"command": "python3 -c 'print(\"x\" * 5000)'"}),
            ("p2", "bash", {"command": "echo before; sleep 30; echo after"}),
        ),
        finish_reason="tool_calls",
    )
    script = [both, tool_call("submit", {"answer": "42"}, call_id="s")]
    with FakeModelServer(script, default=None) as srv:
        harness = ", max_observation_chars: 1000, command_timeout_seconds: 1"
        res = acx("run", str(write_spec(tmp_path, srv, harness=harness)), cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    r = run_result(tmp_path)
    long_obs, slow_obs = r["trajectory"]["steps"][0]["observation"]
    assert len(long_obs["content"]) <= 1000 and "characters elided" in long_obs["content"]
    assert long_obs["content"].startswith("xxx") and long_obs["content"].rstrip().endswith("xxx")
    assert slow_obs["timed_out"] is True and "before" in slow_obs["content"]
    assert "timed out after 1 s" in slow_obs["content"] and "after" not in slow_obs["content"].split("[")[0]


def test_react_corrects_malformed_calls_then_gives_up(tmp_path: Path) -> None:
    bad_args = Step("message", tool_calls=(("b1", "bash", "{not json"),), finish_reason="tool_calls")
    script = [
        tool_call("nosuch", {"x": 1}, call_id="n1"),
        bad_args,
        tool_call("bash", {"cmd": "ls"}, call_id="m1"),
        text("I think the answer is 42"),
    ]
    with FakeModelServer(script, default=None) as srv:
        res = acx("run", str(write_spec(tmp_path, srv, harness=", max_format_errors: 3")), cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    r = run_result(tmp_path)
    obs = [s["observation"][0]["content"] for s in r["trajectory"]["steps"][:3]]
    assert "unknown tool 'nosuch'" in obs[0]
    assert "not a JSON object" in obs[1]
    assert "missing argument 'command'" in obs[2]
    assert "malformed_tool_calls" in codes(r) and r["telemetry"]["react"]["format_errors"] == 4
    assert r["final_answer"] is None and r["metrics"]["correct"] is False
    check_golden("react_malformed", r["trajectory"])


LOOP = tool_call("bash", {"command": "true"}, call_id="loop", usage=(10, 5))


@pytest.mark.parametrize(
    ("name", "harness", "model", "execution", "code", "message"),
    [
        ("turns", ", max_turns: 3", "", "", "limit_exceeded", "max_turns = 3"),
        ("calls", "", ", limits: {max_model_calls: 2}", "", "limit_exceeded", "max_model_calls"),
        (
            "tokens",
            "",
            ", limits: {max_tokens_total: 40}",
            "",
            "limit_exceeded",
            "max_tokens_total",
        ),
        (
            "cost",
            "",
            ", price: {input_per_mtok: 1000, output_per_mtok: 1000}, limits: {max_cost_usd: 0.04}",
            "",
            "limit_exceeded",
            "max_cost_usd",
        ),
        (
            "time",
            "",
            "",
            "    execution: {run_timeout_seconds: 3}\n",
            "run_timeout",
            "run budget of 3 s",
        ),
    ],
)
def test_a_model_that_loops_forever_is_stopped_by_each_limit(  # contracts M5, T1
    tmp_path: Path, name: str, harness: str, model: str, execution: str, code: str, message: str
) -> None:
    step = tool_call("bash", {"command": "sleep 0.5"}, call_id="loop") if name == "time" else LOOP
    with FakeModelServer([], default=step) as srv:
        spec = write_spec(tmp_path, srv, harness=harness, model=model, execution=execution)
        res = acx("run", str(spec), cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr + res.stdout
    r = run_result(tmp_path)
    hits = [i for i in r["issues"] if i["code"] == code]
    assert hits and message in hits[0]["message"], r["issues"]
    assert r["final_answer"] is None
    assert len(srv.requests) < 60  # stopped, not merely ended by max_turns = 50


def test_react_prompt_templates_and_network_notice(tmp_path: Path) -> None:
    with FakeModelServer([tool_call("submit", {"answer": "42"})], default=None) as srv:
        harness = ', system_prompt: "SYS", prompt_template: "Q: {prompt} END", tools: [bash, submit]'
        res = acx("run", str(write_spec(tmp_path, srv, harness=harness)), cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    body = srv.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "SYS"}
    assert body["messages"][1]["content"] == "Q: What is 6 times 7? END"
    assert [t["function"]["name"] for t in body["tools"]] == ["bash", "submit"]


def test_react_config_errors_are_located(tmp_path: Path) -> None:
    with FakeModelServer([], default=None) as srv:
        spec = write_spec(tmp_path, srv, harness=', prompt_template: "no placeholder"')
        res = acx("compile", str(spec), "--dry-run", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "{prompt}" in res.stderr and "run.yaml:" in res.stderr, res.stderr


def test_the_react_example_runs_offline(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "examples" / "react" / "run.py"
    res = subprocess.run(
        [sys.executable, str(script), "--results-dir", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    results = {
        json.loads(p.read_text())["task_id"]: json.loads(p.read_text())
        for p in (tmp_path / "results").rglob("attempt-1/result.json")
    }
    assert {t: r["metrics"]["correct"] for t, r in results.items()} == {"primes": True, "words": True}
    primes = results["primes"]["trajectory"]["steps"][0]["observation"][0]
    assert primes["tool"] == "python" and primes["content"].strip() == "168"
    assert list((tmp_path / "results").rglob("report.html"))
