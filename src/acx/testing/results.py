"""Synthetic run directories in the layout of ``docs/results.md``, for tests and benchmarks of
tools that read results (reports, viewers, scripts).

``write_run(dir, tasks)`` writes ``run_info.json``, ``metrics.json`` (optional), ``progress.json``,
``progress.jsonl`` with phase events, and ``details/<state>/<task dir>/`` with ``task.json``,
``attempt-N/result.json`` and retry records. ``synthetic_tasks(n)`` makes ``n`` varied tasks
(categories, failures, error codes, retries, ACTF trajectories with tool calls and usage).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any

__all__ = ["actf_trajectory", "synthetic_tasks", "write_run"]

_PHASES = (
    "open_environment",
    "prepare_task",
    "start_harness",
    "run_harness",
    "collect_harness_result",
    "release",
    "evaluate",
)


def _task_dir(task_id: str) -> str:
    # The writer's naming (acx.interpreter): readable id ≤ 80 chars + 16 hex of sha256(task id).
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[:80]
    return f"{safe}--{hashlib.sha256(task_id.encode()).hexdigest()[:16]}"


def _dump(path: Path, obj: Any) -> None:
    _replace(path, json.dumps(obj))


def _replace(path: Path, text: str) -> None:
    """Write like acx's own run writer (temporary file + rename), so a reader polling a run that
    this module advances (the live view's tests) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def actf_trajectory(question: str, answer: str, *, steps: int = 2, prompt_tokens: int = 100) -> dict[str, Any]:
    """An ACTF v1.0 trajectory: a tool call and its observation per step, then the answer."""
    out = []
    for i in range(1, steps + 1):
        last = i == steps
        out.append(
            {
                "step_id": i,
                "system_prompt": "You are a careful agent." if i == 1 else None,
                "user_content": question if i == 1 else None,
                "tools": [{"type": "function", "function": {"name": "bash"}}] if i == 1 else [],
                "assistant_content": {
                    "content": f"The answer is {answer}" if last else f"Let me check step {i}.",
                    "reasoning_content": f"thinking about step {i}",
                    "tool_calls": []
                    if last
                    else [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"cmd": f"echo step{i}"})},
                        }
                    ],
                },
                "observation": None if last else [{"tool_call_id": f"call_{i}", "content": f"step{i}\n"}],
                "metric": {
                    "prompt_tokens_len": prompt_tokens * i,
                    "completion_tokens_len": 20,
                    "llm_infer_ms": 150,
                    "env_action_ms": 0 if last else 30,
                    "stop_reason": "stop" if last else "tool_calls",
                },
            }
        )
    return {"schema_version": "ACTF_v1.0", "steps": out, "started_at": None, "finished_at": None}


