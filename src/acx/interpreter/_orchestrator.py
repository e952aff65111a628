"""The orchestrator: every request of a compiled program, under one global limiter.

* Preflight (before any output or environment): plan attempt 1 of every task (P3), check every
  referenced environment variable (names only, V1), reserve run directories, write
  ``run_info.json`` with the redacted request and the ``resolved_execution_plans`` audit view (P9).
* Tasks are dispatched in declaration order (requests, then tasks) under at most
  ``task_concurrency`` in-flight tasks; each physical attempt holds a slot of the global
  ``task_concurrency`` limiter; sessions hold per-provider slots and respect the open rate.
* The overall ``timeout_seconds`` (0 disables) ends the run as ``timed_out``; a cancellation
  (Ctrl-C) as ``cancelled``. Either way sandboxes are released in shielded scopes within
  ``cleanup_grace_seconds`` and unfinished attempts leave no result, so ``--resume`` redoes only
  them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from acx.components import BaseBenchmark, BaseHarness
from acx.drivers import Driver
from acx.errors import AcxResultsError, AcxUserError, DriverError
from acx.interpreter import _checkpoint
from acx.interpreter._attempt import AttemptRunner, RequestContext
from acx.interpreter._envvars import MissingEnvError, missing_names, required_names, resolve_value
from acx.interpreter._events import ProgressEvent, RunProgress
from acx.interpreter._fs import ResultsDiskFull, disk_full_error
from acx.interpreter._limits import Limits, fit_open_files
from acx.interpreter._metrics import TaskOutcome, build_report, render_summary, task_outcome
from acx.interpreter._store import RUN_INFO_SCHEMA, RunStore, find_reuse_source, read_json, read_record
from acx.ir import (
    ExecutionIssue,
    ExecutionPlan,
    Orchestration,
    Provenance,
    RunRequest,
    RunResult,
    TaskSpec,
    content_hash,
    decode,
    to_builtins,
)
from acx.secrets import Scrubber

__all__ = ["OrchestrationResult", "RequestOutcome", "RequestProgram", "run_orchestration"]

log = logging.getLogger("acx.interpreter")


@dataclass
class RequestProgram:
    """One runnable request: its component instances, selected tasks, per-attempt planning and
    driver (built by :func:`acx.api.build_programs` from a spec or a compiled program; the
    serialisable compiled form of a request is :class:`acx.ir.CompiledRequest`)."""

    name: str
    index: int
    key: str
    request: RunRequest
    benchmark: BaseBenchmark
    harness: BaseHarness
    tasks: list[TaskSpec]
    plan_attempt: Callable[[TaskSpec, int], ExecutionPlan]
    driver: Driver
    namespace: str | None = None
    #: ``request`` with its kept secret references resolved (:func:`live_request`): what the
    #: components are handed at run time. ``request`` (references only) is what gets persisted.
    live_request: RunRequest | None = None
    #: Where the request's fields came from (the resolver's chains; None for a compiled
    #: program) and the plan provenance of a task's first attempt — for reports
    #: (``provenance.json``); the interpreter itself does not use them.
    request_provenance: Provenance | None = None
    plan_provenance: Callable[[TaskSpec], Provenance] | None = None


@dataclass
class RequestOutcome:
    name: str
    status: str  # completed | failed | timed_out | cancelled | disk_full
    run_dir: str | None = None
    run_id: str | None = None
    error: str | None = None
    headline: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class OrchestrationResult:
    orchestration_id: str
    name: str
    status: str  # completed | partial_failure | failed | timed_out | cancelled | disk_full
    requests: list[RequestOutcome]
    started_at: str
    finished_at: str

    @property
    def exit_code(self) -> int:
        # 74 (EX_IOERR): the results disk filled; the run stopped cleanly and can be resumed.
        return {"completed": 0, "cancelled": 130, "disk_full": 74}.get(self.status, 1)


def _iso(ts: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def plan_audit(plan: ExecutionPlan) -> dict[str, Any]:
    """The persisted view of a plan (P7/P9): no env values, no task content."""
    env = plan.environment

    def env_view(e: Any) -> dict[str, Any] | None:
        if e is None:
            return None
        return {
            "id": e.id,
            "baseline_network_policy": to_builtins(e.baseline_network_policy),
            "resources": to_builtins(e.resources),
            "setup": to_builtins(e.setup),
        }

    return {
        "environment": env_view(env),
        "evaluation_environment": env_view(plan.evaluation_environment),
        "evaluation_environment_mode": plan.evaluation_environment_mode,
        "run_network_policy": to_builtins(plan.run_network_policy),
        "evaluation_network_policy": to_builtins(plan.evaluation_network_policy),
        "applied_recipes": list(plan.applied_recipes),
        "run_timeout_seconds": plan.run_timeout_seconds,
        "evaluation_timeout_seconds": plan.evaluation_timeout_seconds,
        "artifact_limits": to_builtins(plan.artifact_limits),
        "artifact_collection_supported": plan.artifact_collection_supported,
        "collect_artifacts": plan.collect_artifacts,
        "save_artifacts": plan.save_artifacts,
        "runresult_collect_timeout_seconds": plan.runresult_collect_timeout_seconds,
        "run_timer_compensation_seconds": plan.run_timer_compensation_seconds,
        "artifact_collect_timeout_seconds": plan.artifact_collect_timeout_seconds,
        "plan_hash": content_hash(plan),
    }


def _redacted_request(req: Any) -> Any:
    try:
        from acx.compiler import redact

        return redact(req)
    except ImportError:  # pragma: no cover - the compiler ships with acx
        return to_builtins(req)


class _RunLogHandler(logging.FileHandler):
    """run.log, flushed at most every 0.5 s (and at once for warnings and errors, and at the end).

    A write syscall per record costs more than the record itself at a few per task; the journal
    and result files, not run.log, are what a resume relies on.
    """

    FLUSH_INTERVAL = 0.5

    def __init__(
        self,
        path: Path,
        scrub: Scrubber | None = None,
        on_write_error: Callable[[OSError, Path], None] | None = None,
    ) -> None:
        super().__init__(path, encoding="utf-8")
        self._flushed = time.monotonic()
        self._scrub = scrub if scrub is not None else Scrubber()
        self._path = path
        #: A write the disk refused (full): told once, then records are dropped; never raised into
        #: the code that logged (a release in a cleanup scope must not fail because of a log line).
        self.on_write_error = on_write_error
        self._broken = False

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError) and self.on_write_error is not None:
            self._fail(exc)
            return
        super().handleError(record)

    def _fail(self, exc: OSError) -> None:
        if not self._broken:
            self._broken = True
            assert self.on_write_error is not None
            self.on_write_error(exc, self._path)

    def format(self, record: logging.LogRecord) -> str:
        # Any record, a component's or an agent's too: secrets and literal env values never land.
        return self._scrub(super().format(record))

    def flush(self) -> None:  # called by StreamHandler.emit after every record
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if self._broken:
            return
        super().emit(record)
        now = time.monotonic()
        if record.levelno >= logging.WARNING or now - self._flushed >= self.FLUSH_INTERVAL:
            self._flushed = now
            self.flush_now()

    def flush_now(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            if self.stream is not None and not self.stream.closed and not self._broken:
                try:
                    self.stream.flush()
                except OSError as exc:
                    if self.on_write_error is None:
                        raise
                    self._fail(exc)

    def close(self) -> None:
        try:
            self.flush_now()
        finally:
            if self._broken and self.stream is not None:
                # What the full disk refused stays in the stream's buffer: drop it, do not retry.
                with contextlib.suppress(OSError):
                    self.stream.close()
                self.stream = None
            super().close()


def _task_state(attempts: Sequence[RunResult]) -> str:
    sev = {i.severity for a in attempts for i in a.issues}
    return "fatal" if "fatal" in sev else "error" if "error" in sev else "normal"


def _primary_true(result: RunResult, primary: str) -> bool:
    return result.metrics.get(primary) is True


class _RequestRun:
    """One request's run: its store, progress sinks, task loop and final summary."""

    def __init__(
        self,
        prog: RequestProgram,
        orch: Orchestration,
        store: RunStore,
        limits: Limits,
        environ: Mapping[str, str],
        console: Callable[[ProgressEvent], None],
        first_plans: dict[str, ExecutionPlan],
        resumed: bool,
        scrub: Scrubber | None = None,
    ) -> None:
        self.prog = prog
        self.orch = orch
        self.store = store
        #: ``acx run --replay``: the run directory whose transcripts answer every model call.
        self.replay_dir: str | None = None
        self.resumed = resumed
        self.first_plans = first_plans
        self.console = console
        req = prog.request
        header = {
            "run_id": store.run_id,
            "benchmark": req.benchmark.id,
            "harness": req.harness.id,
            "environment": req.environment.id,
            "model": req.model.id,
        }
        self.progress = RunProgress(
            store.run_dir, header=header, total=len(prog.tasks), on_write_error=self._write_failed
        )
        self.ctx = RequestContext(
            name=prog.name,
            index=prog.index,
            key=prog.key,
            orchestration_id=orch.id,
            request=prog.live_request or req,
            benchmark=prog.benchmark,
            harness=prog.harness,
            driver=prog.driver,
            store=store,
            limits=limits,
            environ=environ,
            emit_event=self._emit,
            grace=orch.runtime.cleanup_grace_seconds,
            # One scrubber for every request of the run: what one request resolved stays out of
            # everything any of them writes or prints.
            scrub=scrub if scrub is not None else Scrubber(),
        )
        store.scrub = self.ctx.scrub
        self.ctx.scrub.add_secret(_model_secrets(req.model, environ))
        self.ctx.scrub.add_secret(environ.get(n, "") for n in req.metadata.secret_refs)
        #: What --resume compares: the selected tasks, content included (a dataset edited since).
        self.tasks_hash = tasks_hash(prog.tasks)
        self.outcomes: dict[str, TaskOutcome] = {}
        self.plans_audit: dict[str, dict[str, Any]] = {}
        self.started_at = _iso()
        self.error: str | None = None
        self.crashed: list[str] = []
        self.done = trio.Event()
        #: Why the run stopped dispatching tasks (its max_cost_usd reached), and what it left.
        self.stopped: str | None = None
        self.not_run: list[str] = []
        self._log_handler: logging.Handler | None = None
        self._kept_info: dict[str, Any] | None = None
        self.recovery = _RunRecovery(self)
        self.finishing = _RunFinish(self)

    def _write_failed(self, exc: OSError, path: Path) -> None:
        """A log or progress write failed: a full disk stops the run (noted here; the next result
        write or task check raises); any other error is logged, never raised into the caller."""
        self.store.check_full(exc, path, raise_it=False)
        if self.store.fault is None:
            log.warning("cannot write %s: %s", path, exc, extra={"request": self.prog.name})

    def _emit(self, event: ProgressEvent) -> None:
        # progress.jsonl, progress.json and the console see the same event. Checked on the event's
        # own encoding: the round trip through a dict runs only when a secret is in it.
        scrub = self.ctx.scrub
        if scrub and _may_hold_secret(scrub, event):
            event = msgspec.convert(scrub.tree(event.to_json()), ProgressEvent)
        self.progress.emit(event)
        try:
            self.console(event)
        except Exception as exc:
            # A display that cannot be written (a closed pipe: `acx run ... | head`) must not
            # fail the tasks whose events it shows: the run goes on without it.
            self.console = _no_console
            log.warning(
                "the progress display failed and is off for the rest of the run: %s: %s",
                type(exc).__name__,
                exc,
                extra={"request": self.prog.name},
            )

    # ---- set-up ------------------------------------------------------------------------------
    def start(self) -> None:
        handler = _RunLogHandler(self.store.run_dir / "run.log", self.ctx.scrub, self._write_failed)
        handler.setLevel(getattr(logging, str(self.orch.runtime.file_log_level).upper(), logging.DEBUG))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        # One logger for the process; each run.log keeps only its own request's records.
        name = self.prog.name
        handler.addFilter(lambda record: getattr(record, "request", name) == name)
        logging.getLogger("acx").addHandler(handler)
        logging.getLogger("acx").setLevel(logging.DEBUG)
        self._log_handler = handler
        previous = self.store.read_run_info() if self.resumed else {}
        self.plans_audit = dict(previous.get("resolved_execution_plans") or {})
        for task_id, plan in self.first_plans.items():
            self.plans_audit.setdefault(task_id, {"attempts": {}})["attempts"]["1"] = plan_audit(plan)
        self.started_at = previous.get("started_at") or self.started_at
        self._write_run_info("running")
        log.info(
            "run %s of request %s: %d task(s), %s on %s (resumed=%s)",
            self.store.run_id,
            self.prog.name,
            len(self.prog.tasks),
            self.prog.request.benchmark.id,
            self.prog.request.environment.id,
            self.resumed,
            extra={"request": self.prog.name},
        )
        self.store.journal("run_resumed" if self.resumed else "run_started", pid=os.getpid())
        self.ctx.emit(
            "run_started",
            payload={
                "run_dir": str(self.store.run_dir),
                "resumed": self.resumed,
            },
        )
        self.ctx.emit("tasks_loaded", payload={"tasks": len(self.prog.tasks)})
        for task_id, plan in self.first_plans.items():
            self.ctx.emit(
                "execution_plan_resolved",
                task_id=task_id,
                attempt=1,
                payload={"applied_recipes": list(plan.applied_recipes)},
            )

    def _write_run_info(self, status: str, **extra: Any) -> None:
        req = self.prog.request
        info = {
            "schema_version": RUN_INFO_SCHEMA,
            "run_id": self.store.run_id,
            "orchestration_id": self.orch.id,
            "request_name": self.prog.name,
            "request_key": self.prog.key,
            "started_at": self.started_at,
            "status": status,
            "request": _redacted_request(req),
            "request_hash": content_hash(req),
            "tasks_hash": self.tasks_hash,
            "resolved_execution_plans": self.plans_audit,
            **extra,
        }
        # Kept from the previous write (or the interrupted run's file): not re-read every time.
        if self._kept_info is None:
            prev = self.store.read_run_info()
            self._kept_info = {k: prev[k] for k in ("reused_from", "regraded_from", "resumes") if k in prev}
        for keep in ("reused_from", "regraded_from", "resumes"):
            if keep in info:
                self._kept_info[keep] = info[keep]
            elif keep in self._kept_info:
                info[keep] = self._kept_info[keep]
        self.store.write_json("run_info.json", info)

    # ---- the task loop -----------------------------------------------------------------------
    async def run_task(self, task: TaskSpec, free_slot: Callable[[], None] = lambda: None) -> None:
        """All attempts of ``task``, then its final commit. ``free_slot`` is called once no sandbox
        of the task is left: the wait for the durable commit does not hold a concurrency slot."""
        ctx, prog = self.ctx, self.prog
        ctx.emit("task_started", task_id=task.task_id, category=task.category)
        ex = prog.request.execution
        k, strategy = ex.attempts.k, ex.attempts.strategy
        primary = prog.benchmark.metric_contract.primary_id()
        done: dict[int, RunResult] = {}
        written: list[Any] = []  # queued result.json writes, required by the final rename
        previous = self.store.records.completed_attempts(task.task_id) if self.resumed else {}
        for n, data in previous.items():
            done[n] = decode(msgspec.json.encode(_result_fields(data)), RunResult)
        if previous:  # taken over from the interrupted run: journaled if its line was lost
            self.store.records.journal_adopted(task.task_id, previous)

        async def one(n: int) -> RunResult:
            plan = self.first_plans.get(task.task_id) if n == 1 else None
            if plan is None:
                plan = prog.plan_attempt(task, n)  # P3: a plan per semantic attempt
                self.plans_audit.setdefault(task.task_id, {"attempts": {}})["attempts"][str(n)] = plan_audit(plan)
                ctx.emit(
                    "execution_plan_resolved",
                    task_id=task.task_id,
                    attempt=n,
                    payload={"applied_recipes": list(plan.applied_recipes)},
                )
            store = self.store
            runner = AttemptRunner(ctx, task, n, plan)
            # A9: an attempt evaluated from its checkpoint in this run's own directory keeps it.
            recovered = runner.find_recovery() if ctx.recovery is not None else False
            # --recovery strict keeps a refused checkpoint where a later resume finds it.
            keep = recovered or runner.strictly_refused
            await store.write(store.start_attempt, task.task_id, n, archive=not keep)
            result = await runner.run()
            if store.fault is not None:
                # The disk filled while the attempt ran: whatever it recorded may come from that
                # (an artifact that could not be saved); it reruns on resume instead.
                raise store.fault
            # result.json is the commit of an attempt: it exists iff the attempt is done (resume).
            # The last attempt's is written with the task's own commit, which requires it; an
            # attempt that another may follow is made durable before that one starts, so a killed
            # run never redoes it.
            op = store.queue_attempt(task.task_id, n, _result_json(result, prog, ctx.scrub))
            written.append(op)
            if n < k and not (strategy == "pass" and _primary_true(result, primary)):
                try:
                    await store.commit.sync()
                    op.result()
                except OSError as exc:
                    store.check_full(exc, store.run_dir)
                    raise
            ctx.emit(
                "attempt_finished",
                task_id=task.task_id,
                category=task.category,
                attempt=n,
                status=result.status,
                payload={"metrics": dict(result.metrics)},
            )
            return result

        parallel = strategy == "avg" and prog.benchmark.parallel_attempts_safe and prog.harness.parallel_attempts_safe
        if parallel:

            async def store_one(n: int) -> None:
                done[n] = await one(n)

            async with trio.open_nursery() as nursery:
                for n in range(1, k + 1):
                    if n not in done:
                        nursery.start_soon(store_one, n)
        else:
            for n in range(1, k + 1):
                if strategy == "pass" and any(_primary_true(r, primary) for r in done.values()):
                    break
                if n not in done:
                    done[n] = await one(n)
        free_slot()
        await self._finish_task(task, [done[n] for n in sorted(done)], tuple(written))

    async def _finish_task(self, task: TaskSpec, attempts: list[RunResult], written: tuple[Any, ...] = ()) -> None:
        ex = self.prog.request.execution
        state = _task_state(attempts)
        task_json = {
            "task_id": task.task_id,
            "category": task.category,
            "ground_truth": attempts[0].ground_truth if attempts else None,
            # What the agent was asked (execution-visible, scrubbed like result.json): reports show it.
            "instruction": self.ctx.scrub(task.question),
            "attempts": {str(a.attempt): f"attempt-{a.attempt}" for a in attempts},
            "attempt_plan": {"k": ex.attempts.k, "strategy": ex.attempts.strategy},
            "retry_counts": {str(a.attempt): a.retry_count for a in attempts},
            "state": state,
        }
        if task.steps:  # a multi-step task: each step's own instruction, in order
            task_json["steps"] = [{"name": s.name, "instruction": self.ctx.scrub(s.question)} for s in task.steps]
        await self.store.durably(self.store.finalize_task, task.task_id, state, task_json, requires=written)
        self.outcomes[task.task_id] = TaskOutcome(task.task_id, task.category, attempts, state)
        summary = ", ".join(f"{k}={v}" for k, v in (attempts[-1].metrics.items() if attempts else []))
        self.ctx.emit("partial_saved", task_id=task.task_id, category=task.category)
        self.ctx.emit(
            "task_finished",
            task_id=task.task_id,
            category=task.category,
            status=state,
            payload={
                "summary": summary,
                "codes": sorted({i.code for a in attempts for i in a.issues}),
                # What the console shows: passed / failed / error, as the report classifies it.
                "outcome": task_outcome(state, (a.metrics for a in attempts), self.primary),
            },
        )

    @property
    def primary(self) -> str | None:
        return self.prog.benchmark.metric_contract.primary_id()

    def outcome_counts(self, task_ids: Iterable[str]) -> dict[str, int]:
        """Outcomes (:func:`task_outcome`) of tasks finished before this process took over."""
        counts: Counter[str] = Counter()
        for t in task_ids:
            o = self.outcomes[t]
            counts[task_outcome(o.state, (a.metrics for a in o.attempts), self.primary)] += 1
        return dict(counts)

    def detach_log(self) -> None:
        """Stop writing this run's ``run.log`` (at the end of the run, or when it is refused)."""
        if self._log_handler is not None:
            logging.getLogger("acx").removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    def task_crashed(self, task: TaskSpec, exc: BaseException) -> None:
        """A task that failed outside its attempts (a bug, a results write that failed) still counts:
        FATAL in the metrics (so the score is not computed over the tasks that happened to
        survive) and, as far as the store can still write, in ``details/fatal/``."""
        log.error("task %s failed outside its attempts", task.task_id, exc_info=exc, extra={"request": self.prog.name})
        self.crashed.append(task.task_id)
        message = self.ctx.scrub(f"{type(exc).__name__}: {exc}")
        self.error = f"task {task.task_id!r} failed outside its attempts: {message}"
        if task.task_id in self.outcomes:  # recorded and committed before the failure
            return
        issue = ExecutionIssue(severity="fatal", phase="run", code="internal_error", message=message)
        result = RunResult(task_id=task.task_id, category=task.category, status="run_error", issues=[issue])
        self.outcomes[task.task_id] = TaskOutcome(task.task_id, task.category, [result], "fatal")
        task_json = {
            "task_id": task.task_id,
            "category": task.category,
            "instruction": self.ctx.scrub(task.question),
            "attempts": {},
            "state": "fatal",
        }
        self.store.queue(self.store.finalize_task, task.task_id, "fatal", task_json)
        self.ctx.emit("task_finished", task_id=task.task_id, category=task.category, status="fatal")

    # ---- the model gateway ----------------------------------------------------------------------
    async def start_models(self, nursery: trio.Nursery) -> bool:
        """Start the run's model gateway when the harness calls models; ``False`` (with the
        request's error set) when the model configuration cannot be used."""
        from acx.errors import AcxUserError
        from acx.interpreter._models import RunModels

        req = self.ctx.request
        if not RunModels.needed(req, self.prog.harness, self.prog.benchmark):
            return True
        models = None
        try:
            from acx.interpreter._models import load_replay

            replay = load_replay(self.replay_dir, self.ctx.scrub.tree) if self.replay_dir else None
            models = RunModels(
                req,
                self.prog.harness,
                self.ctx.environ,
                str(self.store.run_dir.resolve()),
                self._stop,
                concurrency=int(self.ctx.limits.attempts.total_tokens),
                results_root=str(self.orch.runtime.results_dir),
                scrub=self.ctx.scrub.text,
                replay=replay,
            )
            await models.start(nursery, self.prog.driver)
        except (AcxUserError, OSError) as exc:
            if models is not None:
                await models.aclose()
            self.error = self.ctx.scrub(f"the model gateway could not start: {getattr(exc, 'message', None) or exc}")
            log.error("%s", self.error, extra={"request": self.prog.name})
            return False
        self.ctx.models = models
        return True

    async def stop_models(self) -> None:
        models, self.ctx.models = self.ctx.models, None
        if models is not None:
            with trio.CancelScope(shield=True):
                await models.aclose()

    def _stop(self, message: str) -> None:
        """The run's max_cost_usd is reached: dispatch no more tasks (those running finish; their
        further model calls are refused)."""
        if self.stopped is None:
            self.stopped = message
            log.warning("run stopped: %s", message, extra={"request": self.prog.name})


