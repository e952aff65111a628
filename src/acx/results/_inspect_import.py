"""An Inspect eval log (``.eval`` zip or ``.json``) read as :class:`ImportedRun` records.

inspect-ai writes ``.eval`` members zstd-compressed; Python's zipfile reads them only from 3.14
on, so a zstd member is decompressed with the ``zstandard`` package when it is installed (it
comes with inspect-ai) and refused with a clear error otherwise (E0656).
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any

from acx.errors import AcxResultsError
from acx.results._import import ImportedAttempt, ImportedRun
from acx.results._inspect import score_number
from acx.results._interop import parse_iso

__all__ = ["read_inspect_log"]

_ZSTD = 93
_LETTERS = {"C", "I"}


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _bad(path: Path, why: str) -> AcxResultsError:
    return AcxResultsError(
        f"{path} is not a readable Inspect log: {why}",
        code="E0654",
        path=str(path),
        help="pass a log inspect-ai wrote (inspect log dump shows whether it reads it)",
    )


def _zstd_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise AcxResultsError(
            f"{path} is zstd-compressed and the zstandard package is not installed",
            code="E0656",
            path=str(path),
            help="pip install zstandard (it comes with inspect-ai), or convert the log: inspect log convert --to json",
        ) from None
    fp = zf.fp
    assert fp is not None
    fp.seek(info.header_offset)
    header = fp.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    fp.seek(info.header_offset + 30 + name_len + extra_len)
    raw = fp.read(info.compress_size)
    reader = zstandard.ZstdDecompressor().stream_reader(raw)
    return bytes(reader.read(info.file_size + 1))


def _member(zf: zipfile.ZipFile, name: str, path: Path) -> Any:
    info = zf.getinfo(name)
    data = _zstd_member(zf, info, path) if info.compress_type == _ZSTD else zf.read(name)
    try:
        return json.loads(data)
    except ValueError as exc:
        raise _bad(path, f"member {name} is not JSON ({exc})") from None


def _read_eval(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise _bad(path, f"not a zip archive ({exc})") from None
    with zf:
        names = dict.fromkeys(zf.namelist())  # a re-logged member appears twice: the last one counts
        if "header.json" in names:
            header = _member(zf, "header.json", path)
        elif "_journal/start.json" in names:
            header = _member(zf, "_journal/start.json", path)  # a log whose eval never finished
        else:
            raise _bad(path, "no header.json or _journal/start.json")
        samples = [_member(zf, n, path) for n in names if n.startswith("samples/") and n.endswith(".json")]
    return _d(header), [s for s in samples if isinstance(s, dict)]


def _read_json(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _bad(path, exc.strerror or "unreadable") from None
    except ValueError as exc:
        raise _bad(path, f"not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("eval"), dict):
        raise _bad(path, "no eval spec (the top-level 'eval' object)")
    samples = data.get("samples") or []
    return data, [s for s in samples if isinstance(s, dict)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _reasoning(content: Any) -> str | None:
    if isinstance(content, list):
        parts = [str(p.get("reasoning", "")) for p in content if isinstance(p, dict) and p.get("type") == "reasoning"]
        return "".join(parts) or None
    return None


def trajectory_from_messages(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """An ACTF trajectory from an Inspect chat: one step per assistant message, with the system
    prompt (step 1), the user text since the previous turn and the tool results that follow it."""
    steps: list[dict[str, Any]] = []
    system: list[str] = []
    user: list[str] = []
    for msg in messages:
        role = msg.get("role")
        if role == "system":
            system.append(_text(msg.get("content")))
        elif role == "user":
            user.append(_text(msg.get("content")))
        elif role == "assistant":
            calls = [
                {
                    "id": str(_d(c).get("id") or ""),
                    "type": "function",
                    "function": {"name": str(_d(c).get("function") or ""), "arguments": _d(_d(c).get("arguments"))},
                }
                for c in msg.get("tool_calls") or []
            ]
            step: dict[str, Any] = {
                "step_id": len(steps) + 1,
                "role": "agent",
                "model": msg.get("model"),
                "user_content": "\n\n".join(user),
                "assistant_content": {
                    "content": _text(msg.get("content")) or None,
                    "reasoning_content": _reasoning(msg.get("content")),
                    "tool_calls": calls,
                },
                "observation": [],
            }
            if not steps:
                step["system_prompt"] = "\n\n".join(system) or None
            user = []
            steps.append(step)
        elif role == "tool" and steps:
            obs: dict[str, Any] = {"source_call_id": msg.get("tool_call_id"), "content": _text(msg.get("content"))}
            if msg.get("function"):
                obs["tool"] = msg["function"]
            if _d(msg.get("error")).get("type") == "timeout":
                obs["timed_out"] = True
            obs.update(_d(_d(msg.get("metadata")).get("acx_observation")))
            steps[-1]["observation"].append(obs)
    return {"schema_version": "ACTF_v1.0", "steps": steps} if steps else None


def _usage(model_usage: Any) -> dict[str, Any] | None:
    usages = [_d(u) for u in _d(model_usage).values()]
    if not usages:
        return None

    def total(key: str) -> int:
        return sum(int(u.get(key) or 0) for u in usages)

    costs = [c for u in usages if isinstance(c := u.get("total_cost"), (int, float))]
    return {
        "prompt_tokens": total("input_tokens"),
        "completion_tokens": total("output_tokens"),
        "cached_tokens": total("input_tokens_cache_read"),
        "reasoning_tokens": total("reasoning_tokens"),
        "total_tokens": total("total_tokens"),
        "cost_usd": float(sum(costs)) if costs and len(costs) == len(usages) else None,
        "by_model": dict(_d(model_usage)),
    }


def _flat_scores(scores: Any) -> dict[str, Any]:
    """Score name → value; a scorer that returned a dict gives one metric per key (``name_key``)."""
    out: dict[str, Any] = {}
    for name, score in _d(scores).items():
        value = _d(score).get("value")
        if isinstance(value, dict):
            for key, v in value.items():
                out[f"{name}_{key}"] = v
        else:
            out[str(name)] = value
    return out


def _binary(values: list[Any]) -> bool:
    """A metric whose every value is a bool or Inspect's C/I letter is binary (correct or not)."""
    return bool(values) and all(isinstance(v, bool) or (isinstance(v, str) and v in _LETTERS) for v in values)


