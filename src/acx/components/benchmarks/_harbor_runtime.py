"""Run-time half of the ``harbor`` benchmark: prepare the sandbox, run the verifier, read the reward.

prepare_task
    creates ``/logs/agent``, ``/logs/verifier`` and ``/logs/artifacts`` and hands the agent the
    task's instruction. The tests are **not** uploaded: they are evaluation-only (B1).

evaluate
    1. stops every process still running in the sandbox (a session that can: the docker driver's
       ``kill_stray_processes`` kills everything outside the container's init session, however
       it was started — ``nohup``, ``setsid``, ``env -i``), so nothing the agent started runs
       alongside the verifier (shared/``reuse`` mode: the agent's own container);
    2. wipes ``/logs/verifier`` and ``/tests`` and recreates them empty — so a reward file the
       agent planted during its phase cannot survive; every file read afterwards was written
       by the verifier;
    3. uploads ``tests/`` to ``/tests`` and runs ``bash /tests/test.sh`` (stdout+stderr to
       ``/logs/verifier/test-stdout.txt``) under the evaluation budget; its exit code is ignored,
       as in Harbor — only the reward counts;
    4. reads ``/logs/verifier/reward.json`` (a flat object of numbers with a ``reward`` key), else
       ``reward.txt`` (one number). No reward is an ``evaluate`` error (``reward_missing``), an
       unparsable one ``verifier_result_invalid`` — never a 0.

The verifier's output tail kept in ``result.json`` (``verifier_output_tail``) has the values of the
evaluation variables resolved from ``${VAR}`` (``verifier.env`` secrets) replaced by ``********``.

Metrics: ``score`` = reward (primary), ``correct`` = reward ≥ 1.

Multi-step tasks (``TaskSpec.steps``): the interpreter calls ``prepare_task`` (which also resets
``/tests``, ``/logs/verifier``, ``/logs/agent`` and stages the step's ``workdir/``), the run and
``evaluate`` once per step with ``plan.step`` set; ``step_continues`` gates the next step (no
reward, or below ``min_reward``) and ``combine_steps`` gives the attempt the task's reward
(:func:`aggregate_rewards`, Harbor's ``mean`` or ``final``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import posixpath
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from acx.components._network_notice import with_network_notice
from acx.envref import has_reference_syntax, reference_values
from acx.errors import DriverError
from acx.ir import (
    ExecutionIssue,
    ExecutionPlan,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskSpec,
    TaskStep,
)
from acx.secrets import Scrubber

if TYPE_CHECKING:
    from acx.drivers import Session

__all__ = [
    "HarborRuntime",
    "aggregate_rewards",
    "combine_step_results",
    "min_reward_met",
    "parse_reward",
    "run_healthcheck",
    "scrub_values",
]

LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")


class RewardError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def parse_reward(reward_json: str | None, reward_txt: str | None) -> dict[str, float]:
    """The verifier's rewards: reward.json (flat dict of numbers, `reward` key) first, then reward.txt."""
    if reward_json is not None:
        if not reward_json.strip():
            raise RewardError("verifier_result_invalid", "reward.json is empty")
        try:
            data = json.loads(reward_json)
        except json.JSONDecodeError as exc:
            raise RewardError("verifier_result_invalid", f"reward.json is not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise RewardError("verifier_result_invalid", "reward.json must be an object of numbers")
        rewards: dict[str, float] = {}
        for k, v in data.items():
            n = _number(v)
            if n is None:
                raise RewardError("verifier_result_invalid", f"reward.json value {k!r} is not a finite number")
            rewards[str(k)] = n
        if "reward" not in rewards:
            raise RewardError("verifier_result_invalid", "reward.json has no `reward` key")
        return rewards
    if reward_txt is not None:
        text = reward_txt.strip()
        if not text:
            raise RewardError("verifier_result_invalid", "reward.txt is empty")
        try:
            value = float(text)
        except ValueError:
            raise RewardError("verifier_result_invalid", "reward.txt does not hold a number") from None
        if not math.isfinite(value):
            raise RewardError("verifier_result_invalid", "reward.txt does not hold a finite number")
        return {"reward": value}
    raise RewardError("reward_missing", "the verifier wrote no /logs/verifier/reward.json or reward.txt")


def scrub_values(text: str, values: Iterable[str]) -> str:
    """``text`` with every secret of ``values`` replaced by ``********`` (:class:`acx.secrets.Scrubber`)."""
    scrub = Scrubber()
    scrub.add_secret(values)
    return scrub.text(text)


def _secret_values(session: Session, plan: ExecutionPlan) -> list[str]:
    """The resolved values of the evaluation variables that hold ``${VAR}`` references, whole and
    each reference's own value (secrets; literal values in task.toml are not, as in the
    interpreter's result-file scrub)."""
    scoped = session.scoped_env()
    raw = plan.environment.evaluation_env_variables
    out: list[str] = []
    for key, value in raw.items():
        if has_reference_syntax(str(value)) and key in scoped:
            out += [scoped[key], *reference_values(str(value), scoped[key])]
    return out


async def _read_optional(session: Session, path: str) -> str | None:
    try:
        return await session.read_text(path)
    except FileNotFoundError:
        return None


def _as_root(session: Session) -> Any:
    """Root's scope for acx's own set-up commands, whatever user the stage runs as."""
    return session.user_scope("0") if session.supports_exec_user else contextlib.nullcontext()


def _tests_dirs(task: TaskSpec, plan: ExecutionPlan) -> list[str]:
    """What is uploaded to /tests, in order: the task's tests/, then the step's (its test.sh wins)."""
    meta = task.metadata
    if plan.step is None:
        return [meta["tests_dir"]] if meta.get("tests_dir") else []
    step = task.steps[plan.step]
    shared = meta.get("tests_dir")
    dirs = [shared] if shared and os.path.isdir(shared) else []
    return dirs + ([step.metadata["tests_dir"]] if step.metadata.get("tests_dir") else [])


async def _prepare_step(session: Session, step: TaskStep, plan: ExecutionPlan) -> None:
    """Before a step's agent (Harbor's MultiStepTrial._prepare_step): the previous step's shared
    verifier's /tests and /logs/verifier and the agent logs are emptied — the next agent must not
    see the grading harness; then ``steps/<name>/workdir/`` is uploaded into the working
    directory and its ``setup.sh`` run there, as the step's agent user. A failing setup.sh fails
    the step (it is not run, and no later step runs)."""
    assert plan.step is not None
    if plan.step > 0:
        with _as_root(session):
            res = await session.exec(
                [
                    "sh",
                    "-c",
                    "rm -rf /tests /logs/verifier && mkdir -p /logs/verifier && chmod 777 /logs/verifier "
                    "&& find /logs/agent -mindepth 1 -delete",
                ]
            )
        if not res.ok:
            raise DriverError(f"cannot reset /tests, /logs/verifier, /logs/agent: {res.stderr.strip()[:300]}")
    await _stage_workdir(session, step, plan)
    if step.metadata.get("healthcheck"):  # after the step's set-up, as its agent user
        await run_healthcheck(session, step.metadata["healthcheck"], plan.run_user)


async def _stage_workdir(session: Session, step: TaskStep, plan: ExecutionPlan) -> None:
    workdir_dir = step.metadata.get("workdir_dir")
    if not workdir_dir:
        return
    pwd = await session.exec(["pwd"])
    workdir = (pwd.stdout.strip() if pwd.ok else "") or "/"
    await session.upload_dir(str(workdir_dir), workdir)
    if not os.path.isfile(os.path.join(workdir_dir, "setup.sh")):
        return
    script = posixpath.join(workdir, "setup.sh")
    with _user_scope(session, plan.run_user):
        res = await session.exec(["bash", script], timeout=plan.run_timeout_seconds)
    if not res.ok:
        tail = (res.stderr or res.stdout).strip()[-300:]
        raise StepSetupError(f"step {step.name!r}: steps/{step.name}/workdir/setup.sh exited {res.returncode}: {tail}")


class StepSetupError(Exception):
    """A step's ``workdir/setup.sh`` failed: the step does not run."""


class HealthcheckError(Exception):
    """The task's (or a step's) healthcheck did not pass: the agent does not run."""


async def run_healthcheck(session: Session, hc: Mapping[str, Any], user: str | None) -> None:
    """Harbor's ``run_healthcheck`` (Docker HEALTHCHECK semantics): ``command`` until it exits 0;
    failures within ``start_period_sec`` do not count (retried every ``start_interval_sec``),
    after it ``retries`` consecutive failures (``interval_sec`` apart) fail the check."""
    import trio

    start_period_end = trio.current_time() + float(hc["start_period_sec"])
    failures = 0
    while True:
        in_start_period = trio.current_time() < start_period_end
        with _user_scope(session, user):
            res = await session.exec(["bash", "-c", hc["command"]], timeout=float(hc["timeout_sec"]))
        if res.ok:
            return
        if in_start_period:
            await trio.sleep(float(hc["start_interval_sec"]))
            continue
        failures += 1
        if failures >= hc["retries"]:
            raise HealthcheckError(f"healthcheck failed after {hc['retries']} consecutive retries: {hc['command']}")
        await trio.sleep(float(hc["interval_sec"]))


def _user_scope(session: Session, user: str | None) -> Any:
    return session.user_scope(user) if user is not None else contextlib.nullcontext()


def min_reward_met(rewards: Mapping[str, float], threshold: Mapping[str, float]) -> bool:
    """Harbor's ``_min_reward_failure`` is None: every gated key present and at least its threshold
    (a missing key counts as -inf)."""
    return all(rewards.get(key, -math.inf) >= limit for key, limit in threshold.items())


def aggregate_rewards(step_rewards: list[dict[str, float] | None], strategy: str) -> dict[str, float] | None:
    """The task's rewards from its steps' (Harbor's Trial._select_multi_step_reward): ``final`` is
    the last step that ran's rewards (None if it has none); ``mean`` the per-key mean over the
    steps that have rewards, a key missing from a step counting 0; None when no step has any."""
    if strategy == "final":
        return dict(step_rewards[-1]) if step_rewards and step_rewards[-1] is not None else None
    valid = [r for r in step_rewards if r is not None]
    keys = {k for r in valid for k in r}
    if not keys:
        return None
    return {k: sum(r.get(k, 0.0) for r in valid) / len(valid) for k in sorted(keys)}


def combine_step_results(task_id: str, names: list[str], results: list[RunResult], strategy: str) -> RunResult:
    """One attempt's result from its steps': the aggregate reward is the score; every step's
    status, rewards and issues in ``extra.steps``. A step's issues are the attempt's too, each
    naming its step — when the aggregate still has a reward (Harbor rewards the trial from the
    steps that have one), a step's evaluation error is only a warning and a fatal issue that ended
    the step an error."""
    import msgspec

    step_rewards: list[dict[str, float] | None] = []
    steps: list[dict[str, Any]] = []
    for name, res in zip(names, results, strict=False):
        rewards = res.extra.get("rewards") if isinstance(res.extra.get("rewards"), dict) else None
        step_rewards.append(rewards)
        entry: dict[str, Any] = {"name": name, "status": res.status, "rewards": rewards}
        if res.final_answer is not None:
            entry["final_answer"] = res.final_answer
        for key in ("verifier_returncode", "verifier_output_tail"):
            if key in res.extra:
                entry[key] = res.extra[key]
        if res.issues:
            entry["issues"] = [msgspec.to_builtins(i) for i in res.issues]
        if res.telemetry:
            entry["telemetry"] = res.telemetry
        if res.artifacts:  # collected into attempt-N/steps/<name>/
            entry["artifacts"] = res.artifacts
        steps.append(entry)
    skipped = names[len(results) :]
    aggregate = aggregate_rewards(step_rewards, strategy)
    issues: list[ExecutionIssue] = []
    for name, res in zip(names, results, strict=False):
        for i in res.issues:
            severity = i.severity
            if aggregate is not None and i.phase == "evaluate":
                severity = "warning"
            elif aggregate is not None and severity == "fatal":
                # It ended its step (and the task's later steps), not the attempt: scored all the same.
                severity = "error"
            issues.append(
                ExecutionIssue(severity=severity, phase=i.phase, code=i.code, message=f"step {name!r}: {i.message}")
            )
    if aggregate is None:
        issues.append(
            ExecutionIssue(
                severity="error",
                phase="evaluate",
                code="reward_missing",
                message=f"no step's verifier gave a reward ({strategy} of the steps' rewards)"
                if strategy == "mean"
                else "the last step that ran has no reward (multi_step_reward_strategy = final)",
            )
        )
    extra: dict[str, Any] = {"steps": steps, "multi_step_reward_strategy": strategy}
    if skipped:
        extra["steps_skipped"] = skipped
    metrics: dict[str, bool | int | float] = {}
    if aggregate is not None:
        extra["rewards"] = aggregate
        if "reward" in aggregate:
            metrics = {"score": aggregate["reward"], "correct": aggregate["reward"] >= 1.0}
        else:
            issues.append(
                ExecutionIssue(
                    severity="error",
                    phase="evaluate",
                    code="verifier_result_invalid",
                    message="the steps' aggregate rewards have no `reward` key",
                )
            )
    last = results[-1]
    telemetry = {k: v for k, v in last.telemetry.items() if k not in ("timed_out",)}
    telemetry["steps_run"] = len(results)
    return RunResult(
        task_id=task_id,
        final_answer=last.final_answer,
        trajectory=last.trajectory,
        issues=issues,
        metrics=metrics,
        telemetry=telemetry,
        extra=extra,
    )


class HarborRuntime:
    async def prepare_task(
        self, task: TaskSpec, session: Session | None, req: RunRequest, plan: ExecutionPlan
    ) -> PreparedTask:
        if session is not None:
            # World-writable, as Harbor makes them: an agent or verifier running as `[agent].user`
            # / `[verifier].user` writes its logs there.
            with _as_root(session):
                dirs = " ".join(LOG_DIRS)
                res = await session.exec(["sh", "-c", f"mkdir -p {dirs} && chmod 777 {dirs}"])
            if not res.ok:
                raise DriverError(f"cannot create {', '.join(LOG_DIRS)}: {res.stderr.strip()[:300]}")
        meta = task.metadata
        question = task.question
        metadata: dict[str, Any] = {"task_dir": meta.get("task_dir"), "solution_dir": meta.get("solution_dir")}
        if session is not None and meta.get("healthcheck") and not plan.step:
            # Harbor's Trial._prepare: after the environment starts, before the agent is set up.
            await run_healthcheck(session, meta["healthcheck"], None)
        if plan.step is not None:
            step = task.steps[plan.step]
            question = step.question
            metadata["step"] = step.name
            if "solve_script" in step.metadata:  # the step's own solution/ (Harbor's OracleAgent)
                metadata["solve_script"] = step.metadata["solve_script"]
            if session is not None:
                await _prepare_step(session, step, plan)
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            input=TaskInput(prompt=with_network_notice(question, plan), workspace=plan.environment.setup.workdir),
            # The oracle harness runs the reference solution; the tests stay evaluation-only (B1).
            metadata=metadata,
        )

    def step_continues(self, task: TaskSpec, plan: ExecutionPlan, result: RunResult) -> bool:
        """Harbor's MultiStepTrial: the remaining steps are skipped after a step with no verifier
        result (it failed before or in verification), or whose rewards miss its ``min_reward``."""
        rewards = result.extra.get("rewards")
        if not isinstance(rewards, dict):
            return False
        assert plan.step is not None
        threshold = plan.steps[plan.step].min_reward
        return threshold is None or min_reward_met(rewards, threshold)

    def combine_steps(self, task: TaskSpec, plan: ExecutionPlan, results: list[RunResult]) -> RunResult:
        return combine_step_results(
            task.task_id,
            [s.name for s in plan.steps],
            results,
            str(task.metadata.get("multi_step_reward_strategy") or "mean"),
        )

    async def evaluate(
        self,
        task: TaskSpec,
        prepared: PreparedTask,
        result: RunResult,
        req: RunRequest,
        plan: ExecutionPlan,
        session: Session | None = None,
    ) -> RunResult:
        import msgspec

        issues = list(result.issues)

        def failed(code: str, message: str) -> RunResult:
            issues.append(ExecutionIssue(severity="error", phase="evaluate", code=code, message=message))
            return msgspec.structs.replace(result, issues=issues, metrics={})

        if session is None:
            return failed("evaluation_setup_failed", "Harbor verification needs a sandbox (mode reuse or fresh)")
        tests_dirs = [str(d) for d in _tests_dirs(task, plan) if d]
        if not tests_dirs:
            return failed("evaluation_input_missing", "the task has no tests directory")
        # Nothing the agent started may run alongside the verifier (it could rewrite the reward).
        try:
            await session.kill_stray_processes()
        except DriverError as exc:
            return failed("verifier_setup_failed", f"cannot stop the agent's processes: {exc}")
        # The set-up runs as root (Harbor: reward files removed, tests uploaded and made
        # executable by root); only tests/test.sh runs as the evaluation user (`[verifier].user`).
        with _as_root(session):
            wipe = await session.exec(
                [
                    "sh",
                    "-c",
                    "rm -rf /logs/verifier /tests && mkdir -p /logs/verifier /tests && chmod 777 /logs/verifier",
                ]
            )
            if not wipe.ok:
                return failed("verifier_setup_failed", f"cannot reset /logs/verifier: {wipe.stderr.strip()[:300]}")
            for tests_dir in tests_dirs:  # a step's own tests over the task's (Harbor's Verifier)
                await session.upload_dir(tests_dir, "/tests")
            await session.exec(["sh", "-c", "chmod +x /tests/test.sh 2>/dev/null; true"])
        run = await session.exec(
            ["bash", "-c", "/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1"],
            timeout=plan.evaluation_timeout_seconds,
        )
        extra = {**result.extra, "verifier_returncode": run.returncode}
        stdout = await _read_optional(session, "/logs/verifier/test-stdout.txt")
        if stdout:
            # Scrubbed before the cut, so a secret straddling the cut cannot leak a fragment.
            extra["verifier_output_tail"] = scrub_values(stdout, _secret_values(session, plan))[-2000:]
        if run.timed_out:
            issues.append(
                ExecutionIssue(
                    severity="error",
                    phase="evaluate",
                    code="verifier_timeout",
                    message=f"tests/test.sh exceeded {plan.evaluation_timeout_seconds} s",
                )
            )
            return msgspec.structs.replace(result, issues=issues, metrics={}, extra=extra)
        try:
            rewards = parse_reward(
                await _read_optional(session, "/logs/verifier/reward.json"),
                await _read_optional(session, "/logs/verifier/reward.txt"),
            )
        except RewardError as exc:
            issues.append(ExecutionIssue(severity="error", phase="evaluate", code=exc.code, message=str(exc)))
            return msgspec.structs.replace(result, issues=issues, metrics={}, extra=extra)
        extra["rewards"] = rewards
        reward = rewards["reward"]
        return msgspec.structs.replace(
            result, issues=issues, metrics={"score": reward, "correct": reward >= 1.0}, extra=extra
        )
