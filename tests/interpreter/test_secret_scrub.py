"""Issue 11 item 4: every resolved secret value is scrubbed wherever it appears, as a substring,
in everything acx writes or prints — not only as the whole resolved string.
# contract V1
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from interp_helpers import FakeBench, PyHarness, program, run, run_dir, tasks

from acx.ir import AttemptsSpec, EnvironmentSpec, ExecutionSpec, RunResult

TOKEN = "tok-9f8e7d6c5b4a"
URL_PW = "pw-0a1b2c3d"


def test_a_secret_embedded_in_a_larger_value_never_reaches_any_output(tmp_path: Path) -> None:
    # `Authorization: "Bearer ${TOKEN}"`: the agent prints the bare token (answer, extra, a log
    # record, an exception message); nothing acx writes or prints may hold it.
    log = logging.getLogger("acx.test.agent")

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        log.warning("agent printed %s", TOKEN, extra={"request": "req"})
        if plan.attempt == 1:
            raise RuntimeError(f"the agent crashed holding {TOKEN} and {URL_PW}")
        return RunResult(task_id=prepared.task_id, final_answer=f"my token is {TOKEN}", extra={"t": [TOKEN]})

    env = EnvironmentSpec(
        id="fake",
        run_env_variables={"AUTH": "Bearer ${TOKEN}", "DB": "postgres://u:${DB_PW}@db/x", "MODE": "plain"},
    )
    ex = ExecutionSpec(attempts=AttemptsSpec(k=2))
    events: list[Any] = []
    result = run(
        [program(FakeBench(), PyHarness(execute), tasks(2), environment=env, execution=ex)],
        tmp_path,
        environ={"TOKEN": TOKEN, "DB_PW": URL_PW},
        events=events,
    )
    d = run_dir(result)
    files = [p for p in d.rglob("*") if p.is_file()]
    assert any(p.name == "run.log" for p in files) and any(p.name == "journal.jsonl" for p in files)
    for p in files:
        text = p.read_text(errors="replace")
        assert TOKEN not in text and URL_PW not in text, p
    printed = repr([e.to_json() for e in events])
    assert TOKEN not in printed and URL_PW not in printed
    answers = "".join(p.read_text() for p in d.rglob("result.json"))
    assert "my token is ********" in answers
    # contract A9: evaluation checkpoints hold the answer too, scrubbed like result.json
    checkpoints = "".join(p.read_text() for p in d.rglob("checkpoint.json"))
    assert "my token is ********" in checkpoints


def test_cli_run_never_prints_or_writes_a_secret_embedded_in_a_larger_value(tmp_path: Path) -> None:
    # End to end on host_process: the agent reads AUTH="Bearer ${TOKEN}" and the URL of DB, prints
    # the bare token and password on stdout and stderr, and answers with them; nothing acx writes
    # (results, logs, journal, progress, summary) or prints (stdout, stderr) may hold them.
    import os
    import shutil
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "examples", tmp_path / "ex")
    agent = tmp_path / "ex" / "agents" / "leaky.py"
    agent.write_text(
        "import os, sys\n"
        "tok = os.environ['AUTH'].split()[-1]\n"
        "pw = os.environ['DB'].split(':')[2].split('@')[0]\n"
        "print('token', tok, 'pw', pw)\n"
        "print('stderr token', tok, file=sys.stderr)\n"
        "sys.exit(3 if 'q1' in sys.stdin.read() else 0)\n"
    )
    spec = tmp_path / "ex" / "leaky.yaml"
    spec.write_text(
        (tmp_path / "ex" / "quickstart.yaml")
        .read_text()
        .replace('"$ACX_SPEC_DIR/agents/arith_agent.py"', '"$ACX_SPEC_DIR/agents/leaky.py"')
        .replace(
            "environment: {id: host_process, evaluation_environment_mode: none}",
            "environment:\n        id: host_process\n        evaluation_environment_mode: none\n"
            '        run_env_variables: {AUTH: "Bearer ${TOKEN}", DB: "postgres://u:${DB_PW}@db/x"}',
        )
    )
    env = {**os.environ, "TOKEN": TOKEN, "DB_PW": URL_PW}
    res = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", "r", "--progress", "plain"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "quickstart:" in res.stdout, res.stderr
    assert TOKEN not in res.stdout + res.stderr and URL_PW not in res.stdout + res.stderr
    files = [p for p in (tmp_path / "r").rglob("*") if p.is_file()]
    assert any(p.name == "result.json" for p in files)
    leaked = [p for p in files if TOKEN in p.read_text(errors="replace") or URL_PW in p.read_text(errors="replace")]
    assert leaked == []
    assert "token ******** pw ********" in "".join(p.read_text() for p in files if p.name == "result.json")


def test_harness_events_are_scrubbed_with_the_whole_event(tmp_path: Path) -> None:
    # contract V1: a harness's progress event (ctx.emit) holding a secret reaches progress.jsonl
    # and the console masked; events without one are written as they are.
    class Emitting(PyHarness):
        async def execute_task(self, ctx: Any) -> RunResult:
            ctx.emit("note", {"printed": f"x {TOKEN} y", "plain": "nothing here"})
            ctx.emit("clean", {"n": 1})
            return RunResult(task_id=ctx.prepared.task_id, final_answer="A")

    env = EnvironmentSpec(id="fake", run_env_variables={"AUTH": "Bearer ${TOKEN}"})
    events: list[Any] = []
    result = run(
        [program(FakeBench(), Emitting(), tasks(1), environment=env)], tmp_path, environ={"TOKEN": TOKEN}, events=events
    )
    log = (run_dir(result) / "progress.jsonl").read_text()
    assert TOKEN not in log and TOKEN not in repr([e.to_json() for e in events])
    notes = [e for e in events if e.event == "harness_event" and e.payload.get("event") == "note"]
    assert notes and notes[0].payload["printed"] == "x ******** y" and notes[0].payload["plain"] == "nothing here"
    assert any(e.event == "harness_event" and e.payload == {"event": "clean", "n": 1} for e in events)


def test_an_event_that_does_not_encode_is_walked_not_refused() -> None:
    # contract V1: the one-search check of an event falls back to the full walk when the event does
    # not encode as it is (a lone surrogate from undecodable output); a clean event is not walked.
    from acx.interpreter._events import ProgressEvent
    from acx.interpreter._orchestrator import _may_hold_secret
    from acx.secrets import Scrubber

    scrub = Scrubber()
    scrub.add_secret([TOKEN])

    def event(payload: dict[str, Any]) -> ProgressEvent:
        return ProgressEvent(run_id="r", event="harness_event", timestamp=1.0, payload=payload)

    assert not _may_hold_secret(scrub, event({"printed": "nothing here"}))
    assert _may_hold_secret(scrub, event({"printed": f"x {TOKEN}"}))
    assert _may_hold_secret(scrub, event({"printed": "\ud800"}))
    assert scrub.tree(event({"printed": f"\ud800 {TOKEN}"}).to_json())["payload"]["printed"] == "\ud800 ********"
