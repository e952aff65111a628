"""Harbor multi-step tasks (``[[steps]]``, issue 22 item 4): load, plan, gate and aggregate.

Harbor 0.26's semantics (``models/task/config.py`` StepConfig, ``trial/multi_step.py``,
``trial/trial.py`` ``_select_multi_step_reward``), restated by the reference functions below and
held against acx's by hypothesis. The run itself, on the real engine, is in
tests/docker/test_harbor_parity.py (steps-mean, steps-final-gate, steps-user-env).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import UNSET
from msgspec.structs import replace
from tests.planner._helpers import DOCKER, plan_one

import acx.ir as ir
from acx.components._configs import HarborConfig
from acx.components.benchmarks._harbor_runtime import (
    aggregate_rewards,
    combine_step_results,
    min_reward_met,
)
from acx.components.benchmarks.harbor import HarborBenchmark
from acx.components.harbor_task import load_harbor_task
from acx.errors import AcxPlanError
from acx.interpreter._attempt import step_view


def _task(tmp_path: Path, toml: str, steps: dict[str, dict[str, str]], *, shared_test: bool = False) -> Path:
    """A multi-step task: ``steps`` maps a step directory name to its files (relative paths)."""
    root = tmp_path / "multi"
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM acx-test/bookworm:latest\n")
    (root / "task.toml").write_text(textwrap.dedent(toml))
    if shared_test:
        (root / "tests").mkdir()
        (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    for name, files in steps.items():
        for rel, text in files.items():
            path = root / "steps" / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return root


def _step(instruction: str = "do it\n", *, test: bool = True, **files: str) -> dict[str, str]:
    # solution__solve_sh="…" is solution/solve.sh
    named = {re.sub(r"_(sh|json|md)$", r".\1", k.replace("__", "/")): v for k, v in files.items()}
    out = {"instruction.md": instruction, **named}
    if test:
        out["tests/test.sh"] = "echo 1 > /logs/verifier/reward.txt\n"
    return out


TWO = """
[agent]
timeout_sec = 100.0
user = "agent"

[verifier]
timeout_sec = 30.0
user = "grader"
env = { MODE = "strict", TOKEN = "${GRADER_TOKEN}" }

[[steps]]
name = "one"
min_reward = 1

[[steps]]
name = "two"
min_reward = { reward = 0.5, style = 1 }

[steps.agent]
timeout_sec = 20.0
user = "root"