def synthetic_tasks(
    n: int, *, seed: int = 0, categories: int = 8, fail_rate: float = 0.3, error_rate: float = 0.05
) -> list[dict[str, Any]]:
    """``n`` tasks: binary ``correct`` metric, some run errors (with codes) and retries."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        task_id = f"task-{i:05d}"
        category = f"cat-{i % categories}"
        question = f"What is {i} + {i}?"
        if rng.random() < error_rate:
            attempt = {
                "status": "run_error",
                "metrics": {},
                "final_answer": None,
                "issues": [
                    {
                        "severity": "error",
                        "phase": "run",
                        "code": rng.choice(["run_timeout", "harness_failed", "model_failed"]),
                        "message": "synthetic failure",
                    }
                ],
                "trajectory": actf_trajectory(question, "?", steps=1),
                "duration": rng.uniform(5, 60),
            }
            state = "error"
        else:
            correct = rng.random() >= fail_rate
            answer = str(2 * i if correct else 2 * i + 1)
            attempt = {
                "status": "completed",
                "metrics": {"correct": correct},
                "final_answer": answer,
                "issues": [],
                "trajectory": actf_trajectory(
                    question, answer, steps=rng.randint(1, 4), prompt_tokens=rng.randint(50, 500)
                ),
                "duration": rng.lognormvariate(1.0, 0.8),
            }
            state = "normal"
        if rng.random() < 0.02:
            attempt["retries"] = [
                {"reason": "matched retry pattern 'overloaded'", "stage": "run", "status": "run_error"}
            ]
        tasks.append(
            {
                "task_id": task_id,
                "category": category,
                "state": state,
                "instruction": question,
                "ground_truth": str(2 * i),
                "attempts": [attempt],
            }
        )
    return tasks


def _result(task: dict[str, Any], n: int, a: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": "acx.attempt_result.v1",
        "task_id": task["task_id"],
        "attempt": n,
        "status": a.get("status", "completed"),
        "category": task.get("category", "all"),
        "final_answer": a.get("final_answer"),
        "ground_truth": task.get("ground_truth"),
        "trajectory": a.get("trajectory"),
        "issues": a.get("issues", []),
        "artifacts": a.get("artifacts", {}),
        "metrics": a.get("metrics", {}),
        "telemetry": {"wall_seconds": round(a.get("duration", 1.0), 3), **a.get("telemetry", {})},
        "retry_count": len(a.get("retries", [])),
        "extra": a.get("extra", {}),
        "meta": {"benchmark": "synthetic", "harness": {"id": "synthetic", "telemetry": {}}},
    }


_PLAN: dict[str, Any] = {
    "environment": {"id": "host_process", "baseline_network_policy": None, "resources": None, "setup": {"image": None}},
    "evaluation_environment": None,
    "evaluation_environment_mode": "none",
    "run_network_policy": {"network_mode": "public", "allowed_hosts": [], "denied_hosts": []},
    "evaluation_network_policy": {"network_mode": "public", "allowed_hosts": [], "denied_hosts": []},
    "applied_recipes": [],
    "run_timeout_seconds": 30.0,
    "evaluation_timeout_seconds": 60.0,
    "run_timer_compensation_seconds": 120.0,
    "runresult_collect_timeout_seconds": 60.0,
    "collect_artifacts": False,
    "save_artifacts": False,
    "plan_hash": "sha256:0000",
}


def write_run(
    run_dir: str | Path,
    tasks: list[dict[str, Any]],
    *,
    run_id: str = "20260101_000000",
    request_name: str = "synthetic",
    status: str = "completed",
    metrics: dict[str, Any] | None = None,
    started: float = 1_767_225_600.0,
) -> Path:
    """Write a run directory holding ``tasks`` (see :func:`synthetic_tasks` for their shape:
    ``task_id``, ``category``, ``state`` (``normal``/``error``/``fatal``/``running``),
    ``instruction``, ``ground_truth``, ``attempts`` [{``status``, ``metrics``, ``final_answer``,
    ``issues``, ``trajectory``, ``duration``, ``retries``, ``extra``, ``telemetry``}])."""
    root = Path(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    events: list[str] = []
    clock = started

    def event(kind: str, **fields: Any) -> None:
        events.append(json.dumps({"run_id": run_id, "event": kind, "timestamp": clock, **fields}))

    plans: dict[str, dict[str, Any]] = {}
    event("run_started")
    finished = 0
    for task in tasks:
        d = root / "details" / task.get("state", "normal") / _task_dir(task["task_id"])
        attempts = task.get("attempts", [])
        event("task_started", task_id=task["task_id"], category=task.get("category", "all"))
        for n, a in enumerate(attempts, start=1):
            plans.setdefault(task["task_id"], {"attempts": {}})["attempts"][str(n)] = _PLAN
            event("attempt_started", task_id=task["task_id"], attempt=n)
            for r, retry in enumerate(a.get("retries", []), start=1):
                rec = {
                    "schema_version": "acx.retry.v1",
                    "task_id": task["task_id"],
                    "attempt": n,
                    "retry": r,
                    "stage": retry.get("stage", "run"),
                    "reason": retry.get("reason", "retry"),
                    "retry_delay_seconds": 5.0,
                    "issues": [{"severity": "error", "phase": "run", "code": "run_failed", "message": "transient"}],
                    "discarded_result": {
                        "status": retry.get("status", "run_error"),
                        "final_answer": None,
                        "trajectory": None,
                    },
                }
                _dump(
                    d / f"attempt-{n}" / "retries" / f"{_task_dir(task['task_id'])}.attempt{n}.retry{r}.run.json", rec
                )
                event("attempt_retry", task_id=task["task_id"], attempt=n)
            share = a.get("duration", 1.0) / len(_PHASES)
            for phase in _PHASES:
                event("phase_changed", task_id=task["task_id"], attempt=n, phase=phase)
                clock += share
            event("attempt_finished", task_id=task["task_id"], attempt=n, status=a.get("status", "completed"))
            if task.get("state") != "running" or n < len(attempts):
                _dump(d / f"attempt-{n}" / "result.json", _result(task, n, a))
        if task.get("state", "normal") != "running":
            finished += 1
            _dump(
                d / "task.json",
                {
                    "schema_version": "acx.task.v1",
                    "task_id": task["task_id"],
                    "category": task.get("category", "all"),
                    "instruction": task.get("instruction"),
                    "ground_truth": task.get("ground_truth"),
                    "attempts": {str(n): f"attempt-{n}" for n in range(1, len(attempts) + 1)},
                    "attempt_plan": {"k": 1, "strategy": "avg"},
                    "retry_counts": {str(n): len(a.get("retries", [])) for n, a in enumerate(attempts, start=1)},
                    "state": task.get("state", "normal"),
                },
            )
        else:
            d.mkdir(parents=True, exist_ok=True)
    if status != "running":
        event("run_finished", status=status)
    _replace(root / "progress.jsonl", "\n".join(events) + "\n")
    _dump(
        root / "run_info.json",
        {
            "schema_version": "acx.run_info.v1",
            "run_id": run_id,
            "request_name": request_name,
            "status": status,
            "started_at": "2026-01-01T00:00:00Z",
            "finished_at": None if status == "running" else "2026-01-01T01:00:00Z",
            "request": {
                "model": {"id": "fake-model"},
                "benchmark": {"id": "synthetic"},
                "harness": {"id": "synthetic"},
                "environment": {"id": "host_process"},
                "execution": {"attempts": {"k": 1, "strategy": "avg"}, "max_retries": 1, "task_concurrency": 8},
            },
            "resolved_execution_plans": plans,
        },
    )
    _dump(
        root / "progress.json",
        {
            "run_id": run_id,
            "status": status,
            "total": len(tasks),
            "finished": finished,
            "elapsed_seconds": clock - started,
        },
    )
    if metrics is not None:
        _dump(root / "metrics.json", metrics)
    (root / ".acx").mkdir(exist_ok=True)
    (root / ".acx" / "lock").write_text("", encoding="utf-8")
    return root
