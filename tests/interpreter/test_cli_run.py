"""`acx run` end to end on host_process, as a subprocess: quickstart, bad input, reliability.

Reliability (issue 5): SIGINT mid-run → cancelled, no live session, exit 130; SIGKILL mid-run then
``--resume`` → every task exactly once; a command that ignores SIGTERM is gone after its deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver
from acx.interpreter._store import RunStore

REPO = Path(__file__).resolve().parents[2]


def acx(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spawn(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def write_spec(
    tmp: Path, *, n: int, command: str, run_timeout: float = 60, concurrency: int = 2, extra_env: str = ""
) -> Path:
    data = tmp / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 0?", "answer": str(i)}) + "\n" for i in range(n))
    )
    spec = tmp / "spec.yaml"
    spec.write_text(
        f"""version: 1
name: t
task_concurrency: {concurrency}
runtime: {{results_dir: results, progress: plain, cleanup_grace_seconds: 10}}
requests:
  - name: r
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: {json.dumps(command)}}}
    environment: {{id: host_process, evaluation_environment_mode: none{extra_env}}}
    execution: {{run_timeout_seconds: {run_timeout}}}
"""
    )
    return spec


def _run_dir(tmp: Path) -> Path:
    dirs = sorted((tmp / "results" / "r").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_quickstart_runs_offline_and_results_show(tmp_path: Path) -> None:
    run_dirs = []
    for spec in ("quickstart.acx", "quickstart.yaml"):
        out = tmp_path / spec
        res = acx("run", str(REPO / "examples" / spec), "--results-dir", str(out), "--progress", "none", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert "quickstart: completed" in res.stdout and "correct.avg@1 = 0.900" in res.stdout
        run_dirs.append(next((out / "quickstart").iterdir()))
    shown = acx("results", "show", str(run_dirs[0]), cwd=tmp_path)
    assert shown.returncode == 0 and "| division | 2 | 50.0% |" in shown.stdout
    js = json.loads(acx("results", "show", str(run_dirs[1]), "--format", "json", cwd=tmp_path).stdout)
    assert js["status"] == "completed" and js["tasks"]["normal"] == 10


def test_run_from_compiled_plan(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    res = acx("compile", str(REPO / "examples" / "quickstart.acx"), "-o", str(plan), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = acx("run", str(plan), "--results-dir", str(tmp_path / "res"), "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    # a tampered plan is refused before anything runs
    text = plan.read_text().replace('"run_timeout_seconds":30.0', '"run_timeout_seconds":31.0')
    plan.write_text(text)
    res = acx("run", str(plan), "--results-dir", str(tmp_path / "res2"), cwd=tmp_path)
    assert res.returncode == 2 and "content hash mismatch" in res.stderr and not (tmp_path / "res2").exists()


def test_missing_env_var_exits_2_before_anything_runs(tmp_path: Path) -> None:
    # contract V1: names only, exit 2, no results directory.
    spec = write_spec(
        tmp_path, n=1, command="echo 0", extra_env=", run_env_variables: {TOKEN: '${ACX_TEST_SECRET_TOKEN}'}"
    )
    env = {k: v for k, v in os.environ.items() if k != "ACX_TEST_SECRET_TOKEN"}
    res = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stderr
    assert "ACX_TEST_SECRET_TOKEN" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()


def test_bad_input_no_traceback(tmp_path: Path) -> None:
    res = acx("run", "--resume", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "E0603" in res.stderr and "Traceback" not in res.stderr
    res = acx("run", cwd=tmp_path)
    assert res.returncode == 2 and "needs SPEC" in res.stderr


def test_sigterm_ignoring_command_is_gone_after_its_deadline(tmp_path: Path) -> None:
    # contract T3: the timed-out agent and its children are killed in the sandbox.
    pids = tmp_path / "pids"
    spec = write_spec(
        tmp_path,
        n=1,
        run_timeout=1,
        command=f"trap '' TERM; sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait",
    )
    res = acx("run", str(spec), "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    listed = [int(p) for p in pids.read_text().split()]
    assert len(listed) == 2 and not any(_alive(p) for p in listed)
    result = json.loads(next((_run_dir(tmp_path) / "details").glob("*/*/attempt-1/result.json")).read_text())
    assert "harness_timeout" in [i["code"] for i in result["issues"]]


def _wait_for(pred, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_sigint_cancels_cleanly(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    spec = write_spec(tmp_path, n=4, command=f"echo $$ >> {pids}; sleep 120")
    proc = spawn("run", str(spec), cwd=tmp_path)
    _wait_for(lambda: pids.exists() and len(pids.read_text().split()) >= 2)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 10
    d = _run_dir(tmp_path)
    assert json.loads((d / "run_info.json").read_text())["status"] == "cancelled"
    assert list((d / ".env-resources").iterdir()) == []  # no live session
    assert not any(_alive(int(p)) for p in pids.read_text().split())
    assert "cancelling" in err


@pytest.mark.slow
def test_sigkill_then_resume_runs_every_task_exactly_once(tmp_path: Path) -> None:
    # SIGKILL mid-run, then --resume: every task exactly once, finished attempts never redone,
    # and the agents the killed run left behind are reaped.
    log, pids, flag = tmp_path / "agent.log", tmp_path / "pids", tmp_path / "slow"
    flag.touch()
    command = (
        "python3 -c 'import sys; print(sys.stdin.read().split()[2])'; "
        f"echo $ACX_TASK_ID >> {log}; "
        f"case $ACX_TASK_ID in q6|q7) echo $$ >> {pids}; [ -e {flag} ] && sleep 300;; esac; sleep 0.2"
    )
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    spec = write_spec(tmp_path, n=8, concurrency=2, command=command, extra_env=f", workdir_root: {sessions}")
    proc = spawn("run", str(spec), cwd=tmp_path)
    _wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, timeout=60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    d = _run_dir(tmp_path)
    done_before = {json.loads(p.read_text())["task_id"] for p in d.glob("details/normal/*/task.json")}
    # q6 and q7 start once q4 and q5 free their slots; a task's final commit (its group-commit
    # round) may still be pending then, so q4/q5 may or may not have been reported done
    assert {f"q{i}" for i in range(4)} <= done_before <= {f"q{i}" for i in range(6)}
    orphans = [int(p) for p in pids.read_text().split()]
    assert all(_alive(p) for p in orphans)  # the killed run could not clean up
    # the two sessions the killed run left are found by the driver under this run's id
    driver = HostProcessDriver(HostProcessConfig(workdir_root=str(sessions)))
    assert len(trio.run(driver.list_sessions, {"acx.run_id": d.name})) == 2
    flag.unlink()
    res = acx("run", "--resume", str(d), "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    finals = [json.loads(p.read_text())["task_id"] for p in d.glob("details/*/*/task.json")]
    assert sorted(finals) == [f"q{i}" for i in range(8)]  # every task exactly once
    assert list(d.glob("details/running/*")) == []
    ran = log.read_text().split()
    for task_id in done_before:
        assert ran.count(task_id) == 1, f"{task_id} was run again after resume"
    assert not any(_alive(p) for p in orphans)  # reaped on resume
    assert list((d / ".env-resources").iterdir()) == []
    assert RunStore.open_existing(d).records.live_session_records() == []  # reaped: closed in the journal
    assert trio.run(driver.list_sessions) == []
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["counts"]["tasks"] == 8 and metrics["metrics"]["correct.avg@1"] == 1.0


def test_reuse_and_json_report(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, n=3, command="python3 -c 'import sys; print(sys.stdin.read().split()[2])'")
    first = acx("run", str(spec), "--progress", "none", "--run-id", "first", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = acx("run", str(spec), "--progress", "none", "--reuse", "first", "--format", "json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["status"] == "completed" and report["requests"][0]["counts"]["tasks"] == 3
    new_dir = Path(report["requests"][0]["run_dir"])
    assert new_dir.name != "first"
    info = json.loads((new_dir / "run_info.json").read_text())
    assert info["reused_from"]["run_id"] == "first"
    events = [json.loads(line) for line in (new_dir / "progress.jsonl").read_text().splitlines()]
    assert [e["payload"]["tasks"] for e in events if e["event"] == "reuse_loaded"] == [3]
    assert not [e for e in events if e["event"] == "attempt_started"]  # nothing ran again
    again = acx("run", str(spec), "--run-id", "first", cwd=tmp_path)
    assert again.returncode == 2 and "E0601" in again.stderr


def test_openai_chat_end_to_end_against_loopback(tmp_path: Path) -> None:
    # The API key is a ${VAR} reference resolved only inside the call: never in results or logs.
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(self.headers.get("Authorization"))
            question = body["messages"][-1]["content"]
            data = json.dumps({"choices": [{"message": {"content": question.split()[2]}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "data.jsonl").write_text(
            "".join(
                json.dumps({"id": f"q{i}", "question": f"What is {i} + 0?", "answer": str(i)}) + "\n" for i in range(3)
            )
        )
        spec = tmp_path / "chat.yaml"
        spec.write_text(
            f"""version: 1
name: chat
runtime: {{results_dir: results, progress: none}}
requests:
  - name: chat
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: openai_chat, max_tokens: 16}}
    model: {{id: fake-model, base_url: "http://127.0.0.1:{server.server_port}/v1", api_key: "${{ACX_LOOP_KEY}}"}}
    environment: {{id: host_process}}
"""
        )
        res = acx("run", str(spec), cwd=tmp_path, env={"ACX_LOOP_KEY": "sk-e2e-secret-value"})
    finally:
        server.shutdown()
    assert res.returncode == 0, res.stderr + res.stdout
    assert "correct.avg@1 = 1.000" in res.stdout
    assert seen == ["Bearer sk-e2e-secret-value"] * 3
    for p in (tmp_path / "results").rglob("*"):
        if p.is_file():
            assert "sk-e2e-secret-value" not in p.read_text(errors="replace"), p
    info = json.loads(next((tmp_path / "results" / "chat").glob("*/run_info.json")).read_text())
    assert info["request"]["model"]["api_key"] == "${ACX_LOOP_KEY}"