class _RunRecovery:
    """What a request run finds of earlier ones and leaves for later ones: stale sandboxes of the
    run it resumes, the tasks it already finished, and the driver's end-of-run sweep."""

    def __init__(self, c: _RequestRun) -> None:
        self.c = c

    async def reap_stale(self) -> int:
        """On resume: release sandboxes the interrupted run left behind — opened by another process
        and neither closed nor kept per the journal, recorded as failed to release, or (drivers that
        find their own sandboxes) listed by the driver under this run's session ids and not known
        to be closed or kept."""
        driver = self.c.prog.driver
        records = self.c.store.records.session_records()
        self.c.store.kept_sessions.update(sid for sid, rec in records.items() if rec.get("state") == "kept")
        stale = {
            sid: rec
            for sid, rec in records.items()
            if rec.get("state") in ("active", "release_failed")
            and rec.get("pid") != os.getpid()
            and rec.get("provider") == driver.id
        }
        if driver.sessions_discoverable:
            prefix = f"{self.c.store.run_id}-{self.c.store.run_key}-"  # this run's, not another's
            with trio.move_on_after(self.c.orch.runtime.cleanup_grace_seconds):
                try:
                    listed = await driver.list_sessions({"acx.run_id": self.c.store.run_id})
                except Exception as exc:
                    listed = []
                    log.warning("could not list sandboxes: %s", exc, extra={"request": self.c.prog.name})
                for rec in listed:
                    known = records.get(rec.id, {}).get("state")
                    if rec.id.startswith(prefix) and known not in ("closed", "kept"):
                        stale.setdefault(rec.id, {"id": rec.id})
        reaped = 0
        for sid in stale:
            try:
                with trio.move_on_after(self.c.orch.runtime.cleanup_grace_seconds):
                    try:
                        await driver.close_session(sid)
                    except DriverError as exc:
                        if getattr(exc, "code", None) != "session_not_found":
                            raise
                        # Already gone (removed by hand, by gc, or it never came up): say so once.
                    self.c.store.records.drop_session(sid)
                    self.c.store.session_closed(sid, "reaped")
                    reaped += 1
            except Exception as exc:  # leave the record for `acx env` / `acx gc`
                log.warning("could not release %s: %s", sid, exc, extra={"request": self.c.prog.name})
        if reaped:
            log.info("released %d sandbox(es) left by the interrupted run", reaped, extra={"request": self.c.prog.name})
        return reaped

    async def end_driver_run(self) -> None:
        """Let the driver release what outlives this run's sessions (host_process: processes that
        left their command's process group), within the cleanup grace period; never fails the run."""
        prefix = f"{self.c.store.run_id}-{self.c.store.run_key}-"
        with trio.move_on_after(self.c.orch.runtime.cleanup_grace_seconds):
            try:
                await self.c.prog.driver.end_run(prefix, frozenset(self.c.store.kept_sessions))
            except Exception as exc:
                log.warning("releasing the run's leftovers failed: %s", exc, extra={"request": self.c.prog.name})

    def load_finished(self) -> set[str]:
        """Tasks already final in this run dir (resume) or copied from a reuse source."""
        finished: set[str] = set()
        for task_id, (state, d) in self.c.store.records.finished_tasks().items():
            attempts = []
            numbers: list[int] = []
            reused = False
            for res in sorted(d.glob("attempt-*/result.json")):
                try:
                    data = read_json(res)
                    if not isinstance(data, dict):  # damaged like undecodable JSON: skipped the same way
                        raise ValueError(f"{res} is not a JSON object")
                    attempts.append(decode(msgspec.json.encode(_result_fields(data)), RunResult))
                    numbers.append(int(res.parent.name.split("-", 1)[1]))
                except (msgspec.ValidationError, ValueError):
                    continue
                reused = reused or "reuse_history" in (data.get("artifacts") or {})
            cat = next((t.category for t in self.c.prog.tasks if t.task_id == task_id), "all")
            self.c.outcomes[task_id] = TaskOutcome(task_id, cat, attempts, state)
            finished.add(task_id)
            if self.c.resumed and not reused:  # a reused task is journaled by `reuse_loaded`
                self.c.store.records.journal_adopted(task_id, numbers, state)
        return finished


