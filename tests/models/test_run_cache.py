"""`acx run` with the model-call cache (issue 26): `react` (host-side) and an in-sandbox agent (a
script that streams through the real `openai` SDK, run by the `command` harness and as a
user-defined `installed_agent` with an install phase) run once
with `cache: write`, then with `cache: replay` with the model server stopped — same answers,
scores and trajectories (timestamps aside), nothing paid; a changed scorer re-run with `read`
makes no upstream call; cached calls counted apart in result.json, metrics.json, summary.md and
the report. Contracts M4 (no key in any file), M5 (usage and cost), M6 (records)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acx.testing.fake_models import FakeModelServer, text, tool_call

KEY = "sk-run-cache-secret-0099"

AGENT = r"""
import os, sys
import openai
client = openai.OpenAI(max_retries=0)
prompt = sys.stdin.read()
parts = []
stream = client.chat.completions.create(
    model="ignored", messages=[{"role": "user", "content": prompt}], stream=True, temperature=0.9
)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
first = "".join(parts)
plain = client.chat.completions.create(
    model="ignored", messages=[{"role": "user", "content": prompt}, {"role": "assistant", "content": first},
                               {"role": "user", "content": "final answer only"}]
)
print(plain.choices[0].message.content)
"""


def acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=180,
    )


def spec(tmp_path: Path, name: str, harness: str, base_url: str, cache: str, bench: str = "") -> Path:
    (tmp_path / "data.jsonl").write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": f"What is {i} times 7?", "answer": str(7 * i)}) + "\n"
            for i in range(2)
        )
    )
    (tmp_path / "agent.py").write_text(AGENT)
    path = tmp_path / f"{name}.yaml"
    price = "{input_per_mtok: 1.0, output_per_mtok: 4.0}"
    path.write_text(
        f"""version: 1
name: {name}
task_concurrency: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: {name}
    benchmark: {{id: exact_match, dataset: data.jsonl{bench}}}
    harness: {harness}
    model: {{id: m1, base_url: "{base_url}", api_key: "${{MKEY}}", price: {price}, cache: {cache}}}
    environment: {{id: host_process}}
