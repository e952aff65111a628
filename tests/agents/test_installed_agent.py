"""The ``installed_agent`` harness without an engine: its install budget in the plan (shown by
``acx compile --plans`` and ``acx explain`` with provenance), located refusals of a bad config,
the shipped definitions, and the install phase's failures on the host_process driver (the
docker end-to-end runs are in tests/docker/test_installed_agent_docker.py). Issue 14 item 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from acx.cli import main
from acx.components._configs import InstalledAgentConfig
from acx.components.harnesses._agents import AGENTS
from acx.components.harnesses.installed_agent import InstalledAgentHarness, resolve_config
from acx.testing.fake_models import FakeModelServer, text

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "hello-workdir"


def _harbor_spec(write, harness: str, execution: str = "{}") -> Path:
    shutil.copytree(EXAMPLE, Path.cwd() / "tasks" / EXAMPLE.name)
    return write(
        "run.yaml",
        f"""
        version: 1
        name: ia
        requests:
          - name: ia
            benchmark: {{id: harbor, path: tasks}}
            harness: {harness}
            model: {{id: m, base_url: "http://127.0.0.1:9/v1"}}
            environment: {{id: docker}}
            execution: {execution}
        """,
    )


def test_install_budget_in_plans_and_explain(project, write, capsys) -> None:  # contracts T1, T5, R10
    _harbor_spec(
        write,
        "{id: installed_agent, agent: mini-swe-agent, install_timeout_seconds: 90}",
        "{timeout_multiplier: 2}",
    )
    assert main(["compile", "--plans", "run.yaml"]) == 0
    out = capsys.readouterr().out
    assert "budgets      install 3m · run 2m" in out, out
    assert "run allowlist[acx-model-gateway]" in out  # the task's no-network admits only the gateway
    assert main(["explain", "run.yaml", "ia", "install_timeout_seconds", "--task", "hello-workdir"]) == 0
    out = capsys.readouterr().out
    assert "install_timeout_seconds = 180.0" in out
    assert "installed_agent harness (install_timeout_seconds)" in out and "= 90.0" in out
    assert "× 2 (execution.timeout_multiplier)" in out


def test_no_install_phase_without_upload_or_install(project, write, capsys) -> None:  # contract T1
    _harbor_spec(write, '{id: installed_agent, command: "true"}')
    assert main(["compile", "--plans", "run.yaml"]) == 0
    out = capsys.readouterr().out
    assert "budgets      run 1m" in out and "install " not in out, out


@pytest.mark.parametrize(
    ("harness", "field", "words"),
    [
        ("{id: installed_agent, agent: mini-swe}", "harness.params.agent", "unknown installed agent 'mini-swe'"),
        ("{id: installed_agent, install: 'true'}", "harness.params.command", "has no run command"),
        ("{id: installed_agent, command: 'true', agent_dir: rel}", "harness.params.agent_dir", "not an absolute"),
    ],
)
def test_bad_config_is_refused_with_location(project, write, capsys, harness, field, words) -> None:  # E0433
    _harbor_spec(write, harness)
    assert main(["compile", "--plans", "run.yaml"]) == 2
    err = capsys.readouterr().err
    assert f"{field}: error[E0433]" in err and words in err, err
    assert "Traceback" not in err


def test_every_definition_resolves_and_user_fields_win() -> None:
    for name, d in AGENTS.items():
        c = resolve_config(InstalledAgentConfig(agent=name))
        assert c.install == d.install and c.command == d.command and c.logs == d.logs
        assert "$ACX_PROMPT_FILE" in d.command  # each reads the task from the prompt file
    c = resolve_config(InstalledAgentConfig(agent="aider", install="true", logs=["/tmp/x.log"]))
    assert c.install == "true" and c.logs == ["/tmp/x.log"] and c.command == AGENTS["aider"].command
    assert c.model_env_aliases == {"OPENAI_API_BASE": "OPENAI_BASE_URL"}


def test_aliases_export_gateway_values_under_the_agents_names() -> None:
    from acx.components._context import HarnessContext
    from acx.ir import EnvironmentSpec, ExecutionPlan, PreparedTask

    h = InstalledAgentHarness(InstalledAgentConfig(agent="openhands"))
    ctx = HarnessContext(
        session=None,
        prepared=PreparedTask(task_id="t"),
        request=cast(Any, None),
        plan=ExecutionPlan(task_id="t", attempt=1, environment=EnvironmentSpec(id="docker")),
    )
    env = h.agent_env(ctx, {"OPENAI_BASE_URL": "http://gw/v1", "OPENAI_API_KEY": "tok", "ACX_MODEL_ID": "m"})
    assert env["LLM_BASE_URL"] == "http://gw/v1" and env["LLM_API_KEY"] == "tok"
    assert env["ACX_AGENT_DIR"] == "/installed-agent" and env["ACX_TASK_ID"] == "t"


def _host_spec(tmp_path: Path, base_url: str, harness: dict) -> Path:
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "say 0", "answer": "0"}) + "\n")
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: h
runtime: {{results_dir: results, progress: none}}
requests:
  - name: h
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {{id: m, base_url: "{base_url}"}}
    environment: {{id: host_process}}
"""
    )
    return spec


def _attempt(tmp_path: Path) -> dict:
    return json.loads(next((tmp_path / "results").rglob("attempt-1/result.json")).read_text())


def _run(spec: Path, monkeypatch) -> int:
    monkeypatch.chdir(spec.parent)
    return main(["run", str(spec)])


