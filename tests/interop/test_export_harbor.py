"""`acx results export --format harbor|atif` (issue 25 item 2): every exported trial, job and
trajectory is validated by Harbor's own pydantic models (the `harbor` package, run under Python
>= 3.12 in a subprocess), and what they read equals the acx run: one trial per attempt with its
reward, the run error as the trial's exception, ATIF steps mapped one by one from ACTF."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from acx.results import RunReader

HERE = Path(__file__).parent


def acx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], capture_output=True, text=True, timeout=300)


def validate(python: list[str], root: Path) -> dict[str, Any]:
    res = subprocess.run(
        [*python, str(HERE / "harbor_validate.py"), str(root)],
        env={**os.environ, "PYENV_VERSION": "3.12.1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def _results(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    return {(t.task_id, a.n): a.result for t in RunReader.open(run_dir).tasks() for a in t.attempts if a.result}


def test_harbor_models_load_the_job_and_every_trial(acx_run: Path, harbor_py: list[str], tmp_path: Path) -> None:
    res = acx("results", "export", str(acx_run), "--format", "harbor", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    read = validate(harbor_py, tmp_path)
    results = _results(acx_run)
    (job,) = read["jobs"]
    assert job == {"n_total_trials": len(results), "n_errored": 2, "n_attempts": 2}
    assert len(read["trials"]) == len(results) == len(read["trajectories"])
    by_task: dict[str, list[dict[str, Any]]] = {}
    for trial in read["trials"]:
        by_task.setdefault(trial["task_name"], []).append(trial)
    assert {task_id for task_id, _n in results} == set(by_task)
    assert all(len(trials) == 2 for trials in by_task.values())
    for task_id, trials in by_task.items():
        expected = sorted(int(results[(task_id, n)]["metrics"]["correct"]) for n in (1, 2))
        assert sorted(t["rewards"]["reward"] for t in trials) == expected
        assert sorted(t["reward_txt"] for t in trials) == [str(v) for v in expected]
        errors = {t["exception"] for t in trials}
        assert errors == ({"model_failed"} if task_id == "q/2 odd id" else {None})
        assert all(t["started"] for t in trials)
    q0_tokens = sorted(t["n_input_tokens"] for t in by_task["q0"])
    assert q0_tokens == sorted(results[("q0", n)]["telemetry"]["model_usage"]["prompt_tokens"] for n in (1, 2))


def test_atif_is_mapped_from_actf_step_by_step(acx_run: Path, harbor_py: list[str], tmp_path: Path) -> None:
    res = acx("results", "export", str(acx_run), "--format", "atif", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    read = validate(harbor_py, tmp_path)
    results = _results(acx_run)
    assert len(read["trajectories"]) == len(results)
    by_session = {t["session_id"]: t for t in read["trajectories"]}
    for (task_id, n), result in results.items():
        traj = by_session[f"{acx_run.name}/{task_id}/attempt-{n}"]
        assert traj["agent"] == "react"
        agent_steps = [s for s in traj["steps"] if s["source"] == "agent"]
        actf = result["trajectory"]["steps"] if result["trajectory"] else []
        if not actf:  # no model call answered: the final answer is the one agent step
            assert len(agent_steps) == 1
            continue
        assert len(agent_steps) == len(actf)
        assert traj["steps"][0] == {**traj["steps"][0], "source": "system", "message": actf[0]["system_prompt"]}
        for ours, theirs in zip(actf, agent_steps, strict=True):
            calls = ours["assistant_content"]["tool_calls"]
            assert theirs["tool_calls"] == [[c["id"], c["function"]["name"], c["function"]["arguments"]] for c in calls]
            assert theirs["observations"] == [[o["source_call_id"], o["content"]] for o in ours["observation"]]
            assert theirs["prompt_tokens"] == ours["metric"]["prompt_tokens_len"]
            assert theirs["reasoning"] == ours["assistant_content"]["reasoning_content"]
        assert traj["total_prompt_tokens"] == result["telemetry"]["model_usage"]["prompt_tokens"]
    q0 = by_session[f"{acx_run.name}/q0/attempt-1"]
    assert [s["source"] for s in q0["steps"]] == ["system", "user", "agent", "agent"]
    assert q0["steps"][2]["cached_tokens"] == 20 and q0["steps"][2]["observations"][0][1].strip() == "42"
    manifest = json.loads(next(tmp_path.glob("*-atif.manifest.json")).read_text())
    assert sorted(manifest["files"]) == sorted(p.name for p in tmp_path.glob("*.trajectory.json"))