class _RunFinish:
    """The end of a request run: its status and exit code, ``run_info.json``, metrics and
    summary, and the stop on a full results disk."""

    def __init__(self, c: _RequestRun) -> None:
        self.c = c

    # ---- finishing ---------------------------------------------------------------------------
    def finish_disk_full(self) -> RequestOutcome:
        """The end of a run stopped by a full results disk: the reserve is freed to record that
        (``run_info.json`` status ``disk_full``, the journal's tail); no metrics or summary — the
        run is not over, ``--resume`` finishes it once there is space."""
        fault = self.c.store.fault
        assert fault is not None
        self.c.store.release_reserve()
        self.c.error = f"{fault}; free space there, then resume: acx run --resume {self.c.store.run_dir}"
        log.error("%s", self.c.error, extra={"request": self.c.prog.name})
        try:
            self.c._write_run_info("disk_full", finished_at=_iso(), error=self.c.error)
        except OSError as exc:
            log.error("run_info.json not updated: %s", exc, extra={"request": self.c.prog.name})
        self.c.store.journal("run_finished", status="disk_full")
        with contextlib.suppress(OSError):
            self.c.store.close()
        self.c.ctx.emit("run_finished", status="disk_full", payload={"run_dir": str(self.c.store.run_dir)})
        with contextlib.suppress(OSError):
            self.c.progress.close()
        self.c.detach_log()
        return RequestOutcome(
            name=self.c.prog.name,
            status="disk_full",
            run_dir=str(self.c.store.run_dir.resolve()),
            run_id=self.c.store.run_id,
            error=self.c.error,
        )

    def finish(self, status: str) -> RequestOutcome:
        if self.c.store.fault is not None:
            return self.finish_disk_full()
        prog = self.c.prog
        ctx = self.c.ctx
        ctx.emit("summary_started")
        ordered = [self.c.outcomes[t.task_id] for t in prog.tasks if t.task_id in self.c.outcomes]
        ex = prog.request.execution
        aggregation = prog.benchmark.config.aggregation_mode
        report = build_report(
            ordered,
            prog.benchmark.metric_contract,
            k=ex.attempts.k,
            strategy=ex.attempts.strategy,
            aggregation=aggregation,
        )
        report = prog.benchmark.aggregate_metrics(ordered, prog.request, report) or report
        if status == "completed" and report.evaluation_failed:
            status = "failed"
            self.c.error = f"final FATAL issues invalidate the score; results: {self.c.store.run_dir}"
        if self.c.stopped is not None:
            status = "failed"
            self.c.error = f"run stopped: {self.c.stopped}; {len(self.c.not_run)} task(s) not run"
        finished_at = _iso()
        from acx.interpreter._models import render_usage, usage_summary

        usage = usage_summary(ordered)
        metrics_json = report.to_json()
        if usage is not None:
            metrics_json = {**metrics_json, "model_usage": usage}
        self.c.store.write_json("metrics.json", metrics_json)
        header = {
            "run_id": self.c.store.run_id,
            "request": prog.name,
            "status": status,
            "benchmark": prog.request.benchmark.id,
            "harness": prog.request.harness.id,
            "model": prog.request.model.id,
            "environment": prog.request.environment.id,
            "started_at": self.c.started_at,
            "finished_at": finished_at,
        }
        summary_md = render_summary(report, header)
        if usage is not None:
            summary_md = summary_md.rstrip("\n") + "\n" + render_usage(usage)
        if self.c.stopped is not None:
            summary_md = summary_md.rstrip("\n") + f"\n\n**{self.c.error}**\n"
        self.c.store.write_text("summary.md", summary_md)
        self.c._write_run_info(
            status,
            finished_at=finished_at,
            error=self.c.ctx.scrub(self.c.error) if self.c.error else self.c.error,
            metric_artifacts={
                "generated_at": finished_at,
                "source": "evaluation",
                "report": {"k": report.k, "strategy": report.strategy, "aggregation": report.aggregation},
            },
        )
        self.c.store.journal("run_finished", status=status)
        self.c.store.close()
        ctx.emit("run_finished", status=status, payload={"run_dir": str(self.c.store.run_dir)})
        self.c.progress.close()
        self.c.detach_log()
        head = report.headline()
        return RequestOutcome(
            name=prog.name,
            status=status,
            run_dir=str(self.c.store.run_dir.resolve()),
            run_id=self.c.store.run_id,
            error=self.c.ctx.scrub(self.c.error) if self.c.error else self.c.error,
            headline={
                "series_id": head.series_id,
                "value": head.value,
                "reference_value": head.reference_value,
            }
            if head
            else None,
            counts=dict(report.counts),
        )