def test_failing_install_stops_the_attempt(tmp_path: Path, monkeypatch, capsys) -> None:
    with FakeModelServer([text("0")]) as srv:
        harness = {
            "id": "installed_agent",
            "agent_dir": str(tmp_path / "agent-dir"),
            "install": "echo broken >&2; exit 3",
            "command": "python3 -c 'print(0)'",
        }
        _run(_host_spec(tmp_path, srv.base_url, harness), monkeypatch)
    capsys.readouterr()
    issues = _attempt(tmp_path)["issues"]
    assert [(i["severity"], i["code"]) for i in issues] == [("fatal", "install_failed")]
    assert "exited with 3" in issues[0]["message"] and "broken" in issues[0]["message"]
    assert srv.requests == []


def test_missing_upload_is_a_located_install_failure(tmp_path: Path, monkeypatch, capsys) -> None:
    with FakeModelServer([text("0")]) as srv:
        harness = {
            "id": "installed_agent",
            "agent_dir": str(tmp_path / "agent-dir"),
            "upload": ["nowhere/agent.whl"],
            "command": "true",
        }
        _run(_host_spec(tmp_path, srv.base_url, harness), monkeypatch)
    capsys.readouterr()
    issues = _attempt(tmp_path)["issues"]
    assert issues[0]["code"] == "install_failed" and "'nowhere/agent.whl'" in issues[0]["message"]
    assert str(tmp_path / "nowhere" / "agent.whl") in issues[0]["message"]


def test_upload_install_and_run_on_host(tmp_path: Path, monkeypatch, capsys) -> None:
    """The spec-relative upload lands in agent_dir, install runs there, the agent then runs with
    ACX_AGENT_DIR and the gateway; its log file comes back in telemetry.agent_logs."""
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "agent.py").write_text(
        "import json, os, urllib.request\n"
        "b, k = os.environ['OPENAI_BASE_URL'], os.environ['OPENAI_API_KEY']\n"
        "body = json.dumps({'model': 'x', 'messages': [{'role': 'user', 'content': 'q'}]}).encode()\n"
        "r = urllib.request.Request(b + '/chat/completions', data=body, headers={'Authorization': 'Bearer ' + k,"
        " 'Content-Type': 'application/json'})\n"
        "a = json.loads(urllib.request.urlopen(r).read())['choices'][0]['message']['content']\n"
        "open(os.environ['ACX_AGENT_DIR'] + '/agent.log', 'w').write('answered ' + a + ' with ' + k)\n"
        "print(a)\n"
    )
    agent_dir = tmp_path / "agent-dir"
    with FakeModelServer([text("0", usage=(7, 1))]) as srv:
        harness = {
            "id": "installed_agent",
            "agent_dir": str(agent_dir),
            "upload": ["bundle"],
            "install": "cp bundle/agent.py installed.py && env > install.env",
            "command": 'python3 "$ACX_AGENT_DIR/installed.py"',
            "logs": [str(agent_dir / "agent.log")],
        }
        _run(_host_spec(tmp_path, srv.base_url, harness), monkeypatch)
    out = capsys.readouterr().out
    assert "correct.avg@1 = 1.000" in out, out
    result = _attempt(tmp_path)
    # The token the agent logged is replaced (it is dead by now, but a credential all the same).
    assert result["telemetry"]["agent_logs"] == {str(agent_dir / "agent.log"): "answered 0 with [acx-gateway-token]"}
    progress = next((tmp_path / "results").rglob("progress.jsonl")).read_text().splitlines()
    phases = [e["phase"] for e in map(json.loads, progress) if e["event"] == "phase_changed"]
    assert phases[phases.index("start_harness") :][:3] == ["start_harness", "install_agent", "run_harness"]
    installed = [e for e in map(json.loads, progress) if e["event"] == "harness_event"]
    assert installed and installed[0]["payload"]["event"] == "agent_installed" and installed[0]["payload"]["ok"]
    # The install ran in agent_dir with ACX_AGENT_DIR and without any model variable.
    install_env = (agent_dir / "install.env").read_text()
    assert f"ACX_AGENT_DIR={agent_dir}" in install_env
    assert not any(n in install_env for n in ("OPENAI_", "ANTHROPIC_", "ACX_MODEL_")), install_env
    assert result["telemetry"]["model_usage"]["model_calls"] == 1
    assert result["trajectory"]["steps"][0]["assistant_content"]["content"] == "0"


class HangingInstallHarness(InstalledAgentHarness):
    """An install phase that never returns and ignores its deadline (a harness bug)."""

    id = "hanging_install"

    async def install_agent(self, ctx):  # type: ignore[no-untyped-def]
        import trio

        await trio.sleep(3600)
        return []


def test_interpreter_watchdog_stops_an_overrunning_install(tmp_path: Path, monkeypatch, capsys) -> None:  # T3
    with FakeModelServer([text("0")]) as srv:
        harness = {
            "id": "agents.test_installed_agent:HangingInstallHarness",
            "agent_dir": str(tmp_path / "agent-dir"),
            "install": "true",
            "install_timeout_seconds": 0.5,
            "command": "true",
        }
        spec = _host_spec(tmp_path, srv.base_url, harness)
        spec.write_text(spec.read_text() + "    execution: {run_timer_compensation_seconds: 0.5}\n")
        _run(spec, monkeypatch)
    capsys.readouterr()
    issues = _attempt(tmp_path)["issues"]
    assert [(i["severity"], i["code"]) for i in issues] == [("fatal", "install_timeout")], issues
    assert "watchdog of 1 s (budget 0.5 s + compensation)" in issues[0]["message"]
    assert srv.requests == []