[steps.verifier]
timeout_sec = 40.0
user = "checker"
env = { MODE = "lenient", EXTRA = "${STEP_SECRET}" }
"""


USERS = replace(DOCKER, exec_user=True)


def test_steps_are_mapped_with_harbors_inheritance(tmp_path: Path) -> None:
    # issue 22 item 4 (contract H1 per step): the agent's timeout and user are inherited, the
    # verifier's timeout is not (Harbor's step VerifierConfig defaults it to 600 s), its env is
    # merged over the task's
    root = _task(
        tmp_path,
        TWO,
        {
            "one": _step("<!-- harbor-canary GUID 1234 -->\nFirst.\n", solution__solve_sh="true\n"),
            "two": _step("Second.\n", workdir__setup_sh="touch x\n"),
        },
    )
    (root / "instruction.md").write_text("unused by a multi-step task\n")
    t = load_harbor_task(root)
    one, two = t.steps
    assert t.question == ""  # Harbor: a multi-step task has no task-level instruction
    assert (one.name, one.question, two.question) == ("one", "First.", "Second.")
    assert one.run_timeout_seconds is UNSET and one.run_user is None  # the plan inherits the task's
    assert one.evaluation_timeout_seconds == 600.0 and one.evaluation_user is None
    assert one.evaluation_env_variables is None and one.min_reward == {"reward": 1.0}
    assert (two.run_timeout_seconds, two.run_user, two.evaluation_timeout_seconds) == (20.0, "root", 40.0)
    assert two.evaluation_user == "checker"
    assert two.evaluation_env_variables == {"MODE": "lenient", "TOKEN": "${GRADER_TOKEN}", "EXTRA": "${STEP_SECRET}"}
    assert two.min_reward == {"reward": 0.5, "style": 1.0}
    assert one.metadata["solve_script"] == "steps/one/solution/solve.sh" and "solve_script" not in two.metadata
    assert two.metadata["workdir_dir"] == str((root / "steps" / "two" / "workdir").resolve())
    assert one.metadata["test_script"] == "steps/one/tests/test.sh"
    assert t.metadata["multi_step_reward_strategy"] == "mean"
    assert t.load_warnings == []


def test_a_step_without_tests_uses_the_tasks(tmp_path: Path) -> None:
    root = _task(tmp_path, '[[steps]]\nname = "a"\n', {"a": _step(test=False)}, shared_test=True)
    (step,) = load_harbor_task(root).steps
    assert step.metadata["test_script"] == "tests/test.sh" and "tests_dir" not in step.metadata


def test_the_plan_resolves_each_steps_budgets_and_users(tmp_path: Path) -> None:
    # T2/T5 per step: the task's agent timeout for a step without its own, every budget scaled
    root = _task(tmp_path, TWO, {"one": _step(), "two": _step()})
    t = load_harbor_task(root)
    bench = HarborBenchmark(HarborConfig(path=str(root)))
    with pytest.raises(AcxPlanError) as e:  # a step's user is refused like the task's (E0458)
        plan_one(t, bench=bench)
    assert e.value.code == "E0458"
    plan = plan_one(t, bench=bench, caps=USERS, execution={"timeout_multiplier": 2})
    assert [s.name for s in plan.steps] == ["one", "two"]
    one, two = plan.steps
    assert (one.run_timeout_seconds, one.evaluation_timeout_seconds) == (200.0, 1200.0)
    assert (two.run_timeout_seconds, two.evaluation_timeout_seconds) == (40.0, 80.0)
    assert (one.run_user, one.evaluation_user, two.run_user, two.evaluation_user) == (
        "agent",
        "grader",
        "root",
        "checker",
    )
    assert "STEP_SECRET" in plan.required_env and "GRADER_TOKEN" in plan.required_env  # names only (V1)
    assert plan.evaluation_environment_mode == "reuse" and plan.step is None
    view = step_view(plan, 1)
    assert (view.step, view.run_timeout_seconds, view.run_user, view.evaluation_user) == (1, 40.0, "root", "checker")
    assert view.environment.evaluation_env_variables["MODE"] == "lenient"
    assert view.install_timeout_seconds is None  # the agent is installed before the first step only


def test_a_request_that_does_not_evaluate_in_the_run_environment_is_refused(tmp_path: Path) -> None:
    root = _task(tmp_path, '[[steps]]\nname = "a"\n', {"a": _step()})
    t = load_harbor_task(root)
    with pytest.raises(AcxPlanError) as e:
        plan_one(
            t, bench=HarborBenchmark(HarborConfig(path=str(root))), environment={"evaluation_environment_mode": "fresh"}
        )
    assert e.value.code == "E0413" and "verified in the agent's environment" in str(e.value)


@pytest.mark.parametrize(
    ("toml", "line", "feature"),
    [
        ('[[steps]]\nname = "a"\n[steps.verifier]\nenvironment_mode = "separate"\n', 4, "separate verifier"),
        ('[[steps]]\nname = "a"\n[steps.verifier.environment]\ndocker_image = "x"\n', 3, "separate verifier"),
        ('[verifier]\nenvironment_mode = "separate"\n[[steps]]\nname = "a"\n', 2, "separate verifier"),
    ],
)
def test_per_step_features_acx_cannot_run_are_refused_at_their_line(
    tmp_path: Path, toml: str, line: int, feature: str
) -> None:
    # never silently ignored: E0413 naming the feature, at its task.toml line, with a remedy
    root = _task(tmp_path, toml, {"a": _step()})
    with pytest.raises(AcxPlanError) as e:
        load_harbor_task(root)
    assert e.value.code == "E0413" and feature in str(e.value) and "multi-step" in str(e.value)
    assert e.value.span is not None and e.value.span.line == line, e.value.span
    assert e.value.help


@pytest.mark.parametrize(
    ("toml", "steps", "code", "needle"),
    [
        ('[[steps]]\nname = "a"\n[[steps]]\nname = "A"\n', {"a": _step(), "A": _step()}, "E0412", "repeats step 1"),
        ('[[steps]]\nname = "a/b"\n', {}, "E0412", "portable directory name"),
        ('[[steps]]\nname = "con"\n', {"con": _step()}, "E0412", "portable directory name"),
        ("[[steps]]\nvalue = 1\n", {}, "E0412", "needs a name"),
        ('[[steps]]\nname = "a"\n', {"a": {"tests/test.sh": "x"}}, "E0410", "no steps/a/instruction.md"),
        ('[[steps]]\nname = "a"\n', {"a": _step(test=False)}, "E0410", "no test script"),
        ('multi_step_reward_strategy = "best"\n[[steps]]\nname = "a"\n', {"a": _step()}, "E0412", "best"),
        ('[[steps]]\nname = "a"\nmin_reward = "high"\n', {"a": _step()}, "E0412", "min_reward"),
        ('[[steps]]\nname = "a"\nmin_reward = { reward = true }\n', {"a": _step()}, "E0412", "min_reward"),
    ],
)
def test_invalid_steps_are_located_errors(tmp_path: Path, toml: str, steps: dict, code: str, needle: str) -> None:
    root = _task(tmp_path, toml, steps)
    with pytest.raises(AcxPlanError) as e:
        load_harbor_task(root)
    assert e.value.code == code and needle in str(e.value), str(e.value)
    assert e.value.span is not None and e.value.span.file.endswith("task.toml")


def test_unhonoured_step_declarations_are_warnings(tmp_path: Path) -> None:
    # H6: reported with their line (and in result.json, as for every load warning)
    toml = (
        'artifacts = ["/app/out"]\n[[steps]]\nname = "a"\nmood = "x"\n'
        '[steps.healthcheck]\ncommand = "true"\nwhen = 1\n[steps.agent]\nhat = 1\n'
    )
    t = load_harbor_task(_task(tmp_path, toml, {"a": _step()}))
    text = "\n".join(t.load_warnings)
    for key, line in (("steps.0.mood", 4), ("steps.0.healthcheck.when", 7), ("steps.0.agent.hat", 9)):
        assert f"task.toml:{line}: " in text and f"`{key}`" in text, text
    assert "`artifacts`" not in text  # collected after every step, as Harbor does
    # the step's healthcheck is mapped, with Harbor's defaults
    assert t.steps[0].metadata["healthcheck"] == {
        "command": "true",
        "interval_sec": 5.0,
        "timeout_sec": 30.0,
        "start_period_sec": 0.0,
        "start_interval_sec": 5.0,
        "retries": 3,
    }


def test_a_reward_strategy_in_a_single_step_task_is_a_warning(harbor_task) -> None:
    t = load_harbor_task(harbor_task("one", 'multi_step_reward_strategy = "final"\n'))
    assert t.steps == [] and "`multi_step_reward_strategy`" in "\n".join(t.load_warnings)


# ---- the reward rules: a reference written from Harbor's code, held against acx's -------------
def _harbor_mean(step_rewards: list[dict[str, float] | None]) -> dict[str, float] | None:
    """Trial._aggregate_step_rewards: per-key means over the steps with a verifier result."""
    valid = [r or {} for r in step_rewards if r is not None]
    if not valid:
        return None
    keys = {k for r in valid for k in r}
    if not keys:
        return None
    return {k: sum(r.get(k, 0) for r in valid) / len(valid) for k in keys}


def _harbor_select(step_rewards: list[dict[str, float] | None], strategy: str) -> dict[str, float] | None:
    if strategy == "final":
        return step_rewards[-1] if step_rewards else None
    return _harbor_mean(step_rewards)


def _harbor_gate_fails(rewards: dict[str, float] | None, threshold: dict[str, float]) -> bool:
    """MultiStepTrial._min_reward_failure is not None."""
    for key, limit in threshold.items():
        actual = rewards.get(key, float("-inf")) if rewards else float("-inf")
        if actual < limit:
            return True
    return False


KEYS = st.sampled_from(["reward", "style", "speed"])
VALUES = st.floats(min_value=-2, max_value=2, allow_nan=False)
REWARDS = st.one_of(st.none(), st.dictionaries(KEYS, VALUES, min_size=1, max_size=3))


@given(st.lists(REWARDS, min_size=1, max_size=6), st.sampled_from(["mean", "final"]))
def test_aggregate_is_harbors(step_rewards: list, strategy: str) -> None:
    got = aggregate_rewards(step_rewards, strategy)
    want = _harbor_select(step_rewards, strategy)
    if want is None:
        assert got is None
    else:
        assert got is not None and set(got) == set(want)
        assert all(math.isclose(got[k], want[k], abs_tol=1e-12) for k in want)


@given(REWARDS, st.dictionaries(KEYS, VALUES, min_size=1, max_size=3))
def test_min_reward_gate_is_harbors(rewards: dict | None, threshold: dict) -> None:
    if rewards is None:  # no verifier result: the step already ends the task
        return
    assert min_reward_met(rewards, threshold) is not _harbor_gate_fails(rewards, threshold)


def _result(rewards: dict[str, float] | None, *issues: ir.ExecutionIssue) -> ir.RunResult:
    extra = {"rewards": rewards} if rewards is not None else {}
    return ir.RunResult(task_id="t", extra=extra, issues=list(issues))


MISSING = ir.ExecutionIssue(severity="error", phase="evaluate", code="reward_missing", message="no reward")


def test_combined_result_scores_the_aggregate_and_keeps_each_step() -> None:
    res = combine_step_results("t", ["a", "b", "c"], [_result({"reward": 1.0}), _result(None, MISSING)], "mean")
    assert res.metrics == {"score": 1.0, "correct": True}
    assert [s["rewards"] for s in res.extra["steps"]] == [{"reward": 1.0}, None]
    assert res.extra["steps_skipped"] == ["c"]
    # the step's evaluation error is the attempt's warning while the aggregate has a reward
    assert [(i.severity, i.code, i.message) for i in res.issues] == [
        ("warning", "reward_missing", "step 'b': no reward")
    ]
    final = combine_step_results("t", ["a", "b"], [_result({"reward": 1.0}), _result(None, MISSING)], "final")
    assert final.metrics == {} and {(i.severity, i.code) for i in final.issues} == {
        ("error", "reward_missing")
    }  # final: the last step that ran has no reward


def test_combined_result_without_a_reward_key_is_invalid() -> None:
    res = combine_step_results("t", ["a"], [_result({"style": 1.0})], "mean")
    assert res.metrics == {} and res.extra["rewards"] == {"style": 1.0}
    assert [i.code for i in res.issues] == ["verifier_result_invalid"]


def test_a_shipped_prior_trajectory_is_a_warning(tmp_path: Path, harbor_task) -> None:
    # Harbor seeds the agent's session with trajectory.json beside the (first step's) instruction;
    # acx gives agents no prior context: said, not silently dropped
    root = _task(tmp_path, '[[steps]]\nname = "a"\n', {"a": _step(trajectory_json="{}")})
    assert any("trajectory.json: prior agent context" in w for w in load_harbor_task(root).load_warnings)
    single = harbor_task("single", "")
    (single / "trajectory.json").write_text("{}")
    assert any("prior agent context" in w for w in load_harbor_task(single).load_warnings)


CORPUS = Path(__file__).resolve().parents[1] / "docker" / "harbor_parity"


def _acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_compile_plans_and_explain_show_the_steps(tmp_path: Path) -> None:
    # the plan shows the steps (acx compile --plans) and where a step's budget came from (explain)
    spec = tmp_path / "s.acx"
    spec.write_text(
        f'run r {{\n  benchmark harbor {{ path = "{CORPUS}"; task_names = ["steps-*"] }}\n'
        "  harness oracle\n  environment docker\n}\n"
    )
    proc = _acx("compile", str(spec), "--plans", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "steps        2, in order in one environment" in out
    assert "as-builder · run 30s · evaluation 45s · users run builder, evaluation grader" in out
    assert "evaluation env EXPECT, MODE" in out
    assert "gate · run 1m · evaluation 10m · later steps only if reward >= 1" in out
    assert "reward       final: the rewards of the last step that ran" in out
    assert "reward       mean: the per-key mean over the steps with a reward" in out
    proc = _acx("explain", str(spec), "r", "steps.1.run_timeout_seconds", "--task", "steps-user-env", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "steps.1.run_timeout_seconds = 30.0" in proc.stdout and "task steps-user-env" in proc.stdout


NO_NET = ir.NetworkPolicy(network_mode="no-network")
PUBLIC = ir.NetworkPolicy(network_mode="public")


def test_a_steps_own_network_policy_is_its_phase_policy(tmp_path: Path) -> None:
    # Harbor's _explicit_phase_policy: the step's [steps.agent]/[steps.verifier] policy, else the
    # task's (the agent's: the environment baseline); a request's explicit policy wins (P6)
    toml = """
    [environment]
    network_mode = "no-network"

    [[steps]]
    name = "offline"

    [[steps]]
    name = "online"
    [steps.agent]
    network_mode = "public"
    [steps.verifier]
    network_mode = "allowlist"
    allowed_hosts = ["pypi.org"]
    """
    root = _task(tmp_path, toml, {"offline": _step(), "online": _step()})
    t = load_harbor_task(root)
    assert [s.run_network_policy for s in t.steps] == [None, PUBLIC]
    assert t.steps[1].evaluation_network_policy == ir.NetworkPolicy(
        network_mode="allowlist", allowed_hosts=["pypi.org"]
    )
    bench = HarborBenchmark(HarborConfig(path=str(root)))
    plan = plan_one(t, bench=bench)
    assert plan.run_network_policy == NO_NET
    assert plan.steps[0].run_network_policy is None  # the plan's
    assert plan.steps[1].run_network_policy == PUBLIC
    assert step_view(plan, 0).run_network_policy == NO_NET and step_view(plan, 1).run_network_policy == PUBLIC
    assert step_view(plan, 1).evaluation_network_policy.allowed_hosts == ["pypi.org"]
    overridden = plan_one(t, bench=bench, environment={"run_network_policy": {"network_mode": "no-network"}})
    assert overridden.steps[1].run_network_policy is None  # the request's explicit policy wins
    with pytest.raises(AcxPlanError) as e:  # checked against the driver like the task's (allowlist)
        plan_one(t, bench=bench, caps=replace(DOCKER, network_modes=("public", "no-network")))
    assert "steps.1.evaluation_network_policy" in str(e.value)


def test_a_steps_artifacts_and_collect_commands_add_to_the_tasks(tmp_path: Path) -> None:
    # Harbor's _collect_step_artifacts: the task's artifacts and collect hooks, then the step's,
    # after every step's agent; acx collects them into attempt-N/steps/<name>/
    toml = """
    artifacts = ["/app/all.txt"]
    [[verifier.collect]]
    command = "echo task"

    [[steps]]
    name = "a"
    artifacts = [{source = "/app/a.txt", destination = "a-out.txt"}]
    [[steps.verifier.collect]]
    command = "echo step"
    timeout_sec = 5

    [[steps]]
    name = "b"
    """
    root = _task(tmp_path, toml, {"a": _step(), "b": _step()})
    t = load_harbor_task(root)
    a, b = t.steps
    assert [x.source for x in a.artifacts] == ["/app/a.txt"] and a.artifacts[0].destination == "a-out.txt"
    assert [(c.command, c.timeout_seconds) for c in a.artifact_collect] == [("echo step", 5.0)]
    assert (b.artifacts, b.artifact_collect) == ([], [])
    plan = plan_one(t, bench=HarborBenchmark(HarborConfig(path=str(root))))
    view = step_view(plan, 0)
    assert [x.source for x in view.artifacts][-2:] == ["/app/all.txt", "/app/a.txt"]
    assert [c.command for c in view.artifact_collect] == ["echo task", "echo step"]
    assert [x.source for x in step_view(plan, 1).artifacts] == [x.source for x in plan.artifacts]
    replaced = plan_one(t, bench=HarborBenchmark(HarborConfig(path=str(root))), execution={"artifacts": ["/x"]})
    assert replaced.steps[0].artifacts == []  # the request's artifacts replace the task's and the steps'
    with pytest.raises(AcxPlanError) as e:  # the step's entries are checked like the task's, located
        load_harbor_task(_task(tmp_path / "bad", '[[steps]]\nname = "a"\nartifacts = ["rel"]\n', {"a": _step()}))
    assert "steps.0.artifacts.0.source" in str(e.value) and e.value.span.line == 3


def test_a_fatal_step_issue_is_an_error_of_a_scored_attempt() -> None:
    fatal = ir.ExecutionIssue(severity="fatal", phase="setup", code="setup_failed", message="setup.sh exited 3")
    res = combine_step_results("t", ["a", "b"], [_result({"reward": 0.5}), _result(None, fatal)], "mean")
    assert res.metrics["score"] == 0.5
    assert [(i.severity, i.code) for i in res.issues] == [("error", "setup_failed")]
    alone = combine_step_results("t", ["b"], [_result(None, fatal)], "mean")  # nothing scored: still fatal
    assert ("fatal", "setup_failed") in {(i.severity, i.code) for i in alone.issues} and alone.metrics == {}
    assert alone.extra["steps"][0]["issues"][0]["severity"] == "fatal"


def test_a_step_file_linked_outside_the_task_is_refused(tmp_path: Path) -> None:
    # issue 11 item 10 for steps/: a symlinked step instruction would put a host file in the prompt
    root = _task(tmp_path, '[[steps]]\nname = "a"\n', {"a": _step()})
    outside = tmp_path / "secret.txt"
    outside.write_text("host file\n")
    (root / "steps" / "a" / "instruction.md").unlink()
    (root / "steps" / "a" / "instruction.md").symlink_to(outside)
    with pytest.raises(AcxPlanError) as e:
        load_harbor_task(root)
    assert e.value.code == "E0414" and "steps/a/instruction.md" in str(e.value)


class _ScriptedSession:
    """Exit codes in order, each call's (virtual) time recorded; the real loop, a fake sandbox."""

    supports_exec_user = True

    def __init__(self, codes: list[int]) -> None:
        self.codes = list(codes)
        self.times: list[float] = []
        self.users: list[str | None] = []
        self._user: str | None = None

    def user_scope(self, user: str):
        import contextlib

        @contextlib.contextmanager
        def scope():
            self._user = user
            try:
                yield
            finally:
                self._user = None

        return scope()

    async def exec(self, argv: list[str], timeout: float | None = None):
        import trio

        self.times.append(trio.current_time())
        self.users.append(self._user)
        assert argv[:2] == ["bash", "-c"] and timeout == 30.0
        code = self.codes.pop(0)
        return type("R", (), {"ok": code == 0, "returncode": code})()


