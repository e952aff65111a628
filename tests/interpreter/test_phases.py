"""Phases, deadlines and statuses on the fake driver and trio's MockClock (T3, S2, E, V2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import trio
from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks

from acx.drivers._base import OpenRequest, Session, SessionRecord
from acx.drivers.fake import FakeDriver
from acx.errors import DriverError
from acx.interpreter._store import RunStore
from acx.ir import EnvironmentSpec, ExecutionIssue, ExecutionSpec, NetworkPolicy, RunResult


def _phases(events: list[Any], task_id: str = "t0") -> list[str]:
    return [e.phase for e in events if e.event == "phase_changed" and e.task_id == task_id]


def test_phase_order_and_release(tmp_path: Path) -> None:
    # contract T3, E1: every phase is an event, in lifecycle order; the session is released.
    events: list[Any] = []
    driver = FakeDriver()
    result = run([program(FakeBench(), PyHarness(), tasks(1), driver=driver)], tmp_path, events=events)
    assert result.status == "completed" and result.exit_code == 0
    assert _phases(events) == [
        "open_environment",
        "prepare_task",
        "start_harness",
        "run_harness",
        "collect_harness_result",
        "release",
        "save_evaluation_checkpoint",  # contract A9: mode none checkpoints before evaluating
        "evaluate",
    ]
    assert driver.live_sessions() == [] and len(driver.closed) == 1
    assert not list((run_dir(result) / ".env-resources").iterdir())


def test_open_request_labels(tmp_path: Path) -> None:
    # The labels `acx gc` relies on are on every OpenRequest.
    import os

    driver = FakeDriver()
    result = run([program(FakeBench(), PyHarness(), tasks(1), driver=driver)], tmp_path)
    labels = driver.opened[0].labels
    assert labels["acx.run_id"] == result.requests[0].run_id
    assert labels["acx.pid"] == str(os.getpid()) and labels["acx.task"] == "t0" and labels["acx.attempt"] == "1"
    assert {"acx.request", "acx.session", "acx.host"} <= set(labels)


def test_harness_watchdog_is_T_plus_compensation(tmp_path: Path) -> None:
    # contract T3: the harness gets T; the watchdog around it is T + compensation.
    seen: dict[str, float] = {}

    async def hang(prepared: Any, session: Any, plan: Any) -> RunResult:
        seen["start"] = trio.current_time()
        try:
            await trio.sleep_forever()
        finally:
            seen["end"] = trio.current_time()
        raise AssertionError

    harness = PyHarness(hang)
    ex = ExecutionSpec(run_timeout_seconds=100, run_timer_compensation_seconds=20)
    result = run([program(FakeBench(), harness, tasks(1), execution=ex)], tmp_path)
    assert seen["end"] - seen["start"] == 120
    res = read_results(run_dir(result))["t0"][0]
    assert any(i["code"] == "run_timeout" and i["severity"] == "error" for i in res["issues"])
    assert res["telemetry"]["timed_out"] is True
    assert harness.collected == 1 and harness.closed == 1  # collection and cleanup still ran
    assert res["status"] == "run_error"


def test_harness_free_run_task_gets_T_exactly(tmp_path: Path) -> None:
    # contract T3: a harness-free benchmark's run_task gets T exactly (no compensation).
    seen: dict[str, float] = {}

    async def run_task(task: Any, session: Any, plan: Any) -> RunResult:
        seen["start"] = trio.current_time()
        try:
            await trio.sleep_forever()
        finally:
            seen["end"] = trio.current_time()
        raise AssertionError

    bench = FakeBench(run_task=run_task, harness_free=True)
    ex = ExecutionSpec(run_timeout_seconds=50, run_timer_compensation_seconds=20)
    run([program(bench, PyHarness(), tasks(1), execution=ex)], tmp_path)
    assert seen["end"] - seen["start"] == 50


def test_collect_result_has_its_own_unscaled_budget(tmp_path: Path) -> None:
    # contract T3: collect_result is bounded by runresult_collect_timeout_seconds, the error is kept.
    seen: dict[str, float] = {}

    async def slow_collect(prepared: Any, session: Any, partial: Any) -> Any:
        seen["start"] = trio.current_time()
        try:
            await trio.sleep_forever()
        finally:
            seen["end"] = trio.current_time()

    ex = ExecutionSpec(runresult_collect_timeout_seconds=60, timeout_multiplier=3.0)
    result = run([program(FakeBench(), PyHarness(collect=slow_collect), tasks(1), execution=ex)], tmp_path)
    assert seen["end"] - seen["start"] == 60
    res = read_results(run_dir(result))["t0"][0]
    assert [i["code"] for i in res["issues"]] == ["collect_timeout"]


def test_evaluation_timeout_uses_benchmark_timeout_metrics(tmp_path: Path) -> None:
    # contract T3: on evaluation timeout, the benchmark's timeout metrics plus an error issue.
    async def slow_eval(task: Any, result: Any, session: Any) -> Any:
        await trio.sleep(10_000)

    bench = FakeBench(evaluate=slow_eval, timeout_metrics={"correct": False})
    ex = ExecutionSpec(evaluation_timeout_seconds=30)
    result = run([program(bench, PyHarness(), tasks(1), execution=ex)], tmp_path)
    res = read_results(run_dir(result))["t0"][0]
    assert res["metrics"] == {"correct": False}
    assert res["status"] == "eval_error"
    assert [i["code"] for i in res["issues"]] == ["evaluation_timeout"]


def test_evaluation_timeout_without_timeout_metrics_has_no_score(tmp_path: Path) -> None:
    # contract S2: no declared timeout metrics → no score (never a silent 0).
    async def slow_eval(task: Any, result: Any, session: Any) -> Any:
        await trio.sleep(10_000)

    ex = ExecutionSpec(evaluation_timeout_seconds=30)
    result = run([program(FakeBench(evaluate=slow_eval), PyHarness(), tasks(1), execution=ex)], tmp_path)
    assert read_results(run_dir(result))["t0"][0]["metrics"] == {}


def test_timed_out_command_is_killed_in_the_sandbox(tmp_path: Path) -> None:
    # contract T3: a deadline kills the command in the sandbox, not just the coroutine.
    driver = FakeDriver()

    async def run_cmd(prepared: Any, session: Any, plan: Any) -> RunResult:
        await session.exec("sleep 1000 & wait", shell=True)
        raise AssertionError("exec should have been cancelled by the watchdog")

    ex = ExecutionSpec(run_timeout_seconds=5, run_timer_compensation_seconds=1)
    run([program(FakeBench(), PyHarness(run_cmd), tasks(1), driver=driver, execution=ex)], tmp_path)
    session = next(iter(driver.sessions.values()))
    assert session.alive == {}


def test_statuses_per_phase(tmp_path: Path) -> None:
    # contract S2: run-side errors → run_error, evaluation errors → eval_error, both → combined;
    # a valid 0 is completed, not an error.
    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        issues = []
        if prepared.task_id in ("t1", "t2"):
            issues.append(ExecutionIssue(severity="error", phase="run", code="agent_exit_nonzero"))
        return RunResult(task_id=prepared.task_id, final_answer="wrong", issues=issues)

    async def evaluate(task: Any, result: Any, session: Any) -> Any:
        issues = list(result.issues)
        if task.task_id in ("t2", "t3"):
            issues.append(ExecutionIssue(severity="error", phase="evaluate", code="judge_failed"))
            return msgspec.structs.replace(result, issues=issues)
        return msgspec.structs.replace(result, metrics={"correct": False}, issues=issues)

    result = run([program(FakeBench(evaluate=evaluate), PyHarness(execute), tasks(4))], tmp_path)
    res = read_results(run_dir(result))
    assert res["t0"][0]["status"] == "completed" and res["t0"][0]["metrics"] == {"correct": False}
    assert res["t1"][0]["status"] == "run_error"
    assert res["t2"][0]["status"] == "run_error_or_eval_error"
    assert res["t3"][0]["status"] == "eval_error"
    assert (run_dir(result) / "details" / "normal").joinpath  # state dirs exist
    assert result.requests[0].status == "completed"  # errors are not fatal: the score stands


def test_fatal_issue_fails_the_request_and_skips_evaluation(tmp_path: Path) -> None:
    # S1/S2: a final FATAL issue invalidates the official score (request failed, exit 1).
    async def boom(prepared: Any, session: Any, plan: Any) -> RunResult:
        raise RuntimeError("agent crashed")

    bench = FakeBench()
    result = run([program(bench, PyHarness(boom), tasks(2))], tmp_path)
    assert result.status == "failed" and result.exit_code == 1
    assert ("evaluate", "t0") not in bench.calls
    res = read_results(run_dir(result))["t0"][0]
    assert res["issues"][0]["code"] == "harness_failed" and res["issues"][0]["severity"] == "fatal"
    metrics = (run_dir(result) / "metrics.json").read_text()
    assert '"evaluation_failed": true' in metrics
    assert (run_dir(result) / "details" / "fatal").is_dir() and len(
        list((run_dir(result) / "details" / "fatal").iterdir())
    ) == 2


def test_open_failure_is_fatal_setup_issue(tmp_path: Path) -> None:
    driver = FakeDriver(fail_open=5)
    result = run([program(FakeBench(), PyHarness(), tasks(1), driver=driver)], tmp_path)
    res = read_results(run_dir(result))["t0"][0]
    assert res["issues"][0]["code"] == "environment_failed" and res["issues"][0]["phase"] == "setup"
    assert not list((run_dir(result) / ".env-resources").iterdir())


def test_keep_environment_keeps_session_and_record(tmp_path: Path) -> None:
    driver = FakeDriver()
    ex = ExecutionSpec(keep_environment=True)
    result = run([program(FakeBench(), PyHarness(), tasks(1), driver=driver, execution=ex)], tmp_path)
    assert driver.closed == [] and len(driver.live_sessions()) == 1
    records = list((run_dir(result) / ".env-resources").glob("*.json"))
    assert len(records) == 1 and '"kept"' in records[0].read_text()


def test_reuse_mode_switches_network_policy_for_evaluation(tmp_path: Path) -> None:
    # P6/H4: evaluation in the run session switches to the evaluation policy, then restores.
    driver = FakeDriver()
    env = EnvironmentSpec(id="fake")
    overrides = {
        "evaluation_environment_mode": "reuse",
        "run_network_policy": NetworkPolicy(network_mode="no-network"),
        "evaluation_network_policy": NetworkPolicy(network_mode="public"),
    }
    run(
        [program(FakeBench(), PyHarness(), tasks(1), driver=driver, environment=env, plan_overrides=overrides)],
        tmp_path,
    )
    modes = [m for _, m in driver.policy_log]
    assert modes == ["no-network", "public"]


def test_fresh_mode_opens_a_second_session(tmp_path: Path) -> None:
    driver = FakeDriver()
    env = EnvironmentSpec(id="fake")
    seen: list[Any] = []

    async def evaluate(task: Any, result: Any, session: Any) -> Any:
        seen.append(session.id if session else None)
        return msgspec.structs.replace(result, metrics={"correct": True})

    overrides = {"evaluation_environment_mode": "fresh", "evaluation_environment": env}
    run(
        [
            program(
                FakeBench(evaluate=evaluate),
                PyHarness(),
                tasks(1),
                driver=driver,
                environment=env,
                plan_overrides=overrides,
            )
        ],
        tmp_path,
    )
    assert len(driver.opened) == 2 and driver.opened[1].labels["acx.role"] == "evaluate"
    assert seen == [driver.opened[1].session_id]
    assert driver.live_sessions() == []


def test_env_scopes_per_phase(tmp_path: Path) -> None:
    # contract V2: run vars only for agent commands, evaluation vars only for evaluation,
    # public vars everywhere; preparation sees public vars only.
    env = EnvironmentSpec(
        id="fake",
        env_variables={"PUB": "p"},
        run_env_variables={"RUNV": "${RUN_SECRET}"},
        evaluation_env_variables={"EVALV": "e"},
    )
    seen: dict[str, str] = {}

    async def prepare(task: Any, session: Any) -> None:
        res = await session.exec(["printenv"])
        seen["prepare"] = res.stdout

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        seen["run"] = (await session.exec(["printenv"])).stdout
        return RunResult(task_id=prepared.task_id, final_answer="x")

    async def evaluate(task: Any, result: Any, session: Any) -> Any:
        seen["evaluate"] = (await session.exec(["printenv"])).stdout
        return msgspec.structs.replace(result, metrics={"correct": True})

    bench = FakeBench(prepare=prepare, evaluate=evaluate)
    result = run(
        [
            program(
                bench,
                PyHarness(execute),
                tasks(1),
                environment=env,
                plan_overrides={"evaluation_environment_mode": "reuse"},
            )
        ],
        tmp_path,
        environ={"RUN_SECRET": "s3cr3t-value"},
    )
    assert "PUB=p" in seen["prepare"] and "RUNV" not in seen["prepare"] and "EVALV" not in seen["prepare"]
    assert "RUNV=s3cr3t-value" in seen["run"] and "EVALV" not in seen["run"]
    assert "EVALV=e" in seen["evaluate"] and "RUNV" not in seen["evaluate"]
    # resolved values never reach the results
    for p in run_dir(result).rglob("*"):
        if p.is_file():
            assert "s3cr3t-value" not in p.read_text(errors="replace"), p


def test_fresh_verifier_startup_env(tmp_path: Path) -> None:
    # contract V1/V3: the fresh verifier starts with evaluation_environment_env_variables when set
    # (replacing the public vars), else with the public vars; run-only vars never reach it.
    env = EnvironmentSpec(id="fake", env_variables={"PUB": "p"}, run_env_variables={"RUN": "r"})
    replaced = EnvironmentSpec(
        id="fake", env_variables={"PUB": "p"}, evaluation_environment_env_variables={"VER": "${VER_SRC}"}
    )
    for eval_env, expected in ((env, {"PUB": "p"}), (replaced, {"VER": "from-host"})):
        driver = FakeDriver()
        overrides = {"evaluation_environment_mode": "fresh", "evaluation_environment": eval_env}
        run(
            [program(FakeBench(), PyHarness(), tasks(1), driver=driver, environment=env, plan_overrides=overrides)],
            tmp_path / str(len(expected)) / eval_env.env_variables.get("PUB", "x"),
            environ={"VER_SRC": "from-host"},
        )
        assert driver.opened[0].startup_env == {"PUB": "p"}
        assert driver.opened[1].startup_env == expected


class _JournalCheckingDriver(FakeDriver):
    """Non-discoverable: the session's journal line must be on disk when open() runs."""

    seen: list[bool]

    async def open(self, request: OpenRequest) -> Session:
        journal = Path(str(request.state_dir)).parents[3] / "journal.jsonl"
        lines = [json.loads(x) for x in journal.read_text().splitlines()] if journal.exists() else []
        self.seen.append(any(e["kind"] == "session_opened" and e["id"] == request.session_id for e in lines))
        return await super().open(request)