def _result_fields(data: dict[str, Any]) -> dict[str, Any]:
    allowed = set(RunResult.__struct_fields__)
    return {k: v for k, v in data.items() if k in allowed}


def tasks_hash(tasks: Sequence[TaskSpec]) -> str:
    """The content hash of a request's selected tasks, in order (``run_info.json`` ``tasks_hash``)."""
    return content_hash(list(tasks))


def _model_secrets(model: Any, environ: Mapping[str, str]) -> list[str]:
    """The model's API key as the harness will resolve it: an agent that prints it does not get it
    into the result files."""
    refs = [getattr(model, "api_key", None)]
    refs += [getattr(r, "api_key", None) for r in (getattr(model, "roles", None) or {}).values()]
    out = []
    for ref in refs:
        if not isinstance(ref, str):
            continue
        try:
            out.append(resolve_value(ref, environ))
        except MissingEnvError:  # refused by the preflight before anything runs
            continue
    return out


def _result_json(result: RunResult, prog: RequestProgram, scrub: Scrubber | None = None) -> dict[str, Any]:
    out: dict[str, Any] = to_builtins(result)
    out["meta"] = {
        "benchmark": prog.request.benchmark.id,
        "harness": {"id": prog.request.harness.id, "telemetry": result.telemetry},
    }
    if scrub:  # every string a component put into the result (answers, output tails, telemetry)
        out = scrub.tree(out)
    return out


