"""Installed agents on docker (issue 14 item 2): a stand-in of mini-swe-agent's shape, uploaded
as a wheel and installed offline by the ``installed_agent`` harness (its shipped
``mini-swe-agent`` definition with an offline ``install``), solves a Harbor example with the task at
``no-network`` through the run's model gateway: its calls are the result's trajectory and usage,
its trajectory file is in ``telemetry.agent_logs``. A hanging install is stopped at its own budget
(``install_timeout``) and the agent never runs. Contracts M4, P6, T3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import trio

from acx.components.harnesses._agents import AGENTS
from acx.testing.fake_models import FakeModelServer, text
from agents.wheel import INSTALL, build_wheel

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "hello-workdir"
KEY = "sk-installed-agent-secret-5531"
SOLVE = "```bash\nprintf '%s, world!\\n' \"$GREETING\" > hello.txt && cat hello.txt\n```"


def _bridge_address() -> str:
    from acx.drivers._specs import DockerConfig
    from acx.drivers.docker import DockerDriver

    address = trio.run(DockerDriver(DockerConfig()).model_gateway_address)
    assert address, "the engine's default bridge has no IPv4 gateway"
    return address


def _spec(tmp_path: Path, base_url: str, run_label: str, install: str, install_budget: float) -> Path:
    shutil.copytree(EXAMPLE, tmp_path / "tasks" / EXAMPLE.name)
    build_wheel(tmp_path / "agent" / "wheels")
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: ia
runtime: {{results_dir: results, progress: none}}
requests:
  - name: ia
    benchmark: {{id: harbor, path: tasks}}
    harness:
      id: installed_agent
      agent: mini-swe-agent
      upload: [agent/wheels]
      install: {json.dumps(install)}
      install_timeout_seconds: {install_budget}
    model: {{id: standin-model, base_url: "{base_url}", api_key: "${{MKEY}}"}}
    environment: {{id: docker}}
    output: {{run_id: "{run_label}"}}
"""
    )
    return spec


def _run(tmp_path: Path, spec: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec)],
        cwd=tmp_path,
        env={**os.environ, "MKEY": KEY},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _result(tmp_path: Path) -> dict:
    (run_dir,) = (tmp_path / "results" / "ia").iterdir()
    return json.loads(next(run_dir.rglob("attempt-1/result.json")).read_text())


def test_installed_standin_solves_harbor_task_through_gateway(tmp_path: Path, run_label: str) -> None:  # M4, P6
    host = _bridge_address()
    with FakeModelServer([text(SOLVE, usage=(40, 12)), text("Done.", usage=(60, 3))], host=host) as srv:
        spec = _spec(tmp_path, srv.base_url, run_label, INSTALL, 120)
        res = _run(tmp_path, spec)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1.000" in res.stdout, res.stdout  # the verifier found hello.txt: the agent solved it
    # Both calls went out through the gateway, with the real key and the run's model.
    assert len(srv.requests) == 2
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in srv.requests)
    assert srv.requests[0].body["model"] == "standin-model"
    assert "hello.txt" in srv.requests[0].body["messages"][0]["content"]  # the task's instruction
    assert "Hello, world!" in srv.requests[1].body["messages"][-1]["content"]  # the observation
    result = _result(tmp_path)
    assert result["status"] == "completed" and result["metrics"]["score"] == 1.0, result
    # The task's no-network became an allowlist of exactly the gateway (the agent was told so).
    assert "allowed: acx-model-gateway)" in srv.requests[0].body["messages"][0]["content"]
    steps = result["trajectory"]["steps"]
    assert [s["assistant_content"]["content"] for s in steps] == [SOLVE, "Done."]
    usage = result["telemetry"]["model_usage"]
    assert usage["model_calls"] == 2 and usage["prompt_tokens"] == 100 and usage["completion_tokens"] == 15
    # The definition's -o trajectory file came back as the agent's log.
    logs = result["telemetry"]["agent_logs"]
    traj = json.loads(logs["/logs/agent/mini.traj.json"])
    assert traj["info"]["agent"] == "standin" and traj["messages"][-1]["content"] == "Done."
    assert result["telemetry"]["install_seconds"] >= 0
    for p in (tmp_path / "results").rglob("*"):
        if p.is_file():
            assert KEY not in p.read_bytes().decode("utf-8", "replace"), p