HC = {"command": "test -f /ready", "interval_sec": 5.0, "timeout_sec": 30.0, "start_period_sec": 12.0}


@pytest.mark.parametrize(
    ("codes", "retries", "passes", "times"),
    [
        ([0], 3, True, [0.0]),
        # start period 12 s, retried every 2 s without counting; then 3 failures 5 s apart fail it
        ([1] * 9, 3, False, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 17.0, 22.0]),
        ([1, 1, 1, 1, 1, 1, 1, 1, 0], 3, True, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 17.0, 22.0]),
        ([1] * 7, 1, False, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]),
    ],
)
def test_healthcheck_follows_harbors_retry_rules(
    codes: list[int], retries: int, passes: bool, times: list[float]
) -> None:
    import trio
    import trio.testing

    from acx.components.benchmarks._harbor_runtime import HealthcheckError, run_healthcheck

    session = _ScriptedSession(codes)
    hc = {**HC, "start_interval_sec": 2.0, "retries": retries}

    async def main() -> bool:
        try:
            await run_healthcheck(session, hc, "agent")  # type: ignore[arg-type]
        except HealthcheckError as exc:
            assert f"after {retries} consecutive retries: test -f /ready" in str(exc)
            return False
        return True

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) is passes
    assert session.times == times and set(session.users) == {"agent"}


