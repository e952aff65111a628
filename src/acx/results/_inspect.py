"""acx run → Inspect eval log (``.eval``: a zip of JSON members; ``.json``: one document), and
the samples of an Inspect log back to acx attempt records (docs/results.md, "Inspect").

The log is written with acx's own code against the schema of inspect-ai's ``EvalLog``
(``inspect_ai.log``, log version 2); inspect-ai itself is never imported here — the tests read
every exported log with its reader. One sample per task × attempt (``epoch`` = attempt number).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from typing import Any

from acx.results._interop import AttemptView, Manifest, RunView, dumps, iso, parse_iso, short_id

__all__ = [
    "INSPECT_LOG_VERSION",
    "inspect_log",
    "log_file_name",
    "reductions_of",
    "score_number",
    "write_eval_zip",
    "write_json_log",
]

INSPECT_LOG_VERSION = 2
#: Inspect's reading of score values as numbers (``value_to_float``): its letters and words.
_LETTER_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
_WORD_VALUES = {"yes": 1.0, "true": 1.0, "no": 0.0, "false": 0.0}
_STATUS = {"completed": "success", "cancelled": "cancelled", "running": "started"}


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def score_number(value: Any) -> float | None:
    """An Inspect score value as a number, as inspect-ai's ``value_to_float`` reads it (its
    letters first, then numbers, then ``yes``/``true``/``no``/``false`` and finite numeric text);
    None for a value it cannot read — Inspect counts those 0 with a warning, acx as unavailable
    (never a 0)."""
    if isinstance(value, str) and value in _LETTER_VALUES:
        return _LETTER_VALUES[value]
    if isinstance(value, (bool, int, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        text = value.lower()
        if text in _WORD_VALUES:
            return _WORD_VALUES[text]
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _model_name(view: RunView) -> str:
    model_id = view.request("model").get("id")
    return str(model_id) if model_id else "none/none"


def _usage(metric: dict[str, Any]) -> dict[str, Any]:
    prompt = int(metric.get("prompt_tokens_len") or 0)
    completion = int(metric.get("completion_tokens_len") or 0)
    out: dict[str, Any] = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}
    if metric.get("cached_tokens_len"):
        out["input_tokens_cache_read"] = int(metric["cached_tokens_len"])
    if isinstance(metric.get("cost_usd"), (int, float)):
        out["total_cost"] = float(metric["cost_usd"])
    return out


def _add_usage(into: dict[str, dict[str, Any]], key: str, usage: dict[str, Any]) -> None:
    acc = into.setdefault(key, {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
    for k, v in usage.items():
        if v is None:
            continue
        acc[k] = acc.get(k, 0) + v


def _telemetry_usage(mu: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "input_tokens": int(mu.get("prompt_tokens") or 0),
        "output_tokens": int(mu.get("completion_tokens") or 0),
        "total_tokens": int(mu.get("total_tokens") or 0),
    }
    if mu.get("cached_tokens"):
        out["input_tokens_cache_read"] = int(mu["cached_tokens"])
    if mu.get("reasoning_tokens"):
        out["reasoning_tokens"] = int(mu["reasoning_tokens"])
    if isinstance(mu.get("cost_usd"), (int, float)):
        out["total_cost"] = float(mu["cost_usd"])
    return out


def _steps(result: dict[str, Any]) -> list[dict[str, Any]]:
    steps = _d(result.get("trajectory")).get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _is_agent(step: dict[str, Any]) -> bool:
    return step.get("role") in (None, "agent")


def sample_usage(view: RunView, a: AttemptView) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model usage per model, usage per gateway role) of one attempt. Per model from the
    trajectory's steps; an attempt with usage but no steps (a harness without a trajectory) puts
    its telemetry under the request's model."""
    mu = _d(_d(a.result.get("telemetry")).get("model_usage"))
    by_model: dict[str, dict[str, Any]] = {}
    for step in _steps(a.result):
        _add_usage(by_model, str(step.get("model") or _model_name(view)), _usage(_d(step.get("metric"))))
    if not by_model and mu.get("model_calls"):
        by_model[_model_name(view)] = _telemetry_usage(mu)
    by_role = {str(role): _telemetry_usage(_d(u)) for role, u in _d(mu.get("by_role")).items()}
    return by_model, by_role