# ---- preflight --------------------------------------------------------------------------------


def preflight(programs: Sequence[RequestProgram], environ: Mapping[str, str]) -> dict[str, dict[str, ExecutionPlan]]:
    """Plan attempt 1 of every task and refuse missing env vars — before any output (V1, P7)."""
    first: dict[str, dict[str, ExecutionPlan]] = {}
    missing: set[str] = set()
    for prog in programs:
        plans: dict[str, ExecutionPlan] = {}
        missing.update(missing_names(prog.request.metadata.secret_refs, environ))
        for task in prog.tasks:
            plan = prog.plan_attempt(task, 1)
            plans[task.task_id] = plan
            missing.update(missing_names(required_names(plan, prog.request.model), environ))
        first[prog.name] = plans
    if missing:
        raise MissingEnvError(missing)
    for prog in programs:
        _check_models(prog, environ)
    return first


def _check_models(prog: RequestProgram, environ: Mapping[str, str]) -> None:
    """A model the harness will call must be usable (id, base_url, protocol) — refused before any
    output, with the field path, rather than failing the run when its gateway starts."""
    from acx.interpreter._models import RunModels

    if not RunModels.needed(prog.request, prog.harness, prog.benchmark):
        return
    from acx.models import PROTOCOLS, roles_for

    default = prog.harness.default_protocol
    roles_for(prog.request, environ, default_protocol=default if default in PROTOCOLS else "openai-chat")


