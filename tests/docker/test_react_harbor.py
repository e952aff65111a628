"""The `react` harness on Docker, offline, with a scripted model server on loopback: it solves the
examples/harbor tasks (score 1) from scripted tool calls, fails them when the script gives up
(score 0), and answers a QA dataset through submit. The model is called from the host through the
run's gateway: the tasks stay `no-network` and the sandbox gets no egress (contracts H1, M4, P6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from acx.testing.fake_models import FakeModelServer, Step, tool_call

ROOT = Path(__file__).resolve().parents[2]
HARBOR = ROOT / "examples" / "harbor"
KEY = "sk-react-docker-5521"

CSV = """
import csv, collections, os
rows = list(csv.DictReader(open("/app/data/sales.csv")))
totals = collections.Counter()
for r in rows:
    totals[r["region"]] += int(r["amount"])
os.makedirs("/app/out", exist_ok=True)
open("/app/out/total.txt", "w").write(f"{sum(totals.values())}\\n")
open("/app/out/regions.txt", "w").write("\\n".join(sorted(totals)) + "\\n")
open("/app/out/max.txt", "w").write(totals.most_common(1)[0][0] + "\\n")
print(dict(totals))
"""

FIZZ = """n = int(input())
for i in range(1, n + 1):
    print("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else i)
"""

LOGLEVELS = """#!/usr/bin/env python3
import collections, sys
counts = collections.Counter(line.split()[1] for line in open(sys.argv[1]) if line.strip())
for level, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
    print(level, n)
"""

BUG, FIX = "(s[mid] + s[mid + 1]) / 2", "(s[mid - 1] + s[mid]) / 2"

#: One episode per task, in the order the tasks run (task_concurrency 1, dataset order).
SOLVE = [
    # csv-partial-credit
    tool_call("bash", {"command": "head -3 /app/data/sales.csv"}, call_id="a1"),
    tool_call("python", {"code": CSV}, call_id="a2"),
    tool_call("submit", {"answer": "done"}, call_id="a3"),
    # fizzbuzz-fresh-verifier
    tool_call("edit", {"command": "create", "path": "fizzbuzz.py", "file_text": FIZZ}, call_id="b1"),
    tool_call("bash", {"command": "echo 15 | python3 /app/fizzbuzz.py | tail -1"}, call_id="b2"),
    tool_call("submit", {"answer": "done"}, call_id="b3"),
    # hello-workdir
    tool_call("bash", {"command": "printf '%s, world!\\n' \"$GREETING\" > hello.txt && cat hello.txt"}, call_id="c1"),
    tool_call("submit", {"answer": "done"}, call_id="c2"),
    # log-levels-cli: a program whose output the verifier checks on a log it generates
    tool_call("edit", {"command": "create", "path": "/app/bin/loglevels", "file_text": LOGLEVELS}, call_id="d1"),
    tool_call("bash", {"command": "chmod +x /app/bin/loglevels && /app/bin/loglevels /app/sample.log"}, call_id="d2"),
    tool_call("submit", {"answer": "done"}, call_id="d3"),
    # median-bugfix: an edit of an existing file
    tool_call("edit", {"command": "str_replace", "path": "stats.py", "old_str": BUG, "new_str": FIX}, call_id="e1"),
    tool_call("bash", {"command": "python3 -c 'import stats; print(stats.median([1, 2, 3, 4]))'"}, call_id="e2"),
    tool_call("submit", {"answer": "done"}, call_id="e3"),
]


def _acx(spec: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--progress", "plain"],
        cwd=cwd,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _spec(tmp_path: Path, srv: FakeModelServer, benchmark: str) -> Path:
    spec = tmp_path / "react.yaml"
    spec.write_text(
        f"""version: 1
name: react
task_concurrency: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: react
    benchmark: {benchmark}
    harness: {{id: react}}
    model: {{id: m1, base_url: "{srv.base_url}", api_key: "${{MKEY}}"}}
    environment: {{id: docker}}
"""
    )
    return spec


def _results(tmp_path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in (tmp_path / "results" / "react").glob("*/details/*/*/attempt-1/result.json"):
        data = json.loads(path.read_text())
        out[data["task_id"]] = data
    for path in (tmp_path / "results").rglob("*"):
        if path.is_file():
            assert KEY not in path.read_bytes().decode("utf-8", "replace"), path
    return out


def test_react_solves_the_harbor_examples(tmp_path: Path) -> None:  # contracts H1, M4, P6
    with FakeModelServer(SOLVE, default=None) as srv:
        proc = _acx(_spec(tmp_path, srv, f'{{id: harbor, path: "{HARBOR}"}}'), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(tmp_path)
    assert {t: r["metrics"]["score"] for t, r in results.items()} == {
        "csv-partial-credit": 1.0,
        "fizzbuzz-fresh-verifier": 1.0,
        "hello-workdir": 1.0,
        "log-levels-cli": 1.0,
        "median-bugfix": 1.0,
    }, {t: r["issues"] for t, r in results.items()}
    levels = results["log-levels-cli"]["trajectory"]["steps"]
    assert levels[1]["observation"][0]["content"].split("\n")[:3] == ["INFO 3", "ERROR 1", "WARN 1"]
    median = results["median-bugfix"]["trajectory"]["steps"]
    assert median[1]["observation"][0]["content"].strip() == "2.5"
    fizz = results["fizzbuzz-fresh-verifier"]["trajectory"]["steps"]
    assert fizz[1]["observation"][0]["content"].strip() == "FizzBuzz"
    hello = results["hello-workdir"]
    assert hello["trajectory"]["steps"][0]["observation"][0]["content"].strip() == "Hello, world!"
    assert hello["telemetry"]["react"]["answer_mode"] == "sandbox"
    # The sandbox policy stayed no-network: the first prompt carries the notice of the real policy.
    first_user = srv.requests[0].body["messages"][1]["content"]
    assert "network access is restricted (no-network" in first_user


def test_react_scores_zero_when_the_script_gives_up(tmp_path: Path) -> None:
    give_up = tool_call("submit", {"answer": "I give up"}, call_id="g")
    with FakeModelServer([], default=give_up) as srv:
        proc = _acx(_spec(tmp_path, srv, f'{{id: harbor, path: "{HARBOR}"}}'), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {t: r["metrics"]["score"] for t, r in _results(tmp_path).items()} == {
        "csv-partial-credit": 0.0,
        "fizzbuzz-fresh-verifier": 0.0,
        "hello-workdir": 0.0,
        "log-levels-cli": 0.0,
        "median-bugfix": 0.0,
    }


def test_react_answers_a_qa_dataset_in_docker(tmp_path: Path) -> None:
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": "q", "question": "Which OS?", "answer": "Debian"}) + "\n")
    script: list[Step] = [
        tool_call("bash", {"command": "grep -o Debian /etc/os-release | head -1"}, call_id="q1"),
        tool_call("submit", {"answer": "Debian"}, call_id="q2"),
    ]
    with FakeModelServer(script, default=None) as srv:
        spec = _spec(tmp_path, srv, "{id: exact_match, dataset: qa.jsonl}")
        text = spec.read_text().replace("{id: docker}", '{id: docker, setup: {image: "acx-test/bookworm:latest"}}')
        spec.write_text(text)
        proc = _acx(spec, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = _results(tmp_path).values()
    assert result["final_answer"] == "Debian" and result["metrics"]["correct"] is True
    assert result["trajectory"]["steps"][0]["observation"][0]["content"].strip() == "Debian"


CORPUS = Path(__file__).resolve().parent / "harbor_parity"

#: steps-mean's three steps, one episode each (issue 22 item 4).
STEPS = [
    tool_call("bash", {"command": "echo alpha > /app/notes.txt"}, call_id="s1"),
    tool_call("submit", {"answer": "wrote"}, call_id="s2"),
    tool_call("bash", {"command": "echo beta >> /app/notes.txt && cp /app/staged.txt /app/seen.txt"}, call_id="s3"),
    tool_call("submit", {"answer": "extended"}, call_id="s4"),
    tool_call("bash", {"command": "echo gamma >> /app/notes.txt && cat /app/notes.txt"}, call_id="s5"),
    tool_call("submit", {"answer": "checked"}, call_id="s6"),
]


def test_react_runs_each_step_of_a_multi_step_task(tmp_path: Path) -> None:
    # one agent episode per step in one environment, each with its own instruction; the model calls
    # of each step in attempt-1/steps/<name>/model_calls.json; the task's reward is the steps' mean
    with FakeModelServer(STEPS, default=None) as srv:
        bench = f'{{id: harbor, path: "{CORPUS}", task_names: [steps-mean]}}'
        proc = _acx(_spec(tmp_path, srv, bench), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _results(tmp_path)["steps-mean"]
    assert result["metrics"]["score"] == 1.0, result["issues"]
    steps = result["extra"]["steps"]
    assert [(s["name"], s["final_answer"], s["rewards"]["reward"]) for s in steps] == [
        ("write", "wrote", 1.0),
        ("extend", "extended", 1.0),
        ("check", "checked", 1.0),
    ]
    prompts = [r.body["messages"][1]["content"] for r in srv.requests if len(r.body["messages"]) == 2]
    assert [p.split("\n")[0] for p in prompts] == [
        "Write the line `alpha` to /app/notes.txt.",
        "Append the line `beta` to /app/notes.txt, keeping what is there; copy /app/staged.txt to /app/seen.txt.",
        "Append the line `gamma` to /app/notes.txt.",
    ]
    (attempt,) = (tmp_path / "results" / "react").glob("*/details/*/steps-mean*/attempt-1")
    for name in ("write", "extend", "check"):
        calls = json.loads((attempt / "steps" / name / "model_calls.json").read_text())["calls"]
        assert len(calls) == 2, name
    task_json = json.loads((attempt.parent / "task.json").read_text())
    assert [s["name"] for s in task_json["steps"]] == ["write", "extend", "check"]
    assert task_json["steps"][2]["instruction"] == "Append the line `gamma` to /app/notes.txt."
    (progress,) = (tmp_path / "results" / "react").glob("*/progress.jsonl")
    events = [json.loads(line) for line in progress.read_text().splitlines()]
    started = [e["payload"] for e in events if e["event"] == "step_started"]
    assert started == [{"step": n, "index": i, "of": 3} for i, n in enumerate(("write", "extend", "check"), start=1)]
