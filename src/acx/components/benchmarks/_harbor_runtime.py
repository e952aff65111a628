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
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from acx.components._network_notice import with_network_notice
from acx.envref import has_reference_syntax, reference_values
from acx.errors import DriverError
from acx.ir import ExecutionIssue, ExecutionPlan, PreparedTask, RunRequest, RunResult, TaskInput, TaskSpec
from acx.secrets import Scrubber

if TYPE_CHECKING:
    from acx.drivers import Session

__all__ = ["HarborRuntime", "parse_reward", "scrub_values"]

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
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            input=TaskInput(prompt=with_network_notice(task.question, plan), workspace=plan.environment.setup.workdir),
            # The oracle harness runs the reference solution; the tests stay evaluation-only (B1).
            metadata={"task_dir": meta.get("task_dir"), "solution_dir": meta.get("solution_dir")},
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
        tests_dir = task.metadata.get("tests_dir")
        if not tests_dir:
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
            await session.upload_dir(str(tests_dir), "/tests")
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
