"""acx run → ATIF trajectories and a Harbor job directory (docs/results.md, "Harbor and ATIF").

ATIF (Harbor's Agent Trajectory Interchange Format) is mapped from ACTF step by step: step 1's
system prompt and each step's new user text become ``system``/``user`` steps, each model call
an ``agent`` step with its message, reasoning, tool calls, observation (tool results), per-step
metrics and time stamp. The Harbor job directory follows Harbor's ``JobConfig``/``JobResult`` and
``TrialConfig``/``TrialResult`` models (schema 1); harbor itself is never imported here.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from acx.results._interop import AttemptView, Manifest, RunView, dumps, iso, parse_iso, short_id

__all__ = ["ATIF_VERSION", "atif_files", "atif_trajectory", "harbor_files", "rewards_of"]

ATIF_VERSION = "ATIF-v1.6"
#: uuid5 namespace of the ids acx gives Harbor jobs and trials (stable across exports of a run).
_NAMESPACE = uuid.UUID("6f1f3b52-3c55-4d7e-9a0e-2a4c1c0f9e11")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _steps(result: dict[str, Any]) -> list[dict[str, Any]]:
    steps = _d(result.get("trajectory")).get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _metrics(metric: dict[str, Any]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for ours, theirs in (
        ("prompt_tokens_len", "prompt_tokens"),
        ("completion_tokens_len", "completion_tokens"),
        ("cached_tokens_len", "cached_tokens"),
    ):
        if isinstance(metric.get(ours), int):
            out[theirs] = metric[ours]
    if isinstance(metric.get("cost_usd"), (int, float)):
        out["cost_usd"] = float(metric["cost_usd"])
    extra = {k: metric[k] for k in ("llm_infer_ms", "env_action_ms", "stop_reason") if metric.get(k) is not None}
    if extra:
        out["extra"] = extra
    return out or None


def _tool_calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for call in _d(step.get("assistant_content")).get("tool_calls") or []:
        fn = _d(_d(call).get("function"))
        args = fn.get("arguments")
        entry: dict[str, Any] = {
            "tool_call_id": str(_d(call).get("id") or ""),
            "function_name": str(fn.get("name") or ""),
            "arguments": args if isinstance(args, dict) else {},
        }
        if not isinstance(args, dict) and args is not None:
            entry["extra"] = {"raw_arguments": str(args)}  # ATIF arguments are an object: the text goes here
        out.append(entry)
    return out


def _observation(step: dict[str, Any]) -> dict[str, Any] | None:
    results = []
    for obs in step.get("observation") or []:
        if not isinstance(obs, dict):
            continue
        content = obs.get("content")
        entry: dict[str, Any] = {
            "source_call_id": str(obs["source_call_id"]) if obs.get("source_call_id") else None,
            "content": content if isinstance(content, str) else json.dumps(content, ensure_ascii=False),
        }
        extra = {k: v for k, v in obs.items() if k not in ("source_call_id", "content")}
        if extra:
            entry["extra"] = extra  # tool name, exit code, timed_out: ATIF has no field of its own for them
        results.append(entry)
    return {"results": results} if results else None


def atif_trajectory(view: RunView, a: AttemptView, manifest: Manifest) -> dict[str, Any]:
    """The ATIF trajectory of one attempt."""
    from acx import __version__

    steps: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] | None = None
    for step in _steps(a.result):
        if step.get("role") not in (None, "agent"):
            manifest.lose(
                f"trajectory step {step.get('step_id')} (role {step.get('role')!r})",
                "an ATIF trajectory is the agent's; the call's usage is in the trial's agent_result",
                task_id=a.task_id,
                attempt=a.n,
            )
            continue
        started = step.get("started_at") if isinstance(step.get("started_at"), str) else None
        if isinstance(step.get("system_prompt"), str) and step["system_prompt"]:
            steps.append({"step_id": len(steps) + 1, "source": "system", "message": step["system_prompt"]})
        if isinstance(step.get("user_content"), str) and step["user_content"]:
            steps.append({"step_id": len(steps) + 1, "source": "user", "message": step["user_content"]})
        if tools is None and isinstance(step.get("tools"), list):
            tools = [t for t in step["tools"] if isinstance(t, dict)]
        content = _d(step.get("assistant_content"))
        agent: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "source": "agent",
            "message": content.get("content") if isinstance(content.get("content"), str) else "",
        }
        if started:
            agent["timestamp"] = started
        if step.get("model"):
            agent["model_name"] = str(step["model"])
        if isinstance(content.get("reasoning_content"), str) and content["reasoning_content"]:
            agent["reasoning_content"] = content["reasoning_content"]
        calls = _tool_calls(step)
        if calls:
            agent["tool_calls"] = calls
        observation = _observation(step)
        if observation:
            agent["observation"] = observation
        metrics = _metrics(_d(step.get("metric")))
        if metrics:
            agent["metrics"] = metrics
        agent["llm_call_count"] = 1
        extra = {"acx_step_id": step.get("step_id"), "finished_at": step.get("finished_at")}
        agent["extra"] = {k: v for k, v in extra.items() if v is not None}
        steps.append(agent)
    if not steps:
        # ATIF needs a step; an attempt without model calls has its answer as the agent's message.
        answer = a.result.get("final_answer")
        steps.append(
            {
                "step_id": 1,
                "source": "agent",
                "message": answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False),
                "extra": {"acx_note": "the attempt made no model calls through acx's gateway; its final answer"},
            }
        )
        manifest.lose(
            "a trajectory",
            "the attempt has no ACTF trajectory (no model calls through acx's gateway)",
            task_id=a.task_id,
            attempt=a.n,
        )
    mu = _d(_d(a.result.get("telemetry")).get("model_usage"))
    harness = _d(view.request("harness"))
    agent_info: dict[str, Any] = {"name": str(harness.get("id") or "acx"), "version": __version__}
    if view.request("model").get("id"):
        agent_info["model_name"] = str(view.request("model")["id"])
    if tools:
        agent_info["tool_definitions"] = tools
    final: dict[str, Any] = {"total_steps": len(steps)}
    if mu:
        final.update(
            total_prompt_tokens=int(mu.get("prompt_tokens") or 0),
            total_completion_tokens=int(mu.get("completion_tokens") or 0),
            total_cached_tokens=int(mu.get("cached_tokens") or 0),
        )
        if isinstance(mu.get("cost_usd"), (int, float)):
            final["total_cost_usd"] = float(mu["cost_usd"])
    return {
        "schema_version": ATIF_VERSION,
        "session_id": f"{view.run_id}/{a.task_id}/attempt-{a.n}",
        "agent": agent_info,
        "steps": steps,
        "final_metrics": final,
        "extra": {"acx": {"run_id": view.run_id, "task_id": a.task_id, "attempt": a.n, "source": "ACTF_v1.0"}},
    }


def _safe(text: str, limit: int = 80) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:limit].strip("._-") or "task"


def _attempt_dir(a: AttemptView) -> str:
    return f"{_safe(a.task_id)}--{short_id(a.task_id, length=8)}__attempt-{a.n}"


def atif_files(view: RunView, manifest: Manifest) -> dict[str, bytes]:
    """``<task>--<hash>__attempt-<n>.trajectory.json`` per finished attempt."""
    out = {f"{_attempt_dir(a)}.trajectory.json": dumps(atif_trajectory(view, a, manifest)) for a in view.attempts}
    for task_id, n in view.unfinished:
        manifest.lose("an unfinished attempt (no result.json)", "it has no trajectory yet", task_id=task_id, attempt=n)
    return out


# ---- Harbor job directory ---------------------------------------------------------------------


def rewards_of(result: dict[str, Any], primary: str | None) -> dict[str, float | int] | None:
    """Harbor's ``verifier_result.rewards``: ``reward`` = the primary metric (a binary one as
    1/0), and every other numeric metric under its own name; None when the attempt has none."""
    metrics = _d(result.get("metrics"))
    out: dict[str, float | int] = {}
    for name, value in metrics.items():
        if isinstance(value, bool):
            out[str(name)] = int(value)
        elif isinstance(value, (int, float)):
            out[str(name)] = value
    if not out:
        return None
    if primary in out:
        out["reward"] = out.pop(primary) if primary != "reward" else out[primary]
    return out


def _primary(view: RunView) -> str | None:
    for series in (view.metrics or {}).get("series") or []:
        if isinstance(series, dict) and series.get("role") == "headline" and series.get("metric_id"):
            return str(series["metric_id"])
    for a in view.attempts:
        for name in ("score", "correct"):
            if name in _d(a.result.get("metrics")):
                return name
    return None


def _trial_name(a: AttemptView) -> str:
    # Harbor names trials <task name, 32 chars>__<7 random chars>; acx's suffix is stable per attempt.
    return f"{_safe(a.task_id, 32)}__{short_id(a.task_id, a.n, length=7)}"


def _timing(a: AttemptView, phases: tuple[str, ...]) -> dict[str, Any] | None:
    chosen = [p for p in a.phases if p.phase in phases]
    if not chosen:
        return None
    last = chosen[-1]
    end = last.started + last.seconds if last.seconds is not None else None
    return {"started_at": iso(chosen[0].started), "finished_at": iso(end)}


def _exception(a: AttemptView) -> dict[str, Any] | None:
    if a.result.get("status") == "completed":
        return None
    issues = [i for i in a.result.get("issues") or [] if isinstance(i, dict) and i.get("severity") != "warning"]
    first = issues[0] if issues else {}
    return {
        "exception_type": str(first.get("code") or a.result.get("status")),
        "exception_message": "; ".join(f"{i.get('code')}: {i.get('message')}" for i in issues)
        or str(a.result.get("status")),
        "exception_traceback": "",
        "occurred_at": iso(a.finished or a.started) or "1970-01-01T00:00:00+00:00",
    }


def _agent_context(a: AttemptView) -> dict[str, Any] | None:
    mu = _d(_d(a.result.get("telemetry")).get("model_usage"))
    if not mu:
        return None
    by_model: dict[str, dict[str, Any]] = {}
    for step in _steps(a.result):
        metric = _d(step.get("metric"))
        acc = by_model.setdefault(
            str(step.get("model") or "unknown"), {"n_input_tokens": 0, "n_cache_tokens": 0, "n_output_tokens": 0}
        )
        acc["n_input_tokens"] += int(metric.get("prompt_tokens_len") or 0)
        acc["n_cache_tokens"] += int(metric.get("cached_tokens_len") or 0)
        acc["n_output_tokens"] += int(metric.get("completion_tokens_len") or 0)
    out: dict[str, Any] = {
        "n_input_tokens": int(mu.get("prompt_tokens") or 0),
        "n_cache_tokens": int(mu.get("cached_tokens") or 0),
        "n_output_tokens": int(mu.get("completion_tokens") or 0),
        "cost_usd": float(mu["cost_usd"]) if isinstance(mu.get("cost_usd"), (int, float)) else None,
        "metadata": {"acx_model_usage": mu, "final_answer": a.result.get("final_answer")},
    }
    if by_model:
        out["model_usage"] = by_model
    return out


def _trial(view: RunView, a: AttemptView, job_id: str, job_dir: str, primary: str | None) -> dict[str, Any]:
    from acx import __version__

    name = _trial_name(a)
    harness, model = view.request("harness"), view.request("model")
    config = {
        "task": {"path": a.task_id, "source": str(view.request("benchmark").get("id") or "acx")},
        "trial_name": name,
        "trials_dir": job_dir,
        "agent": {"name": str(harness.get("id") or "acx"), "model_name": model.get("id"), "kwargs": {}},
        "job_id": job_id,
    }
    result: dict[str, Any] = {
        "id": str(uuid.uuid5(_NAMESPACE, f"{view.run_id}/{a.task_id}/{a.n}")),
        "task_name": a.task_id,
        "trial_name": name,
        "trial_uri": f"file://{job_dir}/{name}",
        "task_id": {"path": a.task_id},
        "source": str(view.request("benchmark").get("id") or "acx"),
        "task_checksum": short_id(json.dumps(a.task.task_json.get("instruction")), length=64),
        "config": config,
        "agent_info": {
            "name": str(harness.get("id") or "acx"),
            "version": __version__,
            "model_info": {"name": str(model["id"])} if model.get("id") else None,
        },
        "agent_result": _agent_context(a),
        "verifier_result": {"rewards": rewards_of(a.result, primary)},
        "exception_info": _exception(a),
        "started_at": iso(a.started),
        "finished_at": iso(a.finished),
        "environment_setup": _timing(a, ("open_environment", "prepare_task")),
        "agent_setup": _timing(a, ("start_harness",)),
        "agent_execution": _timing(a, ("run_harness", "collect_harness_result")),
        "verifier": _timing(a, ("evaluate",)),
    }
    if rewards_of(a.result, primary) is None:
        result["verifier_result"] = None
    return result


def _trial_log(a: AttemptView) -> bytes:
    lines = [f"acx attempt {a.n} of task {a.task_id}: {a.result.get('status')}"]
    for p in a.phases:
        secs = "running" if p.seconds is None else f"{p.seconds:.3f} s"
        lines.append(f"phase {p.phase} (try {p.try_number}): {secs}")
    for i in a.result.get("issues") or []:
        if isinstance(i, dict):
            lines.append(f"{i.get('severity')} [{i.get('phase')}] {i.get('code')}: {i.get('message')}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _job_name(view: RunView) -> str:
    return _safe(f"{view.info.get('request_name') or 'acx'}__{view.run_id}", 120)


def harbor_files(view: RunView, manifest: Manifest) -> dict[str, bytes]:
    """``<job>/config.json``, ``<job>/result.json`` and per attempt ``<job>/<trial>/`` with
    ``config.json``, ``result.json``, ``trial.log``, ``agent/trajectory.json`` (ATIF) and
    ``verifier/reward.txt`` (+ ``test-stdout.txt`` when the verifier's output was kept)."""
    job = _job_name(view)
    job_id = str(uuid.uuid5(_NAMESPACE, view.run_id))
    primary = _primary(view)
    harness, model = view.request("harness"), view.request("model")
    files: dict[str, bytes] = {}
    trials = []
    for a in view.attempts:
        trial = _trial(view, a, job_id, job, primary)
        trials.append(trial)
        base = f"{job}/{trial['trial_name']}"
        files[f"{base}/config.json"] = dumps(trial["config"])
        files[f"{base}/result.json"] = dumps(trial)
        files[f"{base}/trial.log"] = _trial_log(a)
        files[f"{base}/agent/trajectory.json"] = dumps(atif_trajectory(view, a, manifest))
        rewards = _d(trial["verifier_result"]).get("rewards")
        if isinstance(rewards, dict) and "reward" in rewards:
            files[f"{base}/verifier/reward.txt"] = f"{rewards['reward']}\n".encode()
        tail = _d(a.result.get("extra")).get("verifier_output_tail")
        if isinstance(tail, str):
            files[f"{base}/verifier/test-stdout.txt"] = tail.encode("utf-8")
            manifest.lose(
                "the verifier's full output", "acx keeps only its last 2000 characters", task_id=a.task_id, attempt=a.n
            )
        if a.result.get("artifacts"):
            manifest.lose(
                "collected artifacts",
                "not copied into the trial directory; they stay in the acx run",
                task_id=a.task_id,
                attempt=a.n,
            )
        for name, value in _d(a.result.get("metrics")).items():
            if not isinstance(value, (bool, int, float)):
                manifest.lose(f"metric {name!r}", "Harbor rewards are numbers", task_id=a.task_id, attempt=a.n)
    for task_id, n in view.unfinished:
        manifest.lose(
            "an unfinished attempt (no result.json)", "a Harbor trial is a finished trial", task_id=task_id, attempt=n
        )
    errored = sum(1 for t in trials if t["exception_info"] is not None)
    evals_key = "__".join(
        str(x) for x in (harness.get("id") or "acx", model.get("id"), view.request("benchmark").get("id")) if x
    )
    stats = {
        "n_completed_trials": len(trials),
        "n_errored_trials": errored,
        "evals": {
            evals_key: {
                "n_trials": len(trials),
                "n_errors": errored,
                "metrics": [{"name": k, "value": v} for k, v in _d((view.metrics or {}).get("metrics")).items()],
            }
        },
    }
    usage = [_d(t["agent_result"]) for t in trials]
    if any(usage):
        stats["n_input_tokens"] = sum(int(u.get("n_input_tokens") or 0) for u in usage)
        stats["n_cache_tokens"] = sum(int(u.get("n_cache_tokens") or 0) for u in usage)
        stats["n_output_tokens"] = sum(int(u.get("n_output_tokens") or 0) for u in usage)
    started = parse_iso(view.info.get("started_at"))
    files[f"{job}/config.json"] = dumps(
        {
            "job_name": job,
            "jobs_dir": ".",
            "n_attempts": view.k,
            "agents": [{"name": str(harness.get("id") or "acx"), "model_name": model.get("id"), "kwargs": {}}],
            "tasks": [
                {"path": t.task_id, "source": str(view.request("benchmark").get("id") or "acx")} for t in view.tasks
            ],
        }
    )
    files[f"{job}/result.json"] = dumps(
        {
            "id": job_id,
            "started_at": iso(started) or "1970-01-01T00:00:00+00:00",
            "finished_at": iso(parse_iso(view.info.get("finished_at"))),
            "n_total_trials": len(trials) + len(view.unfinished),
            "stats": stats,
            "trial_results": [],
        }
    )
    if view.strategy == "pass":
        manifest.lose(
            "attempt strategy 'pass' (stop at the first success)",
            "a Harbor job's n_attempts runs every attempt; config.json says n_attempts = k",
        )
    return files