def _artifacts_intact(attempt_dir: Path) -> bool:
    """Whether an attempt's collected artifacts match its manifest (no manifest: nothing to check)."""
    try:
        from acx.interpreter import _artifacts
    except ImportError:  # pragma: no cover - shipped with acx
        return not list(attempt_dir.glob("submission-*.manifest.json"))
    manifest_path = _artifacts.find_manifest(attempt_dir)
    if manifest_path is None:
        return True
    try:
        manifest = read_json(manifest_path)
        root = attempt_dir / manifest.get("directory", _artifacts.ARTIFACTS_DIR)
        return all(_artifacts._verify(root, e) is None for e in _artifacts._restorable(manifest.get("entries", [])))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def checkpoint_resume_enabled(prog: RequestProgram, override: bool | None) -> bool:
    """``--no-checkpoint-resume`` (``override``) over ``runtime.checkpoint_resume`` (default true)."""
    if override is not None:
        return override
    value = prog.request.runtime.checkpoint_resume
    return True if value is None else bool(value)


def _reopen_for_recovery(run: _RequestRun) -> None:
    """``--resume``: finished tasks with attempts whose evaluation failed run again — only their
    evaluation when a checkpoint allows it (A9)."""
    policy = _checkpoint.RecoveryPolicy(run.store.run_dir, "resume", run.store.run_id)
    selected = {t.task_id for t in run.prog.tasks}
    for task_id, (_state, d) in run.store.records.finished_tasks().items():
        if task_id not in selected:
            continue
        for n in _checkpoint.reopen_for_recovery(d, run.store.running_dir(task_id)):
            policy.eval_failed.add((task_id, n))
    if policy.eval_failed:
        log.info(
            "resume: %d attempt(s) whose evaluation failed are evaluated again",
            len(policy.eval_failed),
            extra={"request": run.prog.name},
        )
    run.ctx.recovery = policy


def _eval_failed_attempts(task_dir: Path) -> list[int]:
    out = []
    for res in sorted(task_dir.glob("attempt-*/result.json")):
        try:
            data = read_json(res)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and _checkpoint.evaluation_failed(data):
            out.append(int(res.parent.name.split("-", 1)[1]))
    return out


def _reuse_into(run: _RequestRun, prog: RequestProgram, source: Path, *, recover: bool = False) -> int:
    """Copy verified finished tasks of ``source`` into the new run (reference §4 reuse rules)."""
    from acx.errors import AcxResultsError

    info = read_record(source / "run_info.json")
    if info.get("schema_version") != RUN_INFO_SCHEMA:
        raise AcxResultsError(
            f"cannot reuse {source}: run_info schema {info.get('schema_version')!r}",
            code="E0606",
            help="only runs written by this acx version can be reused",
        )
    req = prog.request
    src_req = info.get("request") or {}
    if (src_req.get("benchmark") or {}).get("id") != req.benchmark.id:
        raise AcxResultsError(
            f"cannot reuse {source}: it ran benchmark {(src_req.get('benchmark') or {}).get('id')!r}",
            code="E0607",
            help="reuse a run of the same benchmark",
        )
    src_attempts = ((src_req.get("execution") or {}).get("attempts")) or {"k": 1, "strategy": "avg"}
    want = to_builtins(req.execution.attempts)
    if {"k": src_attempts.get("k", 1), "strategy": src_attempts.get("strategy", "avg")} != want:
        raise AcxResultsError(
            f"cannot reuse {source}: attempts plan {src_attempts} differs from {want}",
            code="E0608",
            help="reuse requires the same execution.attempts (k, strategy)",
        )
    src_store = RunStore(source, run_id=str(info.get("run_id")))
    selected = {t.task_id for t in prog.tasks}
    copied = with_errors = 0
    outcomes: Counter[str] = Counter()
    policy = _checkpoint.RecoveryPolicy(source, "reuse", str(info.get("run_id"))) if recover else None
    for task_id, (state, d) in src_store.records.finished_tasks().items():
        if task_id not in selected:
            continue
        if policy is not None:
            failed = _eval_failed_attempts(d)
            if failed:  # A9: not copied; its attempts are evaluated again from their checkpoints
                policy.eval_failed.update((task_id, n) for n in failed)
                continue
        results = sorted(d.glob("attempt-*/result.json"))
        try:
            task_json = read_json(d / "task.json")
            parsed = [read_json(p) for p in results]
        except (ValueError, OSError):
            continue  # not verifiable → rerun
        if len(parsed) != len(task_json.get("attempts") or {}):
            continue
        if not all(_artifacts_intact(p.parent) for p in results):
            continue  # A6: missing or corrupt artifact bytes → the task runs again
        if req.execution.max_retries > 0 and state != "normal":
            from acx.interpreter._attempt import retry_reason
            from acx.ir import ExecutionIssue

            issues = [msgspec.convert(i, ExecutionIssue) for r in parsed for i in r.get("issues", [])]
            if retry_reason(issues, req.execution.retry_pattern_list):
                continue  # retry-eligible: run it again
        dest = run.store.details / state / d.name
        try:
            # Real copies, never hard links between runs; symlinks stay symlinks (following one,
            # a `self -> .` link in an agent's artifacts recurses until the disk is full).
            shutil.copytree(d, dest, symlinks=True)
        except (shutil.Error, OSError) as exc:
            log.warning("reuse: task %s not copied (%s); it runs again", task_id, exc, extra={"request": run.prog.name})
            shutil.rmtree(dest, ignore_errors=True)
            continue
        if not all(_artifacts_intact(p) for p in dest.glob("attempt-*")):
            shutil.rmtree(dest, ignore_errors=True)
            continue
        for p in sorted(dest.glob("attempt-*/result.json")):
            data = read_json(p)
            data.setdefault("artifacts", {})["reuse_history"] = {
                "source_run": info.get("run_id"),
                "retry_count": data.get("retry_count", 0),
            }
            data["retry_count"] = 0
            from acx.interpreter._fs import PRIVATE, atomic_write_json

            atomic_write_json(p, run.store.scrub.tree(data), mode=PRIVATE)
        audit = (info.get("resolved_execution_plans") or {}).get(task_id)
        if audit:
            run.plans_audit[task_id] = audit
        copied += 1
        with_errors += state in ("error", "fatal")
        outcomes[task_outcome(state, (r.get("metrics") or {} for r in parsed), run.primary)] += 1
    run.ctx.recovery = policy
    run.store.journal("reuse_loaded", source=str(source), tasks=copied)
    run._write_run_info("running", reused_from={"run_id": info.get("run_id"), "path": str(source)})
    run.ctx.emit(
        "reuse_loaded",
        payload={"tasks": copied, "errors": with_errors, "outcomes": dict(outcomes), "source_run": info.get("run_id")},
    )
    return copied


