"""The orchestrator: global limiter, provider limits, open rate, deadlines, cancellation (R13, V1)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from interp_helpers import FakeBench, PyHarness, orchestration, program, read_results, run, run_dir, tasks

from acx.drivers.fake import FakeDriver
from acx.interpreter import run_orchestration
from acx.interpreter._envvars import MissingEnvError, resolve_map, resolve_value
from acx.ir import EnvironmentSpec, RunResult


def _probe(seconds: float = 1.0) -> tuple[PyHarness, dict[str, int]]:
    state = {"now": 0, "max": 0, "calls": 0}

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        state["now"] += 1
        state["calls"] += 1
        state["max"] = max(state["max"], state["now"])
        await trio.sleep(seconds)
        state["now"] -= 1
        return RunResult(task_id=prepared.task_id, final_answer=prepared.input.prompt.upper())

    return PyHarness(execute), state


def test_global_task_concurrency_limit(tmp_path: Path) -> None:
    harness, state = _probe()
    p1 = program(FakeBench(), harness, tasks(10), name="a", index=0)
    p2 = program(FakeBench(), harness, tasks(10), name="b", index=1)
    result = run([p1, p2], tmp_path, task_concurrency=3)
    assert state["max"] == 3 and state["calls"] == 20
    assert [o.name for o in result.requests] == ["a", "b"]  # contract R13: declaration order
    assert result.status == "completed"


def test_requests_dispatch_in_declaration_order(tmp_path: Path) -> None:
    events: list[Any] = []
    harness, _ = _probe(0.5)
    p1 = program(FakeBench(), harness, tasks(3), name="first", index=0)
    p2 = program(FakeBench(), harness, tasks(3), name="second", index=1)
    run([p1, p2], tmp_path, events=events, task_concurrency=2)
    started = [e.request_name for e in events if e.event == "task_started"]
    assert started == ["first"] * 3 + ["second"] * 3


def test_provider_limit(tmp_path: Path) -> None:
    harness, state = _probe()
    result = run([program(FakeBench(), harness, tasks(6))], tmp_path, task_concurrency=6, provider_limits={"fake": 2})
    assert state["max"] == 2 and result.status == "completed"


def test_env_open_rate(tmp_path: Path) -> None:
    opened: list[float] = []
    driver = FakeDriver()
    orig = driver.open

    async def open_(req: Any) -> Any:
        opened.append(trio.current_time())
        return await orig(req)

    driver.open = open_  # type: ignore[method-assign]
    run([program(FakeBench(), PyHarness(), tasks(4), driver=driver)], tmp_path, env_open_qps={"fake": 2.0})
    gaps = [b - a for a, b in itertools.pairwise(opened)]
    assert len(opened) == 4 and all(g >= 0.5 - 1e-9 for g in gaps)


def test_overall_timeout_gives_timed_out_and_releases(tmp_path: Path) -> None:
    driver = FakeDriver()
    harness, _ = _probe(1000)
    result = run([program(FakeBench(), harness, tasks(3), driver=driver)], tmp_path, timeout_seconds=10)
    assert result.status == "timed_out" and result.exit_code == 1
    assert driver.live_sessions() == []
    d = run_dir(result)
    assert json.loads((d / "run_info.json").read_text())["status"] == "timed_out"
    assert not list((d / ".env-resources").iterdir())
    assert read_results(d) == {}  # unfinished attempts leave no result (resume redoes them)


def test_cancellation_gives_cancelled_and_releases(tmp_path: Path) -> None:
    driver = FakeDriver()
    harness, _ = _probe(1000)
    progs = [program(FakeBench(), harness, tasks(3), driver=driver)]
    orch = orchestration(progs, tmp_path)

    async def main() -> Any:
        holder: dict[str, trio.CancelScope] = {}
        async with trio.open_nursery() as n:

            async def cancel_soon() -> None:
                await trio.sleep(5)
                holder["scope"].cancel()

            n.start_soon(cancel_soon)
            return await run_orchestration(
                orch,
                progs,
                environ={},
                io_threads=False,
                cancel_scope_ready=lambda s: holder.__setitem__("scope", s),
            )

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.status == "cancelled" and result.exit_code == 130
    assert driver.live_sessions() == [] and len(driver.closed) == 3


def test_missing_env_vars_refused_before_any_environment_opens(tmp_path: Path) -> None:
    # contract V1: names only, before allocation.
    driver = FakeDriver()
    env = EnvironmentSpec(
        id="fake", env_variables={"A": "${NEEDED_ONE}", "B": "x-${NEEDED_TWO}-y", "C": "${OPTIONAL:-dflt}"}
    )
    with pytest.raises(MissingEnvError) as info:
        run(
            [program(FakeBench(), PyHarness(), tasks(2), driver=driver, environment=env)],
            tmp_path,
            environ={"NEEDED_ONE": ""},
        )
    assert info.value.names == ["NEEDED_ONE", "NEEDED_TWO"]
    assert info.value.code == "E0310"
    assert driver.opened == [] and not (tmp_path / "results").exists()


def test_env_reference_forms() -> None:
    # contract V1: ${X}, ${X:-default}, embedded references; no shell expansion.
    environ = {"X": "1", "EMPTY": ""}
    assert resolve_value("${X}", environ) == "1"
    assert resolve_value("a${X}b${X}", environ) == "a1b1"
    assert resolve_value("${NOPE:-d}", environ) == "d"
    assert resolve_value("${EMPTY:-d}", environ) == "d"
    assert resolve_value("$X `echo hi` $(id)", environ) == "$X `echo hi` $(id)"
    with pytest.raises(MissingEnvError):
        resolve_map({"k": "${NOPE}"}, environ)


def test_partial_failure_status(tmp_path: Path) -> None:
    async def boom(prepared: Any, session: Any, plan: Any) -> RunResult:
        raise RuntimeError("crash")

    ok = program(FakeBench(), PyHarness(), tasks(1), name="ok", index=0)
    bad = program(FakeBench(), PyHarness(boom), tasks(1), name="bad", index=1)
    result = run([ok, bad], tmp_path)
    assert result.status == "partial_failure" and [o.status for o in result.requests] == [
        "completed",
        "failed",
    ]


def test_progress_files(tmp_path: Path) -> None:
    result = run([program(FakeBench(), PyHarness(), tasks(3))], tmp_path)
    d = run_dir(result)
    events = [json.loads(line)["event"] for line in (d / "progress.jsonl").read_text().splitlines()]
    for name in (
        "run_started",
        "tasks_loaded",
        "task_started",
        "attempt_started",
        "execution_plan_resolved",
        "phase_changed",
        "attempt_finished",
        "partial_saved",
        "task_finished",
        "summary_started",
        "run_finished",
    ):
        assert name in events, name
    snap = json.loads((d / "progress.json").read_text())
    assert snap["status"] == "completed" and snap["finished"] == 3 and snap["total"] == 3
    info = json.loads((d / "run_info.json").read_text())
    assert info["schema_version"] == "acx.run_info.v1" and info["status"] == "completed"
    audit = info["resolved_execution_plans"]["t0"]["attempts"]["1"]  # contract P9
    assert audit["environment"]["id"] == "fake" and "applied_recipes" in audit
    assert audit["evaluation_environment_mode"] == "none"


def test_console_views(tmp_path: Path) -> None:
    # Progress goes through one reporter interface: plain lines, and a rich live view.
    import io

    from acx.interpreter._events import ConsoleReporter, make_console

    plain = io.StringIO()
    result = run([program(FakeBench(), PyHarness(), tasks(2))], tmp_path / "p", events=None)  # baseline: no console
    assert result.status == "completed"
    reporter = make_console("plain", stream=plain)
    with reporter:
        run([program(FakeBench(), PyHarness(), tasks(2))], tmp_path / "a", events=_Sink(reporter))
    text = plain.getvalue()
    assert "[req] 2 task(s)" in text and "✓ t0" in text and "finished: completed" in text
    rich_out = io.StringIO()
    live = ConsoleReporter("rich", stream=rich_out)
    with live:
        run([program(FakeBench(), PyHarness(), tasks(2))], tmp_path / "b", events=_Sink(live))
    assert "acx run" in rich_out.getvalue() and "completed" in rich_out.getvalue()
    assert make_console("auto", stream=io.StringIO()).mode == "plain"  # not a TTY


class _Sink(list):  # type: ignore[type-arg]
    """An events list that also forwards to a console reporter."""

    def __init__(self, reporter: Any) -> None:
        super().__init__()
        self.reporter = reporter

    def append(self, e: Any) -> None:
        super().append(e)
        self.reporter.emit(e)
