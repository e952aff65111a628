"""Run-time halves of the built-in components on the fake driver (B1, S1, S2, V2, V4)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from acx.components import HarnessContext
from acx.components._configs import (
    CommandHarnessConfig,
    ExactMatchConfig,
    HarborConfig,
)
from acx.components.benchmarks._exact_match_runtime import normalize_answer
from acx.components.benchmarks._harbor_runtime import RewardError, parse_reward
from acx.components.benchmarks.exact_match import ExactMatchBenchmark
from acx.components.benchmarks.harbor import HarborBenchmark
from acx.components.harnesses.command import CommandHarness
from acx.components.harnesses.openai_chat import OpenAIChatConfig, OpenAIChatHarness
from acx.components.harnesses.oracle import OracleHarness, OracleHarnessConfig
from acx.drivers._base import OpenRequest
from acx.drivers.fake import FakeDriver, FakeProcess
from acx.ir import (
    BenchmarkSpec,
    EnvironmentSpec,
    ExecutionPlan,
    HarnessPlan,
    HarnessSpec,
    ModelSpec,
    NetworkPolicy,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskSpec,
)

REQ = RunRequest(
    model=ModelSpec(id="m"),
    benchmark=BenchmarkSpec(id="exact_match"),
    harness=HarnessSpec(id="command"),
    environment=EnvironmentSpec(id="fake"),
)


def _hc(state: Any, session: Any, prepared: PreparedTask, req: Any, plan: Any) -> HarnessContext:
    """The harness context the interpreter would build (no deadline)."""
    return HarnessContext(session=session, prepared=prepared, request=req, plan=plan, state=state)


def _plan(**kw: Any) -> ExecutionPlan:
    return ExecutionPlan(task_id="t", attempt=1, environment=EnvironmentSpec(id="fake"), **kw)


async def _session(driver: FakeDriver | None = None) -> Any:
    return await (driver or FakeDriver()).open(OpenRequest(session_id="s"))


# ---- exact_match -----------------------------------------------------------------------------


@given(st.text(max_size=30))
def test_normalisation_is_idempotent(text: str) -> None:
    opts = {"case_sensitive": False, "normalize_whitespace": True, "strip_punctuation": True}
    once = normalize_answer(text, **opts)
    assert normalize_answer(once, **opts) == once


def test_exact_match_options(tmp_path: Path) -> None:
    def bench(**kw: Any) -> ExactMatchBenchmark:
        return ExactMatchBenchmark(ExactMatchConfig(dataset="x.jsonl", **kw))

    assert bench().is_correct("  PARIS ", "Paris")
    assert not bench(case_sensitive=True).is_correct("paris", "Paris")
    assert not bench().is_correct("Paris.", "Paris")
    assert bench(strip_punctuation=True).is_correct("Paris.", "Paris")
    assert bench().is_correct("a  b", "a b") and not bench(normalize_whitespace=False).is_correct("a  b", "a b")
    assert bench().is_correct("42", 42) and bench().is_correct("b", ["a", "b"])


def test_exact_match_prepare_hides_the_answer_and_evaluates() -> None:
    # contract B1: the agent never sees the reference answer.
    b = ExactMatchBenchmark(ExactMatchConfig(dataset="x", system_prompt="be brief"))
    task = TaskSpec(task_id="t", question="2+2?", ground_truth="4", category="math")
    plan = _plan(run_network_policy=NetworkPolicy(network_mode="no-network"))

    async def go() -> tuple[PreparedTask, RunResult, RunResult]:
        prepared = await b.prepare_task(task, None, REQ, plan)
        good = await b.evaluate(task, prepared, RunResult(task_id="t", final_answer=" 4 "), REQ, plan)
        empty = await b.evaluate(task, prepared, RunResult(task_id="t"), REQ, plan)
        return prepared, good, empty

    prepared, good, empty = trio.run(go)
    assert prepared.ground_truth is None and "4" not in prepared.input.prompt.replace("2+2", "")
    assert prepared.input.system_prompt == "be brief"
    assert "Network Restriction Statement" in prepared.input.prompt
    assert good.metrics == {"correct": True} and good.ground_truth == "4"
    assert empty.metrics == {"correct": False} and empty.issues[0].code == "output_missing"
    assert empty.issues[0].severity == "warning"


# ---- command harness ---------------------------------------------------------------------------


def test_command_harness_prompt_stdin_file_env_and_answer() -> None:
    # V2: the command sees the run scope's vars; ACX_DEADLINE_SECONDS tells it its budget.
    seen: dict[str, Any] = {}

    async def agent(proc: FakeProcess, args: list[str]) -> int:
        seen["stdin"] = proc.stdin.decode()
        seen["file"] = proc.session.files.get(proc.session.abspath("prompt.txt", proc.cwd), b"").decode()
        seen["env"] = dict(proc.env)
        seen["args"] = args
        proc.write_out("  the answer \n")
        return 0

    driver = FakeDriver(programs={"agent": agent})
    h = CommandHarness(CommandHarnessConfig(command=["agent", "--flag"]))
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="what?"))

    async def go() -> RunResult:
        s = await _session(driver)
        with s.env_scope({"RUN_ONLY": "r"}):
            return await h.execute_task(_hc(None, s, prepared, REQ, _plan(run_timeout_seconds=30)))

    res = trio.run(go)
    assert res.final_answer == "the answer" and res.issues == []
    assert seen["stdin"] == "what?" and seen["file"] == "what?" and seen["args"] == ["--flag"]
    assert seen["env"]["RUN_ONLY"] == "r" and seen["env"]["ACX_DEADLINE_SECONDS"] == "30"
    assert seen["env"]["ACX_TASK_ID"] == "t"


def test_command_harness_answer_file_timeout_and_exit_code() -> None:
    async def writer(proc: FakeProcess, args: list[str]) -> int:
        await proc.session.write_text(proc.session.abspath("out/answer.txt", proc.cwd), "42\n")
        return 3

    async def hang(proc: FakeProcess, args: list[str]) -> int:
        await trio.sleep(1000)
        return 0

    driver = FakeDriver(programs={"writer": writer, "hang": hang})
    prepared = PreparedTask(task_id="t", input=TaskInput(prompt="p"))

    async def go() -> tuple[RunResult, RunResult, RunResult]:
        s = await _session(driver)
        a = await CommandHarness(CommandHarnessConfig(command=["writer"], answer_file="out/answer.txt")).execute_task(
            _hc(None, s, prepared, REQ, _plan())
        )
        b = await CommandHarness(CommandHarnessConfig(command=["hang"])).execute_task(
            _hc(None, s, prepared, REQ, _plan(run_timeout_seconds=5))
        )
        c = await CommandHarness(CommandHarnessConfig(command=["writer"], answer_file="missing.txt")).execute_task(
            _hc(None, s, prepared, REQ, _plan())
        )
        return a, b, c

    a, b, c = trio.run(go, clock=trio.testing.MockClock(autojump_threshold=0))
    assert a.final_answer == "42" and [i.code for i in a.issues] == ["agent_exit_nonzero"]
    assert b.telemetry["timed_out"] and [i.code for i in b.issues] == ["harness_timeout"]
    assert c.final_answer is None and "output_missing" in [i.code for i in c.issues]


def test_command_harness_gets_the_gateway_never_the_key(monkeypatch: pytest.MonkeyPatch) -> None:  # contract M4
    from acx.models import Endpoint, Gateway, Role, use_session

    monkeypatch.setenv("TEST_MODEL_KEY", "sk-test-123456")
    seen: dict[str, str] = {}

    async def agent(proc: FakeProcess, args: list[str]) -> int:
        seen.update(proc.env)
        return 0

    req = msgspec.structs.replace(
        REQ, model=ModelSpec(id="m", base_url="http://llm.invalid/v1", api_key="${TEST_MODEL_KEY}")
    )
    driver = FakeDriver(programs={"agent": agent})

    async def go() -> None:
        gw = Gateway(
            {"agent": Role("agent", Endpoint(base_url="http://llm.invalid/v1", model="m", api_key="sk-test-123456"))}
        )
        async with trio.open_nursery() as n:
            await gw.start(n)
            s = await _session(driver)
            models = gw.open_session("t")
            with use_session(models):
                await CommandHarness(CommandHarnessConfig(command=["agent"])).execute_task(
                    _hc(None, s, PreparedTask(task_id="t"), req, _plan())
                )
            await gw.aclose()

    trio.run(go)
    assert "sk-test-123456" not in "".join(seen.values())
    assert seen["OPENAI_API_KEY"].startswith("acx-gw-") and seen["ACX_MODEL_API_KEY"] == seen["OPENAI_API_KEY"]
    assert seen["OPENAI_BASE_URL"].startswith("http://127.0.0.1:") and "llm.invalid" not in seen["OPENAI_BASE_URL"]
    assert req.model.api_key == "${TEST_MODEL_KEY}"  # the request keeps the reference (V4)


# ---- harbor ------------------------------------------------------------------------------------


def test_parse_reward_precedence_and_errors() -> None:
    assert parse_reward('{"reward": 0.5, "tests": 2}', "1") == {"reward": 0.5, "tests": 2.0}
    assert parse_reward(None, " 1 \n") == {"reward": 1.0}
    assert parse_reward(None, "0") == {"reward": 0.0}  # a valid 0 is a score, not an error
    for js, txt, code in (
        (None, None, "reward_missing"),
        ("", None, "verifier_result_invalid"),
        ("{}", None, "verifier_result_invalid"),
        ('{"reward": "x"}', None, "verifier_result_invalid"),
        (None, "nan", "verifier_result_invalid"),
        (None, "abc", "verifier_result_invalid"),
    ):
        with pytest.raises(RewardError) as info:
            parse_reward(js, txt)
        assert info.value.code == code


def _harbor_task(tmp_path: Path, test_sh: str) -> TaskSpec:
    tests = tmp_path / "task" / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text(test_sh)
    sol = tmp_path / "task" / "solution"
    sol.mkdir()
    (sol / "solve.sh").write_text("echo solved > /app/out.txt\n")
    return TaskSpec(
        task_id="h",
        question="do it",
        metadata={"tests_dir": str(tests), "task_dir": str(tmp_path / "task"), "solution_dir": str(sol)},
    )


def _harbor_eval(tmp_path: Path, verifier: Any, plant: str | None = None) -> RunResult:
    async def bash(proc: FakeProcess, args: list[str]) -> int:
        if args[:1] == ["-c"] and "/tests/test.sh" in args[1]:
            return await verifier(proc)
        from acx.drivers.fake import _run_script

        return await _run_script(proc, args[1] if args[:1] == ["-c"] else "true")

    driver = FakeDriver(programs={"bash": bash})
    bench = HarborBenchmark(HarborConfig(path="."))
    task = _harbor_task(tmp_path, "#!/bin/bash\n")
    plan = _plan(evaluation_timeout_seconds=60)

    async def go() -> RunResult:
        s = await _session(driver)
        prepared = await bench.prepare_task(task, s, REQ, plan)
        assert await s.is_dir("/logs/verifier") and not await s.is_dir("/tests")  # tests only for evaluation
        if plant is not None:
            await s.write_text("/logs/verifier/reward.json", plant)  # the agent plants a reward
        return await bench.evaluate(task, prepared, RunResult(task_id="h"), REQ, plan, s)

    return trio.run(go)


def test_harbor_reward_from_verifier(tmp_path: Path) -> None:
    async def verifier(proc: FakeProcess) -> int:
        assert await proc.session.is_file("/tests/test.sh")
        await proc.session.write_text("/logs/verifier/reward.txt", "1\n")
        return 1  # Harbor ignores the test script's exit code

    res = _harbor_eval(tmp_path, verifier)
    assert res.metrics == {"score": 1.0, "correct": True} and res.issues == []


def test_harbor_planted_reward_is_wiped(tmp_path: Path) -> None:
    # An agent that writes /logs/verifier/reward.json itself does not get that reward.
    async def verifier(proc: FakeProcess) -> int:
        await proc.session.write_text("/logs/verifier/reward.txt", "0")
        return 0

    res = _harbor_eval(tmp_path, verifier, plant='{"reward": 1.0}')
    assert res.metrics == {"score": 0.0, "correct": False}


def test_harbor_no_reward_is_an_error_not_zero(tmp_path: Path) -> None:
    async def verifier(proc: FakeProcess) -> int:
        return 0

    res = _harbor_eval(tmp_path, verifier, plant='{"reward": 1.0}')
    assert res.metrics == {} and [i.code for i in res.issues] == ["reward_missing"]
    assert res.issues[0].phase == "evaluate" and res.issues[0].severity == "error"


def test_oracle_runs_solution(tmp_path: Path) -> None:
    ran: list[list[str]] = []

    async def bash(proc: FakeProcess, args: list[str]) -> int:
        ran.append(args)
        return 0

    driver = FakeDriver(programs={"bash": bash})
    task = _harbor_task(tmp_path, "")
    prepared = PreparedTask(task_id="h", metadata={"task_dir": task.metadata["task_dir"]})

    async def go() -> RunResult:
        s = await _session(driver)
        res = await OracleHarness(OracleHarnessConfig()).execute_task(_hc(None, s, prepared, REQ, _plan()))
        assert await s.is_file("/solution/solve.sh")
        return res

    res = trio.run(go)
    assert ran == [["/solution/solve.sh"]] and res.issues == []


# ---- openai_chat against a loopback server ----------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if body["model"] == "broken":
            self.send_response(503)
            self.end_headers()
            return
        payload = {
            "choices": [{"message": {"content": "Paris"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_openai_chat_against_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("LOOP_KEY", "sk-loop-abcdef")
        base = f"http://127.0.0.1:{server.server_port}/v1"
        h = OpenAIChatHarness(OpenAIChatConfig(system_prompt="sys", max_tokens=8))
        prepared = PreparedTask(task_id="t", input=TaskInput(prompt="capital of France?"))

        async def go(model_id: str) -> RunResult:
            req = msgspec.structs.replace(
                REQ,
                model=ModelSpec(id=model_id, base_url=base, api_key="${LOOP_KEY}", params={"temperature": 0.0}),
            )
            return await h.execute_task(_hc(None, None, prepared, req, _plan(harness_plan=HarnessPlan())))

        ok = trio.run(go, "gpt-test")
        bad = trio.run(go, "broken")
    finally:
        server.shutdown()
    assert ok.final_answer == "Paris" and ok.telemetry["usage"]["completion_tokens"] == 1
    first = _Handler.seen[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-loop-abcdef"
    assert first["body"]["messages"][0] == {"role": "system", "content": "sys"} and first["body"]["max_tokens"] == 8
    assert bad.final_answer is None and bad.issues[0].code == "model_failed" and "503" in bad.issues[0].message
    assert "sk-loop" not in bad.issues[0].message