_SCALARS = st.one_of(
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["", "a", "shared", "separate", "public", "/app/x", "org/x", "true", "${X}"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["name", "command", "k"]), inner, max_size=3)
    ),
    max_leaves=6,
)
_STEP_KEYS = ["name", "agent", "verifier", "min_reward", "healthcheck", "artifacts", "other"]
_SUB_KEYS = [
    "timeout_sec",
    "user",
    "env",
    "network_mode",
    "allowed_hosts",
    "environment_mode",
    "collect",
    "environment",
]


@given(
    st.dictionaries(st.sampled_from(_STEP_KEYS), _VALUES, max_size=4),
    st.dictionaries(st.sampled_from(_SUB_KEYS), _VALUES, max_size=3),
    st.sampled_from(["agent", "verifier", "healthcheck"]),
)
def test_any_step_table_loads_or_is_a_located_error(step: dict, sub: dict, where: str) -> None:
    # bad input is a clear error (E04xx with a task.toml position), never a traceback
    import tempfile

    from tests.planner.test_harbor_fields import _toml

    item = {"name": "a", **step, where: sub}
    with tempfile.TemporaryDirectory() as tmp:
        root = _task(Path(tmp), "", {"a": _step()})
        (root / "task.toml").write_text(_toml({"steps": [item]}))
        try:
            load_harbor_task(root)
        except AcxPlanError as exc:
            assert exc.code.startswith("E04") and exc.span is not None and exc.span.file.endswith("task.toml")