def _tool_calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for call in _d(step.get("assistant_content")).get("tool_calls") or []:
        fn = _d(_d(call).get("function"))
        args = fn.get("arguments")
        entry: dict[str, Any] = {
            "id": str(_d(call).get("id") or ""),
            "function": str(fn.get("name") or ""),
            "arguments": args if isinstance(args, dict) else {},
            "type": "function",
        }
        if not isinstance(args, dict) and args is not None:
            # A tool call whose arguments were no JSON object: Inspect keeps the text as a parse error.
            entry["parse_error"] = f"arguments are not a JSON object: {str(args)[:2000]}"
        out.append(entry)
    return out


def _assistant_content(step: dict[str, Any]) -> str | list[dict[str, Any]]:
    content = _d(step.get("assistant_content"))
    text: str = content["content"] if isinstance(content.get("content"), str) else ""
    reasoning = content.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts: list[dict[str, Any]] = [{"type": "reasoning", "reasoning": reasoning}]
        if text:
            parts.append({"type": "text", "text": text})
        return parts
    return text


def _observation_message(obs: dict[str, Any], msg_id: str) -> dict[str, Any]:
    content = obs.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    call_id = obs.get("source_call_id")
    if not call_id:
        # An observation no tool call asked for (a harness's own feedback): the user's turn.
        return {"id": msg_id, "role": "user", "content": text, "source": "input"}
    msg: dict[str, Any] = {"id": msg_id, "role": "tool", "content": text, "tool_call_id": str(call_id)}
    if obs.get("tool"):
        msg["function"] = str(obs["tool"])
    if obs.get("timed_out"):
        msg["error"] = {"type": "timeout", "message": "the command timed out"}
    rest = {k: v for k, v in obs.items() if k not in ("content", "source_call_id", "tool")}
    if rest:
        msg["metadata"] = {"acx_observation": rest}  # exit code, timed_out: Inspect has no field for them
    return msg


def sample_messages(a: AttemptView, manifest: Manifest) -> list[dict[str, Any]]:
    """The chat of one attempt from its ACTF trajectory: the system prompt and user text, each
    assistant turn with its tool calls, then the tool results (observations)."""
    messages: list[dict[str, Any]] = []

    def mid() -> str:
        return short_id(a.task_id, a.n, "message", len(messages))

    for step in _steps(a.result):
        if not _is_agent(step):
            manifest.lose(
                f"trajectory step {step.get('step_id')} (role {step.get('role')!r}) from the sample's messages",
                "Inspect messages are the agent's conversation; the step's usage is in role_usage",
                task_id=a.task_id,
                attempt=a.n,
            )
            continue
        if isinstance(step.get("system_prompt"), str) and step["system_prompt"]:
            messages.append({"id": mid(), "role": "system", "content": step["system_prompt"]})
        if isinstance(step.get("user_content"), str) and step["user_content"]:
            messages.append({"id": mid(), "role": "user", "content": step["user_content"], "source": "input"})
        assistant: dict[str, Any] = {
            "id": mid(),
            "role": "assistant",
            "content": _assistant_content(step),
            "source": "generate",
        }
        calls = _tool_calls(step)
        if calls:
            assistant["tool_calls"] = calls
        if step.get("model"):
            assistant["model"] = str(step["model"])
        messages.append(assistant)
        for obs in step.get("observation") or []:
            if isinstance(obs, dict):
                messages.append(_observation_message(obs, mid()))
    return messages


