"""A Harbor job directory read as :class:`ImportedRun` records: one attempt per trial directory
(``<job>/<trial>/result.json``), numbered per task in the order the trials started.

Rewards map back as acx's Harbor benchmark scores them (docs/harbor.md): ``reward`` is the
primary ``score`` and ``correct`` is ``reward >= 1`` (unless the trial has its own ``correct``);
every other reward key is a metric of its own name. ``agent/trajectory.json`` (ATIF) becomes the
attempt's ACTF trajectory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acx.errors import AcxResultsError
from acx.results._import import ImportedAttempt, ImportedRun
from acx.results._interop import parse_iso

__all__ = ["read_harbor_job"]


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _metrics(rewards: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in _d(rewards).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if key == "reward":
            out["score"] = float(value)
            out.setdefault("correct", value >= 1)
        elif key == "correct":
            out["correct"] = value >= 1
        else:
            out[str(key)] = value
    return out


def _step_to_actf(step: dict[str, Any], pending: dict[str, list[str]], n: int) -> dict[str, Any]:
    metrics = _d(step.get("metrics"))
    extra = _d(metrics.get("extra"))
    out: dict[str, Any] = {
        "step_id": n,
        "role": "agent",
        "model": step.get("model_name"),
        "started_at": step.get("timestamp"),
        "user_content": "\n\n".join(pending.get("user", [])),
        "assistant_content": {
            "content": step.get("message") if isinstance(step.get("message"), str) else None,
            "reasoning_content": step.get("reasoning_content"),
            "tool_calls": [
                {
                    "id": str(_d(c).get("tool_call_id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(_d(c).get("function_name") or ""),
                        "arguments": _d(_d(c).get("arguments")),
                    },
                }
                for c in step.get("tool_calls") or []
            ],
        },
        "observation": [
            {"source_call_id": r.get("source_call_id"), "content": r.get("content"), **_d(r.get("extra"))}
            for r in (_d(step.get("observation")).get("results") or [])
            if isinstance(r, dict)
        ],
        "metric": {
            "prompt_tokens_len": metrics.get("prompt_tokens"),
            "completion_tokens_len": metrics.get("completion_tokens"),
            "cached_tokens_len": metrics.get("cached_tokens"),
            "cost_usd": metrics.get("cost_usd"),
            **{k: extra[k] for k in ("llm_infer_ms", "env_action_ms", "stop_reason") if k in extra},
        },
    }
    if n == 1:
        out["system_prompt"] = "\n\n".join(pending.get("system", [])) or None
    return out


def atif_to_actf(traj: Any) -> dict[str, Any] | None:
    """An ATIF trajectory as ACTF: one step per ``agent`` step, the ``system``/``user`` steps
    before it folded into its system prompt and user text."""
    steps: list[dict[str, Any]] = []
    pending: dict[str, list[str]] = {}
    for step in _d(traj).get("steps") or []:
        if not isinstance(step, dict):
            continue
        source = step.get("source")
        message = step.get("message")
        text = message if isinstance(message, str) else json.dumps(message, ensure_ascii=False)
        if source in ("system", "user"):
            pending.setdefault(str(source), []).append(text)
            continue
        steps.append(_step_to_actf(step, pending, len(steps) + 1))
        pending = {}
    return {"schema_version": "ACTF_v1.0", "steps": steps} if steps else None


def _usage(agent_result: Any) -> dict[str, Any] | None:
    ar = _d(agent_result)
    if not ar:
        return None
    prompt, completion = int(ar.get("n_input_tokens") or 0), int(ar.get("n_output_tokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": int(ar.get("n_cache_tokens") or 0),
        "total_tokens": prompt + completion,
        "cost_usd": ar.get("cost_usd") if isinstance(ar.get("cost_usd"), (int, float)) else None,
    }


def _attempt(trial_dir: Path, result: dict[str, Any]) -> ImportedAttempt:
    exc = _d(result.get("exception_info"))
    rewards = _d(result.get("verifier_result")).get("rewards")
    issues = []
    if exc:
        issues.append(
            {
                "severity": "error",
                "phase": "run",
                "code": "harbor_trial_exception",
                "message": f"{exc.get('exception_type')}: {exc.get('exception_message')}",
            }
        )
    metadata = _d(_d(result.get("agent_result")).get("metadata"))
    started, finished = parse_iso(result.get("started_at")), parse_iso(result.get("finished_at"))
    return ImportedAttempt(
        task_id=str(result.get("task_name")),
        attempt=0,  # numbered by the caller, per task
        instruction="",
        ground_truth=None,
        final_answer=metadata.get("final_answer"),
        metrics=_metrics(rewards),
        status="run_error" if exc else "completed",
        issues=issues,
        trajectory=atif_to_actf(_load(trial_dir / "agent" / "trajectory.json")),
        usage=_usage(result.get("agent_result")),
        wall_seconds=(finished - started) if started is not None and finished is not None else None,
        started=started,
        finished=finished,
        extra={"harbor_trial": trial_dir.name, "harbor_rewards": rewards},
    )


def read_harbor_job(path: Path) -> ImportedRun:
    config, job = _load(path / "config.json"), _load(path / "result.json")
    if not isinstance(config, dict):
        raise AcxResultsError(
            f"{path} is not a Harbor job directory (no readable config.json)",
            code="E0654",
            path=str(path),
            help="pass the job directory harbor run wrote (jobs/<job name>), which holds config.json",
        )
    trials = []
    for d in sorted(p for p in path.iterdir() if p.is_dir()):
        result = _load(d / "result.json")
        if isinstance(result, dict) and result.get("task_name"):
            trials.append((d, result))
    attempts = [_attempt(d, r) for d, r in trials]
    attempts.sort(key=lambda a: (a.task_id, a.started or 0.0, str(a.extra["harbor_trial"])))
    counters: dict[str, int] = {}
    for a in attempts:
        counters[a.task_id] = counters.get(a.task_id, 0) + 1
        a.attempt = counters[a.task_id]
    job = _d(job)
    agent = _d((config.get("agents") or [{}])[0])
    return ImportedRun(
        tool="harbor",
        source={"path": str(path.resolve()), "job_id": job.get("id"), "job_name": config.get("job_name")},
        run_id=str(job.get("id") or config.get("job_name") or path.name),
        request_name=str(config.get("job_name") or path.name),
        status="completed" if job.get("finished_at") else "cancelled",  # unfinished: nothing resumes it here
        started=parse_iso(job.get("started_at")),
        finished=parse_iso(job.get("finished_at")),
        request={
            "benchmark": {"id": "harbor"},
            "harness": {"id": agent.get("name") or "harbor"},
            "model": {"id": agent.get("model_name")},
        },
        attempts=attempts,
        source_results=job.get("stats"),
        kinds={"correct": "binary_success", "score": "scalar"},
    )
