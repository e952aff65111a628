"""The run's model gateway, as the interpreter drives it (glue between ``acx.models`` and the
attempt loop): started per request run when its harness calls models, one gateway session per
attempt try, the gateway address bound into network policies, the attempt's transcript, usage,
trajectory and limit issues merged into its result."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from acx.ir import MODEL_GATEWAY_HOST, ExecutionIssue, NetworkPolicy, RunRequest, RunResult

if TYPE_CHECKING:
    from acx.components import BaseBenchmark, BaseHarness

__all__ = [
    "RunModels",
    "cache_dir",
    "load_replay",
    "merge_into_result",
    "open_cache",
    "render_usage",
    "replayed_request",
    "session_scope",
    "usage_summary",
]


class RunModels:
    """One request run's model access. ``location`` is the harness's (``host``/``sandbox``)."""

    def __init__(
        self,
        req: RunRequest,
        harness: BaseHarness | None,
        environ: Mapping[str, str],
        run_dir: str,
        on_stop: Callable[[str], None],
        concurrency: int | None = None,
        *,
        results_root: str | None = None,
        scrub: Callable[[str], str] | None = None,
        replay: Any = None,
    ) -> None:
        from acx.models import PROTOCOLS, Gateway, roles_for

        self.location: str = harness.model_location(req) if harness is not None else "none"
        default = harness.default_protocol if harness is not None else "openai-chat"
        roles = roles_for(
            req,
            environ,
            default_protocol=default if default in PROTOCOLS else "openai-chat",
            run_dir=run_dir,
            concurrency=concurrency,
        )
        cache = None
        if any(role.cache != "off" for role in roles.values()):
            cache = open_cache(req, results_root or str(Path(run_dir).parent), scrub=scrub)
        self.gateway = Gateway(
            roles, run_max_cost_usd=req.execution.max_cost_usd, on_run_limit=on_stop, cache=cache, replay=replay
        )
        self.limits = _limits(req)
        self.sandbox_host: str | None = None

    @staticmethod
    def needed(req: RunRequest, harness: BaseHarness | None, benchmark: BaseBenchmark | None = None) -> bool:
        """The harness calls models, or the benchmark's scorers grade with the run's models."""
        from acx.models import uses_models

        if not uses_models(req):
            return False
        if benchmark is not None and benchmark.calls_model:
            return True
        return harness is not None and bool(harness.model_location(req) != "none")

    async def start(self, nursery: trio.Nursery, driver: Any) -> None:
        hosts = ["127.0.0.1"]
        if self.location == "sandbox":
            address = await driver.model_gateway_address()
            if address and address not in hosts:
                hosts.append(address)
                self.sandbox_host = address
        await self.gateway.start(nursery, tuple(hosts))

    async def aclose(self) -> None:
        await self.gateway.aclose()

    def bind_policy(self, policy: NetworkPolicy) -> NetworkPolicy:
        """The plan's symbolic gateway entry replaced by the gateway's ``address:port``."""
        if MODEL_GATEWAY_HOST not in policy.allowed_hosts:
            return policy
        host = self.sandbox_host or "127.0.0.1"
        real = f"{host}:{self.gateway.port(host)}"
        hosts = [real if h == MODEL_GATEWAY_HOST else h for h in policy.allowed_hosts]
        return msgspec.structs.replace(policy, allowed_hosts=hosts)

    def open(self, task_id: str, attempt: int, number: int, stage: str = "") -> Any:
        """A gateway session for one try's harness, or (``stage="evaluate"``) its scorers; ``None``
        for a harness that calls no model (the gateway runs for the scorers' roles only): it must
        not be handed model access it would then ask the ``agent`` role for."""
        if not stage and self.location == "none":
            return None
        key = f"{task_id}/attempt-{attempt}/try-{number}" + (f"/{stage}" if stage else "")
        session = self.gateway.open_session(key, self.limits)
        session.sandbox_host = self.sandbox_host
        return session


def cache_dir(req: RunRequest, results_root: str | os.PathLike[str]) -> Path:
    """The model-call cache directory of a request: ``model.cache_dir`` (relative to the working
    directory), else ``<results_root>/.acx-cache/model-calls`` (shared by every run there)."""
    given = req.model.cache_dir
    return Path(given).expanduser().resolve() if given else Path(results_root).resolve() / ".acx-cache" / "model-calls"


def open_cache(
    req: RunRequest, results_root: str | os.PathLike[str], *, scrub: Callable[[str], str] | None = None
) -> Any:
    from acx.models import DEFAULT_CACHE_MAX_BYTES, CallCache

    return CallCache(
        cache_dir(req, results_root), max_bytes=req.model.cache_max_bytes or DEFAULT_CACHE_MAX_BYTES, scrub=scrub
    )


def load_replay(run_dir: str | os.PathLike[str], scrub: Any = None) -> Any:
    """The recorded model calls of a finished run (``acx run --replay RUN_DIR``): per task and
    attempt, its ``model_calls.json`` (the agent's session) and ``judge_calls.json`` (the
    scorers'). Refused (E0660) when RUN_DIR is not a run directory or recorded no model call."""
    import json

    from acx.errors import AcxUserError
    from acx.models import Replay

    root = Path(run_dir)
    if not (root / "run_info.json").is_file():
        raise AcxUserError(
            f"--replay {run_dir}: not an acx run directory (no run_info.json)",
            code="E0660",
            path="--replay",
            help="pass a run directory: <results_dir>/<request>/<run_id>",
        )
    calls: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for transcript in sorted(root.glob("details/*/*/attempt-*/*_calls.json")):
        stage = {"model_calls.json": "", "judge_calls.json": "evaluate"}.get(transcript.name)
        result = transcript.parent / "result.json"
        if stage is None or not result.is_file():
            continue
        try:
            task_id = str(json.loads(result.read_text(encoding="utf-8"))["task_id"])
            recorded = json.loads(transcript.read_text(encoding="utf-8"))["calls"]
            attempt = int(transcript.parent.name.split("-", 1)[1])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AcxUserError(
                f"--replay {run_dir}: {transcript} cannot be read ({type(exc).__name__}: {exc})",
                code="E0660",
                path="--replay",
                help="replay a run whose transcripts are intact",
            ) from None
        calls[(task_id, attempt, stage)] = [c for c in recorded if isinstance(c, dict)]
    if not calls:
        raise AcxUserError(
            f"--replay {run_dir}: the run recorded no model call (no model_calls.json under details/)",
            code="E0660",
            path="--replay",
            help="replay a run whose agent called a model through acx's gateway",
        )
    return Replay(str(run_dir), calls, scrub=scrub)


def replayed_request(run_dir: str | os.PathLike[str]) -> str | None:
    """The request name a run directory recorded (``run_info.json``), or ``None``."""
    import json

    try:
        info = json.loads((Path(run_dir) / "run_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = info.get("request_name") if isinstance(info, dict) else None
    return str(name) if name is not None else None


def session_scope(session: Any) -> contextlib.AbstractContextManager[None]:
    """Makes ``session`` the current model session (``acx.models.current_session()``) for the
    harness; nothing when the run has no model."""
    if session is None:
        return contextlib.nullcontext()
    from acx.models import use_session

    return use_session(session)


def _limits(req: RunRequest) -> Any:
    from acx.models import limits_for

    return limits_for(req)


async def merge_into_result(
    result: RunResult, session: Any, attempt_dir: Path, scrub: Any
) -> tuple[RunResult, str | None]:
    """The attempt's model calls in its result: trajectory (ACTF v1.0, from the gateway's
    transcript whoever made the calls), ``telemetry.model_usage``, ``limit_exceeded`` issues; the
    full transcript in ``model_calls.json`` beside ``result.json``. Returns the result and the
    SHA-256 of the ``model_calls.json`` written (``None``: no call, no file).

    The file is encoded here and written by a worker thread without an fsync of its own: the
    attempt's ``result.json`` group commit (a ``syncfs`` of the results filesystem, after this
    write) makes it durable, and an attempt whose result was not committed reruns on resume, its
    transcript rewritten. On the trio thread, the write and its fsync stalled every task of the
    run for their duration (a busy disk: tens of ms per attempt)."""
    from acx.interpreter._fs import encode_scrubbed_json
    from acx.models import actf_trajectory

    issues = list(result.issues)
    for message in session.refusals:
        issues.append(ExecutionIssue(severity="error", phase="run", code="limit_exceeded", message=message))
    cut = getattr(session, "secrets_cut", 0)
    if cut:
        issues.append(
            ExecutionIssue(
                severity="warning",
                phase="run",
                code="secret_in_answer",
                message=f"the model upstream's answers held the run's real model key {cut} time(s); the gateway "
                "replaced it with *** before the agent or any record saw it — check the upstream (it "
                "reflects request headers)",
            )
        )
    issues += _cache_issues(session)
    for why in getattr(session, "stream_cuts", ()):
        issues.append(
            ExecutionIssue(
                severity="warning",
                phase="run",
                code="model_answer_cut",
                message=f"a streamed model answer was cut before its end ({why}); the agent got an error event",
            )
        )
    telemetry = dict(result.telemetry)
    if not session.calls:
        return (msgspec.structs.replace(result, issues=issues) if issues != list(result.issues) else result), None
    telemetry["model_usage"] = session.usage()
    missing = session.totals.calls_without_usage
    if missing and session.limits.max_tokens_total is not None:
        # A token budget the server does not report against cannot be enforced: say so, go on.
        issues.append(
            ExecutionIssue(
                severity="warning",
                phase="run",
                code="usage_unavailable",
                message=f"{missing} model call(s) reported no token usage: max_tokens_total = "
                f"{session.limits.max_tokens_total} counts only the calls that did",
            )
        )
    cuts = getattr(session, "record_cuts", ())
    if cuts:
        shown = "; ".join(cuts[:5]) + (f"; and {len(cuts) - 5} more" if len(cuts) > 5 else "")
        issues.append(
            ExecutionIssue(
                severity="warning",
                phase="run",
                code="model_record_cut",
                message=f"{len(cuts)} model call record(s) were cut to acx's storage caps ({shown}): the agent "
                "got everything; model_calls.json notes what it left out and the trajectory keeps the start "
                "of each text",
            )
        )

    def build() -> tuple[Any, bytes]:
        trajectory = actf_trajectory(session.calls, session.tool_results)
        data = encode_scrubbed_json({"schema_version": "acx.model_calls.v1", "calls": session.transcript()}, scrub)
        return (scrub.tree(trajectory) if trajectory is not None else None), data

    from acx.models import OFF_THREAD_BYTES

    # Records that grow with the answers are built in a worker thread (issue 24 item 3): on the
    # trio thread a 64 MiB answer's records stalled every other attempt; small ones stay inline.
    big = getattr(session, "recorded_bytes", 0) >= OFF_THREAD_BYTES
    trajectory, data = await trio.to_thread.run_sync(build) if big else build()
    digest = await trio.to_thread.run_sync(_write_transcript, attempt_dir / "model_calls.json", data)
    extra = dict(result.extra)
    if trajectory is not None and result.trajectory is not None:
        # The gateway's record is the attempt's trajectory; a harness's own view is kept beside it.
        extra["harness_trajectory"] = result.trajectory
    merged = msgspec.structs.replace(
        result,
        issues=issues,
        telemetry=telemetry,
        extra=extra,
        trajectory=trajectory if trajectory is not None else result.trajectory,
    )
    return merged, digest


def _cache_issues(session: Any) -> list[ExecutionIssue]:
    """The attempt's issues of the model-call cache and of a replayed run."""
    out = []
    for why in getattr(session, "cache_misses", ()):
        out.append(
            ExecutionIssue(
                severity="error",
                phase="run",
                code="cache_miss",
                message=f"the model-call cache (replay mode) had no answer: {why}; the agent got a "
                "cache_miss error — record the run first with cache: write or read-write",
            )
        )
    for why in getattr(session, "replay_divergences", ()):
        out.append(ExecutionIssue(severity="error", phase="run", code="replay_diverged", message=why))
    for why in getattr(session, "cache_errors", ()):
        out.append(
            ExecutionIssue(
                severity="warning",
                phase="run",
                code="cache_write_failed",
                message=f"an answer could not be stored in the model-call cache ({why}); the call itself succeeded",
            )
        )
    return out


def _write_transcript(path: Path, data: bytes) -> str:
    """Writes ``data`` to ``path`` (atomic, no fsync: see :func:`merge_into_result`); its SHA-256
    for the evaluation checkpoint (hashed here, in the worker thread, not read back later)."""
    import hashlib

    from acx.interpreter._fs import atomic_write_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data, fsync=False)
    return hashlib.sha256(data).hexdigest()


def usage_summary(outcomes: list[Any]) -> dict[str, Any] | None:
    """Usage per task and for the run, from the attempts' ``telemetry.model_usage``; ``None``
    when no attempt called a model. Unknown costs stay unknown (``None``), never 0."""
    from acx.models import Usage, UsageTotals

    run = UsageTotals()
    tasks: dict[str, Any] = {}
    for outcome in outcomes:
        total = UsageTotals()
        seen = False
        for res in outcome.attempts:
            u = res.telemetry.get("model_usage") if isinstance(res.telemetry, dict) else None
            if not isinstance(u, dict):
                continue
            seen = True
            part = UsageTotals(
                calls=int(u.get("model_calls", 0)),
                usage=Usage(
                    int(u.get("prompt_tokens", 0)),
                    int(u.get("completion_tokens", 0)),
                    int(u.get("cached_tokens", 0)),
                    int(u.get("reasoning_tokens", 0)),
                ),
                cost_usd=float(u.get("cost_usd") or 0.0),
                cost_unknown=u.get("cost_usd") is None,
                calls_without_usage=int(u.get("calls_without_usage", 0)),
                failed_calls=int(u.get("failed_calls", 0)),
                cached_calls=int(u.get("cached_calls", 0)),
                unpaid_tokens=int(u.get("unpaid_tokens", 0)),
                unpaid_cost_usd=float(u.get("unpaid_cost_usd") or 0.0),
                unpaid_cost_unknown="unpaid_cost_usd" in u and u.get("unpaid_cost_usd") is None,
            )
            total.merge(part)
        if seen:
            tasks[outcome.task_id] = total.to_dict()
            run.merge(total)
    if not tasks:
        return None
    return {"run": run.to_dict(), "tasks": tasks}


def render_usage(summary: dict[str, Any]) -> str:
    """The usage section of summary.md."""
    r = summary["run"]
    cost = (
        "unknown (a model has no price, or a server reported no usage)"
        if r["cost_usd"] is None
        else f"${r['cost_usd']:.6f}"
    )
    lines = [
        "",
        "## Model usage",
        "",
        "| model calls | prompt tokens | completion tokens | cached tokens | cost |",
        "|---:|---:|---:|---:|---|",
        f"| {r['model_calls']} | {r['prompt_tokens']} | {r['completion_tokens']} | {r['cached_tokens']} | {cost} |",
        "",
    ]
    if r.get("cached_calls"):
        # Answered by the model-call cache: consumed (in the counts above), not paid (not in the cost).
        unpaid = "unknown" if r["unpaid_cost_usd"] is None else f"${r['unpaid_cost_usd']:.6f}"
        lines += [
            "Answered from the model-call cache (counted above, not paid):",
            "",
            "| cached calls | tokens not paid | cost not paid |",
            "|---:|---:|---|",
            f"| {r['cached_calls']} | {r['unpaid_tokens']} | {unpaid} |",
            "",
        ]
    return "\n".join(lines)