"""
    )
    return path


def latest_run(tmp_path: Path, name: str) -> Path:
    runs = sorted((tmp_path / "results" / name).iterdir(), key=lambda p: p.stat().st_mtime)
    return runs[-1]


def attempts(run_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(run_dir.rglob("attempt-1/result.json")):
        r = json.loads(path.read_text())
        out[r["task_id"]] = r
    return out


def steady(traj: dict[str, Any]) -> dict[str, Any]:
    """A trajectory without what differs between two runs of one episode: times, durations, and
    the cached flag the replay adds."""
    text_ = json.dumps(traj, sort_keys=True)
    text_ = re.sub(r'"(started_at|finished_at)": "[^"]*"', r'"\1": "T"', text_)
    text_ = re.sub(r'"(llm_infer_ms|env_action_ms|duration_ms)": \d+', r'"\1": 0', text_)
    text_ = text_.replace('"cached": true, ', "")
    out: dict[str, Any] = json.loads(text_)
    return out


def assert_key_nowhere(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            assert KEY not in p.read_bytes().decode("utf-8", "replace"), p


REACT = "{id: react}"
COMMAND = '{id: command, command: "python3 $ACX_SPEC_DIR/agent.py"}'
# The same SDK script as a user-defined installed agent (install phase, then its command).
INSTALLED = '{id: installed_agent, install: "python3 -c \'import openai\'", command: "python3 $ACX_SPEC_DIR/agent.py"}'


def react_script() -> list[Any]:
    out = []
    for i in range(2):
        out += [
            tool_call("bash", {"command": f"echo $(({i}*7))"}, call_id=f"c{i}", usage=(100, 10)),
            tool_call("submit", {"answer": f"{7 * i}."}, call_id=f"s{i}", usage=(130, 8, 20)),
        ]
    return out


def command_script() -> list[Any]:
    out = []
    for i in range(2):
        out += [text(f"thinking about {i}", usage=(40, 6)), text(f"{7 * i}.", usage=(60, 2))]
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("harness", "script"), [(REACT, react_script), (COMMAND, command_script), (INSTALLED, command_script)]
)
def test_write_then_replay_with_the_server_stopped(tmp_path: Path, harness: str, script: Any) -> None:
    if harness in (COMMAND, INSTALLED):
        pytest.importorskip("openai")
    with FakeModelServer(script(), default=None) as srv:
        base = srv.base_url
        first = acx("run", str(spec(tmp_path, "w", harness, base, "write", ", strip_punctuation: true")), cwd=tmp_path)
        asked = len(srv.requests)
    assert first.returncode == 0, first.stderr + first.stdout
    assert asked == 4
    # The server is stopped: the replay answers every call from the cache, or fails it.
    second = acx("run", str(spec(tmp_path, "w", harness, base, "replay", ", strip_punctuation: true")), cwd=tmp_path)
    assert second.returncode == 0, second.stderr + second.stdout
    runs = sorted((tmp_path / "results" / "w").iterdir(), key=lambda p: p.stat().st_mtime)
    a1, a2 = attempts(runs[0]), attempts(runs[1])
    assert sorted(a1) == sorted(a2) == ["q0", "q1"]
    for task in a1:
        r1, r2 = a1[task], a2[task]
        assert [i["code"] for i in r2["issues"]] == [i["code"] for i in r1["issues"]]
        assert r2["final_answer"] == r1["final_answer"] == f"{7 * int(task[1])}."
        assert r2["metrics"] == r1["metrics"] and r1["metrics"]["correct"] is True
        assert steady(r2["trajectory"]) == steady(r1["trajectory"])
        assert all(step["cached"] is True for step in r2["trajectory"]["steps"])
        u1, u2 = r1["telemetry"]["model_usage"], r2["telemetry"]["model_usage"]
        assert u2["cost_usd"] == 0 and u2["cached_calls"] == 2 and "cached_calls" not in u1
        assert u2["unpaid_cost_usd"] == pytest.approx(u1["cost_usd"]) and u1["cost_usd"] > 0
        assert u2["unpaid_tokens"] == u1["total_tokens"] == u2["total_tokens"]
        calls = json.loads((next(runs[1].rglob(f"*{task}*/attempt-1/model_calls.json"))).read_text())["calls"]
        assert [c.get("cached") for c in calls] == [True, True]
    metrics = json.loads((runs[1] / "metrics.json").read_text())["model_usage"]["run"]
    assert metrics["cost_usd"] == 0 and metrics["cached_calls"] == 4 and metrics["unpaid_cost_usd"] > 0
    summary = (runs[1] / "summary.md").read_text()
    assert "cached calls" in summary and "| 4 |" in summary
    report = (runs[1] / "report.html").read_text()
    assert "cached calls" in report
    assert_key_nowhere(tmp_path / "results")


@pytest.mark.slow
def test_a_changed_scorer_rerun_with_read_makes_no_upstream_call(tmp_path: Path) -> None:
    with FakeModelServer(react_script(), default=None) as srv:
        first = acx("run", str(spec(tmp_path, "s", REACT, srv.base_url, "write")), cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert len(srv.requests) == 4
        srv.requests.clear()
        # "42." is wrong without strip_punctuation; the re-run grades the same answers again.
        second = acx(
            "run", str(spec(tmp_path, "s", REACT, srv.base_url, "read", ", strip_punctuation: true")), cwd=tmp_path
        )
        assert second.returncode == 0, second.stderr
        assert srv.requests == []  # every call answered by the cache
    runs = sorted((tmp_path / "results" / "s").iterdir(), key=lambda p: p.stat().st_mtime)
    scores = [{t: r["metrics"]["correct"] for t, r in attempts(run).items()} for run in runs]
    assert scores == [{"q0": False, "q1": False}, {"q0": True, "q1": True}]


@pytest.mark.slow
def test_two_concurrent_runs_writing_one_cache_keep_it_consistent(tmp_path: Path) -> None:
    from acx.models import CallCache, parse_response

    with FakeModelServer(react_script(), default=None) as s1, FakeModelServer(react_script(), default=None) as s2:
        # `write`: both runs ask their own server every call (a scripted server answers in script
        # order, so a hit in one run would shift its script) and store the same keys at once.
        specs = [spec(tmp_path, name, REACT, srv.base_url, "write") for name, srv in (("a", s1), ("b", s2))]
        env = {**os.environ, "MKEY": KEY}
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "acx", "run", str(p)],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for p in specs
        ]
        outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    cache = CallCache(tmp_path / "results" / ".acx-cache" / "model-calls")
    stats = cache.stats()
    assert stats.entries == 4 and stats.tmp_files == 0  # one entry per distinct request
    for path, _ in cache._entries():
        entry = cache.get(path.stem)
        assert entry is not None and parse_response("openai-chat", entry.body).tool_calls  # whole answers
    for name in ("a", "b"):
        (run,) = (tmp_path / "results" / name).iterdir()
        assert all(r["metrics"]["correct"] is False for r in attempts(run).values())  # "0." vs "0"


@pytest.mark.slow
def test_replay_mode_with_an_empty_cache_is_a_cache_miss_the_agent_sees(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    with FakeModelServer(command_script(), default=None) as srv:
        res = acx("run", str(spec(tmp_path, "m", COMMAND, srv.base_url, "replay")), cwd=tmp_path)
        assert srv.requests == []  # replay never asks the upstream
    (run,) = (tmp_path / "results" / "m").iterdir()
    for result in attempts(run).values():
        issues = {i["code"]: i["message"] for i in result["issues"]}
        assert "cache_miss" in issues, (result["issues"], res.stderr)
        assert "no cached answer (key " in issues["cache_miss"]
        # The agent's SDK raised on the gateway's error (the agent exited 1); the call's record says why.
        assert result["telemetry"]["returncode"] == 1
        calls = json.loads(next(run.rglob(f"*{result['task_id']}*/attempt-1/model_calls.json")).read_text())["calls"]
        assert [(c["error"]["kind"], c["status"]) for c in calls] == [("cache_miss", 404)]