def _score_entries(a: AttemptView) -> dict[str, dict[str, Any]]:
    answer = a.result.get("final_answer")
    out = {}
    for name, value in _d(a.result.get("metrics")).items():
        score: dict[str, Any] = {"value": value}
        if answer is not None:
            score["answer"] = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        out[str(name)] = score
    return out


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _error(a: AttemptView) -> dict[str, Any] | None:
    if a.result.get("status") == "completed":
        return None
    issues = [i for i in a.result.get("issues") or [] if isinstance(i, dict) and i.get("severity") != "warning"]
    message = "; ".join(f"{i.get('code')}: {i.get('message')}" for i in issues) or str(a.result.get("status"))
    return {"message": message, "traceback": "", "traceback_ansi": ""}


def _sample(view: RunView, a: AttemptView, manifest: Manifest) -> dict[str, Any]:
    by_model, by_role = sample_usage(view, a)
    answer = _text(a.result.get("final_answer"))
    model = _model_name(view)
    telemetry = _d(a.result.get("telemetry"))
    sample: dict[str, Any] = {
        "id": a.task_id,
        "epoch": a.n,
        "input": _text(a.task.task_json.get("instruction")),
        "target": _target(a),
        "messages": sample_messages(a, manifest),
        "output": {
            "model": model,
            "choices": [
                {
                    "message": {"role": "assistant", "content": answer, "source": "generate"},
                    "stop_reason": "stop",
                }
            ],
            "completion": answer,
        },
        "scores": _score_entries(a),
        "metadata": {
            "category": a.task.category,
            "acx": {
                "status": a.result.get("status"),
                "state": a.task.state,
                "issues": a.result.get("issues") or [],
                "retry_count": a.result.get("retry_count", 0),
                "phases": [{"phase": p.phase, "seconds": p.seconds, "try": p.try_number} for p in a.phases],
            },
        },
        "model_usage": by_model,
        "role_usage": by_role,
        "uuid": short_id(view.run_id, a.task_id, a.n),
    }
    if a.started is not None:
        sample["started_at"] = iso(a.started)
    if a.finished is not None:
        sample["completed_at"] = iso(a.finished)
    if isinstance(telemetry.get("wall_seconds"), (int, float)):
        sample["total_time"] = float(telemetry["wall_seconds"])
    if isinstance(telemetry.get("duration_seconds"), (int, float)):
        sample["working_time"] = float(telemetry["duration_seconds"])
    error = _error(a)
    if error is not None:
        sample["error"] = error
    _note_losses(a, manifest)
    return sample


def _target(a: AttemptView) -> str | list[str]:
    truth = a.task.task_json.get("ground_truth", a.result.get("ground_truth"))
    if isinstance(truth, list) and all(isinstance(t, str) for t in truth):
        return list(truth)
    return _text(truth)


def _note_losses(a: AttemptView, manifest: Manifest) -> None:
    if a.result.get("artifacts"):
        manifest.lose(
            "collected artifacts",
            "an Inspect log holds no files; they stay in the acx run",
            task_id=a.task_id,
            attempt=a.n,
        )
    if a.record.retries:
        manifest.lose(
            f"{len(a.record.retries)} discarded tr{'y' if len(a.record.retries) == 1 else 'ies'}",
            "Inspect has no record of a retried try; error_retries stays empty",
            task_id=a.task_id,
            attempt=a.n,
        )
    for name, value in _d(a.result.get("metrics")).items():
        if score_number(value) is None:
            manifest.lose(
                f"metric {name!r} in Inspect's metrics", "its value is no number Inspect can aggregate",
                task_id=a.task_id, attempt=a.n,
            )  # fmt: skip


def _summary(sample: dict[str, Any]) -> dict[str, Any]:
    """``summaries.json``'s entry (what ``inspect view`` lists before it opens a sample)."""
    keys = (
        "id", "epoch", "input", "target", "metadata", "scores", "model_usage", "role_usage",
        "started_at", "completed_at", "total_time", "working_time", "uuid", "error",
    )  # fmt: skip
    out = {k: sample[k] for k in keys if k in sample}
    if "error" in out:
        out["error"] = out["error"]["message"]
    out["retries"] = 0
    out["completed"] = True
    out["message_count"] = len(sample["messages"])
    return out