def test_session_is_journaled_before_a_non_discoverable_driver_opens_it(tmp_path: Path) -> None:  # contract E1
    driver = _JournalCheckingDriver()
    driver.seen = []
    result = run([program(FakeBench(), PyHarness(), tasks(3), driver=driver)], tmp_path)
    assert driver.seen == [True, True, True]
    journal = [json.loads(x) for x in (run_dir(result) / "journal.jsonl").read_text().splitlines()]
    opened = {e["id"] for e in journal if e["kind"] == "session_opened"}
    closed = {e["id"] for e in journal if e["kind"] == "session_closed" and e["how"] == "released"}
    assert opened == closed and len(opened) == 3


class _ListingDriver(FakeDriver):
    """Discoverable: lists leftovers of earlier processes and closes them by id."""

    sessions_discoverable = True

    def __init__(self, leftovers: list[str]) -> None:
        super().__init__()
        self.leftovers = leftovers
        self.reaped: list[str] = []

    async def list_sessions(self, labels: Any = None) -> list[SessionRecord]:
        return [SessionRecord(id=i, provider="fake") for i in self.leftovers]

    async def close_session(self, session_id: str) -> None:
        if session_id.endswith("-gone"):
            raise DriverError(f"no sandbox {session_id}", code="session_not_found")
        self.reaped.append(session_id)