def _regrade_from(run: _RequestRun, source: Path) -> None:
    """``acx regrade``: every attempt of ``source`` is evaluated again from its checkpoint; no
    agent runs (A9). The source is held (shared) until this run closes: one still running is
    refused (E0617), and none can be resumed while it is read."""
    run.store.hold_for_reading(source)
    info = read_record(source / "run_info.json")
    run.ctx.recovery = _checkpoint.RecoveryPolicy(source, "regrade", str(info.get("run_id")))
    run.store.journal("regrade_loaded", source=str(source))
    run._write_run_info("running", regraded_from={"run_id": info.get("run_id"), "path": str(source)})


# ---- the orchestration --------------------------------------------------------------------------


async def run_orchestration(
    orch: Orchestration,
    programs: Sequence[RequestProgram],
    *,
    environ: Mapping[str, str],
    console: Callable[[ProgressEvent], None] = lambda e: None,
    resume_dirs: Mapping[str, str] | None = None,
    reuse: Mapping[str, str | None] | None = None,
    regrade: Mapping[str, str] | None = None,
    run_dirs: Mapping[str, str] | None = None,
    replay: Mapping[str, str] | None = None,
    checkpoint_resume: bool | None = None,
    recovery: str = "rerun",
    invocation: dict[str, Any] | None = None,
    cancel_scope_ready: Callable[[trio.CancelScope], None] | None = None,
    io_threads: bool = True,
) -> OrchestrationResult:
    """Run every request; returns statuses (never raises for task failures)."""
    started = _iso()
    first = preflight(programs, environ)
    scrub = Scrubber()
    runtime = orch.runtime
    concurrency, fd_warning = fit_open_files(orch.task_concurrency, sum(len(p.tasks) for p in programs))
    if fd_warning is not None:
        _tell_stderr(f"acx: warning: {fd_warning}")
    limits = Limits(concurrency, runtime.provider_limits, runtime.env_open_qps)
    runs = _open_runs(
        orch,
        programs,
        environ=environ,
        console=console,
        first=first,
        scrub=scrub,
        limits=limits,
        fd_warning=fd_warning,
        resume_dirs=resume_dirs,
        reuse=reuse,
        regrade=regrade,
        run_dirs=run_dirs,
        replay=replay,
        checkpoint_resume=checkpoint_resume,
        recovery=recovery,
        invocation=invocation,
        io_threads=io_threads,
    )
    for run in runs:
        if run.resumed:
            await run.recovery.reap_stale()
    status = "completed"
    slots = trio.Semaphore(max(1, concurrency))
    deadline = runtime.timeout_seconds if runtime.timeout_seconds and runtime.timeout_seconds > 0 else math.inf
    outer = trio.CancelScope()
    if cancel_scope_ready is not None:
        cancel_scope_ready(outer)
    disk_full: ResultsDiskFull | None = None
    try:
        with outer:
            with trio.move_on_after(deadline) as timer:
                await _dispatch(runs, slots)
            if timer.cancelled_caught:
                status = "timed_out"
    except* ResultsDiskFull as group:
        # Every task was cancelled (their sandboxes released in their cleanup scopes); the ones
        # not finished stay unrecorded, so `--resume` runs them (issue 11 item 11).
        raised = group.exceptions[0]
        disk_full = next((r.store.fault for r in runs if r.store.fault is not None), None) or (
            raised if isinstance(raised, ResultsDiskFull) else None
        )
    if outer.cancelled_caught:
        status = "cancelled"
    if disk_full is None:  # noted by a log or progress write only: still a run to resume
        disk_full = next((r.store.fault for r in runs if r.store.fault is not None), None)
    if disk_full is not None:
        status = "disk_full"
    outcomes = await _finish_runs(runs, status)
    return OrchestrationResult(
        orchestration_id=orch.id,
        name=orch.name,
        status=_overall(status, outcomes),
        requests=outcomes,
        started_at=started,
        finished_at=_iso(),
    )