def test_hanging_install_is_stopped_at_its_budget(tmp_path: Path, run_label: str) -> None:  # T3
    host = _bridge_address()
    with FakeModelServer([text(SOLVE)], host=host) as srv:
        spec = _spec(tmp_path, srv.base_url, run_label, "sleep 600", 3)
        started = time.monotonic()
        res = _run(tmp_path, spec)
        elapsed = time.monotonic() - started
    assert elapsed < 120, elapsed  # not the 600 s sleep, nor the 120 s compensation watchdog
    assert srv.requests == []  # the agent never ran
    result = _result(tmp_path)
    codes = {(i["severity"], i["code"]) for i in result["issues"]}
    assert ("fatal", "install_timeout") in codes, result["issues"]
    assert "budget of 3 s" in next(i["message"] for i in result["issues"] if i["code"] == "install_timeout")
    assert res.returncode != 0 or "0.000" in res.stdout or "unavailable" in res.stdout.lower(), res.stdout


def test_every_shipped_definition_runs_its_cli_through_the_gateway(tmp_path: Path, run_label: str) -> None:  # M4
    """Each definition's command line, model variables and log paths, against a stand-in CLI of its
    name (tests/agents/standin/fake_cli.py) that insists on the definition's non-interactive flags
    and speaks the real CLI's protocol: all five solve the Harbor task through the gateway."""
    from contextlib import ExitStack

    from agents.wheel import FAKE_CLIS_INSTALL

    host = _bridge_address()
    shutil.copytree(EXAMPLE, tmp_path / "tasks" / EXAMPLE.name)
    shutil.copytree(Path(__file__).resolve().parents[1] / "agents" / "standin", tmp_path / "standin")
    agents = {
        "mini-swe-agent": "mini",
        "claude-code": "claude",
        "codex": "codex",
        "aider": "aider",
        "openhands": "openhands",
    }
    with ExitStack() as stack:
        servers = {a: stack.enter_context(FakeModelServer([text(SOLVE), text("Done.")], host=host)) for a in agents}
        requests = "".join(
            f"""  - name: {cli}
    benchmark: {{id: harbor, path: tasks}}
    harness: {{id: installed_agent, agent: {a}, upload: [standin], install: {json.dumps(FAKE_CLIS_INSTALL)}}}
    model: {{id: standin-model, base_url: "{servers[a].base_url}", api_key: "${{MKEY}}"}}
"""
            for a, cli in agents.items()
        )
        spec = tmp_path / "run.yaml"
        spec.write_text(
            f"""version: 1
name: ia
runtime: {{results_dir: results, progress: none}}
defaults:
  environment: {{id: docker}}
  output: {{run_id: "{run_label}"}}
requests:
{requests}"""
        )
        res = _run(tmp_path, spec)
    assert res.returncode == 0, res.stdout + res.stderr
    for a, cli in agents.items():
        srv = servers[a]
        # Two calls each, arriving upstream as the model's own protocol (the gateway translated
        # claude's messages and codex's responses), with the real key.
        assert [r.path for r in srv.requests] == ["/v1/chat/completions"] * 2, (a, [r.path for r in srv.requests])
        assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in srv.requests), a
        (run_dir,) = (tmp_path / "results" / cli).iterdir()
        result = json.loads(next(run_dir.rglob("attempt-1/result.json")).read_text())
        assert result["metrics"]["score"] == 1.0, (a, result["issues"])
        assert len(result["trajectory"]["steps"]) == 2, a
        logs = result["telemetry"]["agent_logs"]
        # With an answer extractor the console output is a log too (it is no longer the answer).
        console = {"stdout", "stderr"} if AGENTS[a].answer is not None else set()
        # Each log path is collected: a file as itself, a directory as the files in it.
        found = {next(p for p in AGENTS[a].logs if f == p or f.startswith(p + "/")) for f in set(logs) - console}
        assert found == set(AGENTS[a].logs), (a, set(logs))
        assert "Done." in logs[AGENTS[a].logs[0]], (a, logs)  # the agent's own record of the episode