def test_resume_reaps_journaled_and_listed_leftovers_but_not_closed_or_kept_ones(tmp_path: Path) -> None:
    first = run([program(FakeBench(), PyHarness(), tasks(2), driver=FakeDriver())], tmp_path)
    d = run_dir(first)
    store = RunStore.open_existing(d)
    rid = f"{d.name}-{store.run_key}"  # this run's session ids start so
    # a killed process (pid 1 is never ours) left: one session journaled open, one closed, one kept
    store.session_opened(f"{rid}-journaled", {"provider": "fake", "pid": 1})
    store.session_opened(f"{rid}-gone", {"provider": "fake", "pid": 1})  # removed meanwhile (gc)
    store.session_opened(f"{rid}-closed", {"provider": "fake", "pid": 1})
    store.session_closed(f"{rid}-closed")
    store.session_opened(f"{rid}-kept", {"provider": "fake", "pid": 1})
    store.session_closed(f"{rid}-kept", "kept")
    store.close()
    # …and the driver lists one the journal never saw, plus the closed and kept ones, plus another
    # run's, and one of a live run that shares this run id (another request of the orchestration)
    listed = [f"{rid}-unjournaled", f"{rid}-closed", f"{rid}-kept", "other-run-x", f"{d.name}-0th3r-x"]
    driver = _ListingDriver(listed)
    run([program(FakeBench(), PyHarness(), tasks(2), driver=driver)], tmp_path, resume_dirs={"req": str(d)})
    assert sorted(driver.reaped) == sorted([f"{rid}-journaled", f"{rid}-unjournaled"])
    states = RunStore.open_existing(d).records.session_records()
    assert states[f"{rid}-journaled"]["state"] == "closed" and states[f"{rid}-kept"]["state"] == "kept"
    assert states[f"{rid}-gone"]["state"] == "closed"  # already gone counts as released, once