def _open_runs(
    orch: Orchestration,
    programs: Sequence[RequestProgram],
    *,
    environ: Mapping[str, str],
    console: Callable[[ProgressEvent], None],
    first: Mapping[str, Any],
    scrub: Scrubber,
    limits: Limits,
    fd_warning: str | None,
    resume_dirs: Mapping[str, str] | None,
    reuse: Mapping[str, str | None] | None,
    regrade: Mapping[str, str] | None,
    run_dirs: Mapping[str, str] | None,
    replay: Mapping[str, str] | None,
    checkpoint_resume: bool | None,
    recovery: str,
    invocation: dict[str, Any] | None,
    io_threads: bool,
) -> list[_RequestRun]:
    """The run of every request, its run directory opened, locked and started (with what it reuses,
    regrades or recovers); on a refusal before any task ran, the directories it created are gone."""
    runtime = orch.runtime
    runs: list[_RequestRun] = []
    created: list[RunStore] = []
    try:
        for prog in programs:
            req = prog.request
            resume_dir = (resume_dirs or {}).get(prog.name)
            if resume_dir:
                store = RunStore.open_existing(resume_dir)
            elif (run_dirs or {}).get(prog.name):
                store = RunStore.create_at((run_dirs or {})[prog.name])
                created.append(store)
            else:
                store = RunStore.create(
                    runtime.results_dir,
                    prog.namespace or prog.name,
                    run_name=req.output.run_name,
                    run_id=req.output.run_id,
                )
                created.append(store)
            store.lock()
            store.io_threads = io_threads
            if invocation is not None:
                store.write_json(".acx/invocation.json", {**invocation, "request_name": prog.name})
            run = _RequestRun(prog, orch, store, limits, environ, console, first[prog.name], bool(resume_dir), scrub)
            run.replay_dir = (replay or {}).get(prog.name)
            runs.append(run)
        for run, prog in zip(runs, programs, strict=True):
            run.start()
            if fd_warning is not None:
                log.warning("%s", fd_warning, extra={"request": prog.name})
            recover = checkpoint_resume_enabled(prog, checkpoint_resume)
            want_reuse = (reuse or {}).get(prog.name, "__no__")
            regrade_source = (regrade or {}).get(prog.name)
            if regrade_source is not None:
                _regrade_from(run, Path(regrade_source))
            elif want_reuse != "__no__" and not run.resumed:
                source = find_reuse_source(run.store.run_dir.parent, want_reuse, exclude=run.store.run_dir)
                if source is not None:
                    _reuse_into(run, prog, source, recover=recover)
            elif run.resumed and recover:
                _reopen_for_recovery(run)
            if recovery == "strict" and run.ctx.recovery is not None:
                run.ctx.recovery.strict = True
    except (AcxUserError, OSError, ResultsDiskFull) as exc:
        # Refused before any task ran (a --reuse source that does not exist or does not fit, the
        # run id of a later request taken, a results disk already full): the run directories this
        # call created go too, so nothing half-made is left to be picked up by a later --reuse or
        # --resume.
        full = disk_full_error(exc) if not isinstance(exc, ResultsDiskFull) else exc
        if not isinstance(exc, AcxUserError) and full is None:
            raise
        for run in runs:
            run.detach_log()
            with contextlib.suppress(OSError):
                run.progress.close()
        for store in created:
            with contextlib.suppress(OSError):
                store.close()
            shutil.rmtree(store.run_dir, ignore_errors=True)
        if isinstance(exc, AcxUserError):
            raise
        raise AcxResultsError(
            f"the results disk is full: {exc}",
            code="E0630",
            path=str(runtime.results_dir),
            help="free space on that filesystem (or choose another --results-dir), then run again",
        ) from None

    return runs


async def _dispatch(runs: list[_RequestRun], slots: trio.Semaphore) -> None:
    """Every request's pending tasks, in declaration order, each waiting for a global slot (a
    request starts dispatching once the one before it has handed all its tasks to workers)."""
    async with _logs_kept_live(runs), trio.open_nursery() as nursery:
        for run in runs:
            finished = run.recovery.load_finished()
            if run.resumed and finished:
                # Finished before the interruption: loaded from this run's own results.
                errors = sum(run.outcomes[t].state in ("error", "fatal") for t in finished)
                run.ctx.emit(
                    "reuse_loaded",
                    payload={
                        "tasks": len(finished),
                        "errors": errors,
                        "outcomes": run.outcome_counts(finished),
                        "source_run": run.store.run_id,
                        "resumed": True,
                    },
                )
            pending = [t for t in run.prog.tasks if t.task_id not in finished]
            dispatched = trio.Event()

            async def task_slot(r: _RequestRun, task: TaskSpec) -> None:
                held = [True]

                def free_slot() -> None:
                    if held[0]:
                        held[0] = False
                        slots.release()

                try:
                    await r.run_task(task, free_slot)
                except Exception as exc:
                    # A full results disk stops the whole run (ResultsDiskFull); the task is
                    # not recorded, so a resume runs it. Any other task-level failure (not an
                    # attempt failure) fails its request only.
                    r.store.check_full(exc, r.store.run_dir)
                    r.task_crashed(task, exc)
                finally:
                    free_slot()

            async def run_request(r: _RequestRun, tasks: list[TaskSpec], handed: trio.Event) -> None:
                ok = False
                try:
                    async with trio.open_nursery() as gateway_nursery:
                        if await r.start_models(gateway_nursery):
                            ok = True
                            try:
                                async with trio.open_nursery() as rn:
                                    for task in tasks:
                                        if r.stopped is not None:
                                            r.not_run.append(task.task_id)
                                            continue
                                        await slots.acquire()
                                        rn.start_soon(task_slot, r, task)
                                    handed.set()
                            finally:
                                await r.stop_models()
                finally:
                    handed.set()
                if ok and r.stopped is None:
                    r.done.set()

            nursery.start_soon(run_request, run, pending, dispatched)
            # Declaration order: the next request starts dispatching only after this one
            # has handed all its tasks to workers.
            await dispatched.wait()


async def _finish_runs(runs: list[_RequestRun], status: str) -> list[RequestOutcome]:
    """Every request's outcome under the orchestration's ``status``, after the drivers' end-of-run
    sweeps (shielded: this runs after cancellation too)."""
    outcomes: list[RequestOutcome] = []
    with trio.CancelScope(shield=True):
        for run in runs:
            await run.recovery.end_driver_run()
        for run in runs:
            st = status if status != "completed" else "completed"
            if status == "completed" and (not run.done.is_set() or run.crashed):
                st = "failed"
            if status == "disk_full" and run.store.fault is None:
                st = "cancelled"  # stopped because another request's results disk filled
            outcomes.append(run.finishing.finish(st))
    return outcomes


def _may_hold_secret(scrub: Scrubber, event: ProgressEvent) -> bool:
    """One search of the event's encoding; an event that does not encode as it is (a lone
    surrogate) is left to the full walk."""
    try:
        return scrub.in_json(msgspec.json.encode(event, enc_hook=str))
    except (TypeError, ValueError, OverflowError, RecursionError):
        return True


def _tell_stderr(line: str) -> None:
    """A warning for the person running acx, before anything runs (a closed stderr is no error)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _no_console(event: ProgressEvent) -> None:
    """The console of a run whose display failed."""


@contextlib.asynccontextmanager
async def _logs_kept_live(runs: list[_RequestRun]) -> AsyncIterator[None]:
    """While the body runs: progress events and journal lines are written at least every
    ``SNAPSHOT_INTERVAL`` even when no later event or commit comes to carry them."""

    async def tick() -> None:
        while True:
            await trio.sleep(RunProgress.SNAPSHOT_INTERVAL)
            for run in runs:
                run.progress.tick()
                run.store.flush_journal()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()


def _overall(status: str, outcomes: list[RequestOutcome]) -> str:
    if status in ("timed_out", "cancelled", "disk_full"):
        return status
    failed = sum(1 for o in outcomes if o.status != "completed")
    if failed == 0:
        return "completed"
    return "failed" if failed == len(outcomes) else "partial_failure"