def _eval_scores(view: RunView) -> list[dict[str, Any]]:
    """``results.scores``: one entry per metric, with acx's series as its metrics (``avg@k`` as
    Inspect's ``accuracy`` for a binary metric, ``mean`` for a scalar one, and ``stderr``)."""
    by_metric: dict[str, dict[str, Any]] = {}
    for series in (view.metrics or {}).get("series") or []:
        if not isinstance(series, dict) or not series.get("metric_id"):
            continue
        metric_id = str(series["metric_id"])
        entry = by_metric.setdefault(
            metric_id,
            {"name": metric_id, "scorer": metric_id, "params": {}, "metrics": {}, "metadata": {"acx_series": {}}},
        )
        counts = _d(series.get("counts"))
        entry["scored_samples"] = int(counts.get("evaluated") or 0)
        entry["unscored_samples"] = int(counts.get("total") or 0) - entry["scored_samples"]
        value = series.get("value")
        entry["metadata"]["acx_series"][str(series.get("series_id"))] = value
        reducer = str(series.get("reducer") or "")
        if value is None:
            continue
        if reducer == "avg":
            name = "accuracy" if series.get("kind") == "binary_success" else "mean"
            entry["metrics"][name] = {"name": name, "value": value, "params": {}}
            if isinstance(series.get("stderr"), (int, float)):
                entry["metrics"]["stderr"] = {"name": "stderr", "value": series["stderr"], "params": {}}
        else:
            name = f"{reducer}_at_{series.get('k')}"
            entry["metrics"][name] = {"name": name, "value": value, "params": {}}
    return list(by_metric.values())


def reductions_of(view: RunView) -> list[dict[str, Any]]:
    """``reductions.json``: per metric, each task's mean over its attempts (Inspect's ``mean``)."""
    per_metric: dict[str, dict[str, list[float]]] = {}
    for a in view.attempts:
        for name, value in _d(a.result.get("metrics")).items():
            number = score_number(value)
            if number is not None:
                per_metric.setdefault(str(name), {}).setdefault(a.task_id, []).append(number)
    return [
        {
            "scorer": name,
            "reducer": "mean",
            "samples": [{"value": sum(v) / len(v), "sample_id": tid} for tid, v in sorted(tasks.items())],
        }
        for name, tasks in per_metric.items()
    ]


def _eval_spec(view: RunView) -> dict[str, Any]:
    from acx import __version__

    info = view.info
    bench, harness, model = view.request("benchmark"), view.request("harness"), view.request("model")
    task_ids = [t.task_id for t in view.tasks]
    model_args = {k: v for k, v in model.items() if k not in ("id", "base_url", "api_key", "params")}
    spec: dict[str, Any] = {
        "eval_id": short_id(view.run_id, "eval"),
        "run_id": str(info.get("orchestration_id") or view.run_id),
        "created": iso(_started(view)) or "1970-01-01T00:00:00+00:00",
        "task": str(info.get("request_name") or bench.get("id") or "acx"),
        "task_id": short_id(view.run_id, "task"),
        "task_version": 0,
        "task_args": _d(bench.get("params")),
        "solver": harness.get("id"),
        "solver_args": _d(harness.get("params")),
        "dataset": {"name": bench.get("id"), "samples": len(task_ids), "sample_ids": task_ids, "shuffled": False},
        "model": _model_name(view),
        "model_generate_config": _d(model.get("params")),
        "model_args": model_args,
        "config": {"epochs": view.k, "epochs_reducer": ["mean"]},
        "packages": {"acx-eval": __version__},
        "metadata": {
            "acx": {
                "run_id": view.run_id,
                "request_name": info.get("request_name"),
                "request_hash": info.get("request_hash"),
                "attempts": {"k": view.k, "strategy": view.strategy},
                "environment": view.request("environment").get("id"),
                "request": info.get("request"),
            }
        },
        "scorers": [
            {
                "name": s["name"],
                "options": {},
                "metrics": [{"name": m, "options": {}} for m in s["metrics"]],
                "metadata": {},
            }
            for s in _eval_scores(view)
        ],
    }
    if model.get("base_url"):
        spec["model_base_url"] = str(model["base_url"])
    return spec