def test_a_drivers_own_issue_code_and_help_are_kept(tmp_path: Path) -> None:
    # e.g. docker's image_not_found with how to build the image, not a generic environment_failed.
    from acx.errors import EnvironmentSetupError

    class NoImage(FakeDriver):
        async def open(self, request: Any) -> Any:
            raise EnvironmentSetupError(
                "image 'x:1' is not present", code="image_not_found", help="build it: docker build -t x:1 ."
            )

    result = run([program(FakeBench(), PyHarness(), tasks(1), driver=NoImage())], tmp_path)
    issue = read_results(run_dir(result))["t0"][0]["issues"][0]
    assert issue["code"] == "image_not_found" and issue["severity"] == "fatal"
    assert "image 'x:1' is not present" in issue["message"] and "docker build -t x:1" in issue["message"]


def test_a_failed_artifact_transfer_blocks_evaluation(tmp_path: Path) -> None:
    # contract A6: preparation or transfer failure blocks evaluation (an `error`, not only `fatal`).
    from acx.ir import ArtifactLimits, ArtifactSpec, RunResult

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        for i in range(5):
            await session.write_text(f"/app/many/f{i}.txt", "x")
        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    bench = FakeBench()
    overrides = {
        "artifacts": [ArtifactSpec(source="/app/many")],
        "collect_artifacts": True,
        "save_artifacts": True,
        "artifact_limits": ArtifactLimits(max_files=2),
    }
    result = run([program(bench, PyHarness(execute), tasks(1), plan_overrides=overrides)], tmp_path)
    res = read_results(run_dir(result))["t0"][0]
    assert "artifact_collection_failed" in [i["code"] for i in res["issues"]]
    assert ("evaluate", "t0") not in bench.calls and res["metrics"] == {}