def _metrics(raw: dict[str, Any], binary: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in raw.items():
        number = score_number(value)
        if number is None:
            continue  # no number: stays in the attempt's extra.inspect_scores (written by the caller)
        out[name] = number >= 1.0 if name in binary else number
    return out


def _status(header: dict[str, Any]) -> str:
    # An eval that never finished ("started") is no run in progress here: nothing will resume it.
    return {"success": "completed", "cancelled": "cancelled", "started": "cancelled"}.get(
        str(header.get("status")), "failed"
    )


def read_inspect_log(path: Path) -> ImportedRun:
    header, samples = _read_eval(path) if path.suffix == ".eval" else _read_json(path)
    spec = _d(header.get("eval"))
    if not spec:
        raise _bad(path, "no eval spec")
    raw_scores = [_flat_scores(s.get("scores")) for s in samples]
    names = {n for r in raw_scores for n in r}
    binary = {n for n in names if _binary([r[n] for r in raw_scores if n in r])}
    attempts = []
    for sample, raw in zip(samples, raw_scores, strict=True):
        error = sample.get("error")
        metadata = _d(sample.get("metadata"))
        output = _d(sample.get("output"))
        acx_meta = _d(metadata.get("acx"))
        issues = list(acx_meta.get("issues") or [])
        if error and not issues:
            issues = [
                {
                    "severity": "error",
                    "phase": "run",
                    "code": "inspect_sample_error",
                    "message": str(_d(error).get("message") or error),
                }
            ]
        status = str(acx_meta.get("status") or ("run_error" if error else "completed"))
        input_ = sample.get("input")
        started, finished = parse_iso(sample.get("started_at")), parse_iso(sample.get("completed_at"))
        attempts.append(
            ImportedAttempt(
                task_id=str(sample.get("id")),
                attempt=int(sample.get("epoch") or 1),
                instruction=input_
                if isinstance(input_, str)
                else "\n\n".join(_text(m.get("content")) for m in input_ or [] if isinstance(m, dict)),
                ground_truth=sample.get("target"),
                final_answer=output.get("completion"),
                metrics=_metrics(raw, binary),
                category=str(metadata.get("category") or "all"),
                status=status,
                issues=issues,
                trajectory=trajectory_from_messages([m for m in sample.get("messages") or [] if isinstance(m, dict)]),
                usage=_usage(sample.get("model_usage")),
                wall_seconds=sample.get("total_time") if isinstance(sample.get("total_time"), (int, float)) else None,
                started=started,
                finished=finished,
                extra={"inspect_scores": sample.get("scores"), "inspect_uuid": sample.get("uuid")},
            )
        )
    stats = _d(header.get("stats"))
    return ImportedRun(
        tool="inspect_ai",
        source={
            "path": str(path.resolve()),
            "format": path.suffix.lstrip("."),
            "eval_id": spec.get("eval_id"),
            "log_version": header.get("version"),
            "inspect_ai": _d(spec.get("packages")).get("inspect_ai"),
        },
        run_id=str(spec.get("eval_id") or spec.get("task_id") or path.stem),
        request_name=str(spec.get("task") or path.stem),
        status=_status(header),
        started=parse_iso(stats.get("started_at")) or parse_iso(spec.get("created")),
        finished=parse_iso(stats.get("completed_at")),
        request={
            "benchmark": {"id": spec.get("task"), "params": _d(spec.get("task_args"))},
            "harness": {"id": spec.get("solver") or "inspect_ai", "params": _d(spec.get("solver_args"))},
            "model": {"id": spec.get("model")},
        },
        attempts=attempts,
        source_results=header.get("results"),
        kinds={n: "binary_success" for n in binary},
    )