def _started(view: RunView) -> float | None:
    return parse_iso(view.info.get("started_at"))


def inspect_log(view: RunView, manifest: Manifest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the log without its samples — ``header.json`` —, the samples) of a run."""
    samples = [_sample(view, a, manifest) for a in view.attempts]
    for task_id, n in view.unfinished:
        manifest.lose(
            "an unfinished attempt (no result.json)", "Inspect samples are finished samples", task_id=task_id, attempt=n
        )
    model_usage: dict[str, dict[str, Any]] = {}
    role_usage: dict[str, dict[str, Any]] = {}
    for s in samples:
        for name, u in s["model_usage"].items():
            _add_usage(model_usage, name, u)
        for name, u in s["role_usage"].items():
            _add_usage(role_usage, name, u)
    info = view.info
    status = _STATUS.get(str(info.get("status")), "error")
    header: dict[str, Any] = {
        "version": INSPECT_LOG_VERSION,
        "status": status,
        "eval": _eval_spec(view),
        "plan": {
            "name": "plan",
            "steps": [{"solver": str(view.request("harness").get("id") or "acx"), "params": {}}],
            "config": {},
        },
        "results": {
            "total_samples": len(samples),
            "completed_samples": sum(1 for s in samples if "error" not in s),
            "scores": _eval_scores(view),
        },
        "stats": {
            "started_at": iso(_started(view)) or "",
            "completed_at": iso(parse_iso(info.get("finished_at"))) or "",
            "model_usage": model_usage,
            "role_usage": role_usage,
        },
        "invalidated": bool((view.metrics or {}).get("evaluation_failed")),
        "tags": [],
        "metadata": {},
    }
    if status == "error":
        header["error"] = {
            "message": _text(info.get("error")) or str(info.get("status")),
            "traceback": "",
            "traceback_ansi": "",
        }
    return header, samples


def log_file_name(header: dict[str, Any], ext: str) -> str:
    """Inspect's naming, ``<created>_<task>_<task id>.<ext>`` (its listing parses the time stamp
    and the task from the name; ``_`` inside the task would split it, so it becomes ``-``)."""
    created = str(header["eval"]["created"])[:19].replace(":", "-")
    task = "".join(c if c.isalnum() or c in "-." else "-" for c in str(header["eval"]["task"]))
    return f"{created}+00-00_{task}_{header['eval']['task_id']}.{ext}"


def write_eval_zip(header: dict[str, Any], samples: list[dict[str, Any]], reductions: list[dict[str, Any]]) -> bytes:
    """The ``.eval`` zip: the members inspect-ai writes (``_journal/start.json``, one
    ``samples/<id>_epoch_<n>.json`` each, ``summaries.json``, ``reductions.json``,
    ``header.json``), deflate-compressed (inspect-ai reads deflate and zstd; Python's zipfile
    writes no zstd before 3.14)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(
            "_journal/start.json", dumps({"version": header["version"], "eval": header["eval"], "plan": header["plan"]})
        )
        for s in samples:
            zf.writestr(f"samples/{_member_id(s['id'])}_epoch_{s['epoch']}.json", dumps(s))
        zf.writestr("summaries.json", dumps([_summary(s) for s in samples]))
        zf.writestr("reductions.json", dumps(reductions))
        zf.writestr("header.json", dumps(header))
    return buf.getvalue()


def _member_id(sample_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in sample_id)
    # A changed id gets a hash of the original so two ids never share a member name.
    return safe if safe == sample_id else f"{safe}-{short_id(sample_id, length=8)}"


def write_json_log(header: dict[str, Any], samples: list[dict[str, Any]], reductions: list[dict[str, Any]]) -> bytes:
    return dumps({**header, "samples": samples, "reductions": reductions})