def test_artifact_collection_runs_under_the_run_stage_network_policy(tmp_path: Path) -> None:
    # contract A5: collection commands (and anything the agent left running) keep the run policy;
    # the baseline comes back only afterwards.
    from acx.ir import ArtifactCollectCommand, ArtifactSpec

    driver = FakeDriver()
    seen: list[str] = []

    async def execute(prepared: Any, session: Any, plan: Any) -> Any:
        await session.write_text("/app/out/a.txt", "A")
        from acx.ir import RunResult

        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    overrides = {
        "run_network_policy": NetworkPolicy(network_mode="no-network"),
        "artifacts": [ArtifactSpec(source="/app/out")],
        "artifact_collect": [ArtifactCollectCommand(command="true")],
        "collect_artifacts": True,
        "save_artifacts": True,
    }
    original = driver.open

    async def open_and_watch(request: Any) -> Any:
        session = await original(request)
        exec_ = session._exec

        async def watched(argv: list[str], **kw: Any) -> Any:
            seen.append(session.policy.network_mode)
            return await exec_(argv, **kw)

        session._exec = watched
        return session

    driver.open = open_and_watch  # type: ignore[method-assign]
    env = EnvironmentSpec(id="fake")
    run(
        [program(FakeBench(), PyHarness(execute), tasks(1), driver=driver, environment=env, plan_overrides=overrides)],
        tmp_path,
    )
    assert seen and set(seen) == {"no-network"}  # every collection command ran with the run policy
    assert [m for _, m in driver.policy_log] == ["no-network", "public"]


def test_an_open_that_cannot_remove_its_leftovers_leaves_a_release_failed_record(tmp_path: Path) -> None:
    # contract E1 (issue 11.13): every create is paired with a release or a record — a driver
    # whose failed open could not remove what it made says release_failed, and the run keeps a
    # record for --resume, exactly like a failed release.
    from acx.errors import DriverError

    class _LeakyOpen(FakeDriver):
        async def open(self, request: Any) -> Any:
            raise DriverError("network n1 could not be removed", code="release_failed")

    result = run([program(FakeBench(), PyHarness(), tasks(1), driver=_LeakyOpen())], tmp_path)
    res = read_results(run_dir(result))["t0"][0]
    assert res["issues"][0]["code"] == "release_failed" and res["issues"][0]["phase"] == "setup"
    records = list((run_dir(result) / ".env-resources").glob("*.json"))
    assert len(records) == 1 and '"release_failed"' in records[0].read_text()
