"""``acx compile SPEC --plans`` / ``-o`` and ``acx explain … --task`` end to end (P9, T3, V1)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import acx.ir as ir
from acx.cli import main

SPEC = """
version: 1
name: plans
requests:
  - name: qa
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: "cat"}}
    environment:
      id: host_process
      env_variables: {{TOKEN: "${{API_TOKEN}}", PLAIN: "literal-secret-value"}}
    execution: {{run_timeout_seconds: 100, timeout_multiplier: 2, attempts: {{k: {k}}}}}
"""


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"{i}?", "answer": str(i)}) + "\n" for i in range(3))
    )
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(SPEC.format(k=2)))
    return path


def test_text_plan(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:  # contract T3
    assert main(["compile", str(spec), "--plans"]) == 0
    out = capsys.readouterr().out
    assert "request 'qa': exact_match × command on host_process — 3 of 3 task(s) × 2 attempt(s) = 6 plan(s)" in out
    assert "+ q0" in out and "+ q2" in out
    # the budget tree: T = 100 × 2, watchdog T + 120 (never scaled), collect 60 s; the evaluation
    # budget is the exact_match recipe's default (1m), scaled like every default (contract T2)
    assert "run 200s (watchdog 320s) · collect 1m · evaluation 2m" in out
    assert "attempts     2 (identical plans)" in out
    assert "network" not in out  # all public: at defaults, hidden
    assert "literal-secret-value" not in out and "${API_TOKEN}" in out
    assert main(["compile", str(spec), "--plans", "--full", "--tasks", "q1"]) == 0
    full = capsys.readouterr().out
    assert "network      baseline public · run public · evaluation public" in full
    assert "+ q0" not in full and "+ q1" in full


def test_json_plan_shape(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:  # contract P9
    assert main(["compile", str(spec), "--plans", "--format", "json", "--tasks", "q0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format_version"] == 1
    (req,) = data["requests"]
    assert req["name"] == "qa"
    (t,) = req["tasks"]
    assert t["task_id"] == "q0" and t["load_warnings"] == []
    plan = t["attempts"]["1"]
    for key in (
        "environment",
        "evaluation_environment",
        "evaluation_environment_mode",
        "run_network_policy",
        "evaluation_network_policy",
        "applied_recipes",
        "run_timeout_seconds",
        "evaluation_timeout_seconds",
        "run_timer_compensation_seconds",
        "runresult_collect_timeout_seconds",
        "artifact_collect_timeout_seconds",
        "artifact_limits",
        "artifacts",
        "artifact_collect",
        "collect_artifacts",
        "save_artifacts",
    ):
        assert key in plan, key
    assert plan["run_timeout_seconds"] == 200.0
    assert plan["environment"]["env_variables"] == {"TOKEN": "${API_TOKEN}", "PLAIN": "********"}
    assert plan["required_env"] == ["API_TOKEN"]
    assert t["attempts"]["2"]["attempt"] == 2


def test_output_program_roundtrip(spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "build" / "plan.json"
    assert main(["compile", str(spec), "-o", str(out)]) == 0
    program = ir.decode_program(out.read_bytes())
    assert program.content_hash.startswith("sha256:")
    req = program.request("qa")
    assert [t.task_id for t in req.tasks] == ["q0", "q1", "q2"]
    assert req.plan("q1", 2).attempt == 2
    assert req.plan("q1", 1).run_timeout_seconds == 200.0
    assert req.provenance["q1"]["run_timeout_seconds"][-1].layer == "planner"  # × multiplier
    assert [p for p in tmp_path.joinpath("build").iterdir()] == [out]  # no temp file left behind
    tampered = out.read_bytes().replace(b'"run_timeout_seconds":200.0', b'"run_timeout_seconds":999.0')
    with pytest.raises(ir.ProgramError, match="content hash mismatch"):
        ir.decode_program(tampered)


def test_explain_plan_field(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(spec), "qa", "run_timeout_seconds", "--task", "q1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("qa / q1 / attempt 1: run_timeout_seconds = 200.0")
    assert "spec.yaml:" in out  # the request's own provenance, with file:line
    assert "× 2" in out
    assert main(["explain", str(spec), "qa", "environment.env_variables", "--task", "q1", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["value"] == {"TOKEN": "${API_TOKEN}", "PLAIN": "********"}
    assert "literal-secret-value" not in json.dumps(data)


def test_explain_errors(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(spec), "qa", "run_timout_seconds", "--task", "q1"]) == 2
    assert "did you mean 'run_timeout_seconds'" in capsys.readouterr().err
    assert main(["explain", str(spec), "qa", "run_timeout_seconds", "--task", "q7"]) == 2
    assert "no selected task 'q7'" in capsys.readouterr().err


def test_bad_dataset_is_a_clean_error(spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data.jsonl").write_text('{"id": "a", "question": "q", "answer": 1}\n{broken\n')
    assert main(["compile", str(spec), "--plans"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'data.jsonl'}:2:1: error[E0402]" in err
    assert "Traceback" not in err


def test_harbor_on_host_process_refused(
    tmp_path: Path, harbor_task, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:  # contract P7
    monkeypatch.chdir(tmp_path)
    harbor_task("hello", "[agent]\ntimeout_sec = 10\n", root=tmp_path / "tasks")
    spec = _harbor_spec(tmp_path, "host_process")
    assert main(["compile", str(spec), "--plans"]) == 2
    err = capsys.readouterr().err
    assert "E0457" in err and "--env docker" in err and "hello" in err


def test_load_warnings_only_for_selected_tasks(
    tmp_path: Path, harbor_task, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:  # contract H6
    monkeypatch.chdir(tmp_path)
    harbor_task("noisy", "[agent]\ntimeout_sec = 10\nbogus = 'agent'\n", root=tmp_path / "tasks")
    harbor_task("quiet", "[agent]\ntimeout_sec = 10\n", root=tmp_path / "tasks")
    spec = _harbor_spec(tmp_path, "docker")
    assert main(["compile", str(spec), "--plans"]) == 0
    out = capsys.readouterr().out
    assert "warning: " in out and "`agent.bogus` is not mapped" in out and "task.toml:3:" in out
    assert main(["compile", str(spec), "--plans", "--tasks", "quiet"]) == 0
    assert "warning" not in capsys.readouterr().out
    assert main(["compile", str(spec), "--plans", "--format", "json", "--tasks", "noisy"]) == 0
    (t,) = json.loads(capsys.readouterr().out)["requests"][0]["tasks"]
    assert len(t["load_warnings"]) == 1


def test_full_json_adds_redacted_provenance(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:  # P9
    assert main(["compile", str(spec), "--plans", "--format", "json", "--tasks", "q0"]) == 0
    assert "provenance" not in json.loads(capsys.readouterr().out)["requests"][0]["tasks"][0]
    assert main(["compile", str(spec), "--plans", "--format", "json", "--full", "--tasks", "q0"]) == 0
    raw = capsys.readouterr().out
    (t,) = json.loads(raw)["requests"][0]["tasks"]
    assert t["provenance"]["run_timeout_seconds"][-1]["layer"] == "planner"
    assert t["provenance"]["environment.env_variables"][-1]["value"]["PLAIN"] == "********"
    assert "literal-secret-value" not in raw


def test_text_plan_of_a_fresh_verifier_and_artifact_conflicts(
    tmp_path: Path, harbor_task, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:  # contracts H2, A1, T4
    monkeypatch.chdir(tmp_path)
    harbor_task(
        "fresh",
        """
        artifacts = [{ source = "/app/a", destination = "out" }, { source = "/app/b", destination = "out" }]
        [verifier.environment]
        docker_image = "grader:1"
        cpus = 2
        env = { GRADER = "${GRADER_KEY}" }
        [environment]
        storage_mb = 10240
        """,
        root=tmp_path / "tasks",
    )
    spec = _harbor_spec(tmp_path, "docker")
    assert main(["compile", str(spec), "--plans"]) == 0
    out = capsys.readouterr().out
    assert "evaluation   fresh (verifier: image grader:1 · cpu 2.0 · env GRADER)" in out
    assert "artifacts    /logs/artifacts, /app/a · saved" in out
    assert "warning: task 'fresh': artifact '/app/b' → 'out' ignored" in out
    # docker passes storage_mb to the engine (issue 11.17): no plan-time warning, kept in the plan
    assert "storage_mb = 10240 is ignored" not in out
    assert main(["compile", str(spec), "--plans", "--full"]) == 0
    full = capsys.readouterr().out
    assert "limits 16384 MiB, 100000 files" in full and "artifacts 10m (commands none)" in full


def test_tasks_glob_names_the_selected_count(tmp_path: Path, spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec.write_text(spec.read_text().replace("dataset: data.jsonl", "dataset: data.jsonl, sample_ids: [q0]"))
    assert main(["compile", str(spec), "--plans", "--tasks", "q1"]) == 2
    assert "matches none of the 1 selected of 3 tasks" in capsys.readouterr().err


def _harbor_spec(tmp_path: Path, env: str) -> Path:
    """A one-request spec over the Harbor task dirs in ``tmp_path/tasks``."""
    spec = tmp_path / "h.yaml"
    spec.write_text(
        "version: 1\nname: h\nrequests:\n  - name: h\n    benchmark: {id: harbor, path: tasks}\n"
        f"    harness: {{id: oracle}}\n    environment: {{id: {env}}}\n"
    )
    return spec


def test_explain_chains_show_recipes_and_the_model_endpoint(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # contracts RC2, T2, P6
    assert main(["explain", str(spec), "qa", "evaluation_timeout_seconds", "--task", "q0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("qa / q0 / attempt 1: evaluation_timeout_seconds = 120.0")
    assert "recipe:exact_match_default_budgets" in out and "exact_match.acx:" in out
    assert "recipe default × 2 (execution.timeout_multiplier)" in out
    model = tmp_path / "m.yaml"
    model.write_text(
        "version: 1\nrequests:\n  - name: m\n    model: {id: gpt, base_url: 'http://llm.internal:8080/v1'}\n"
        "    benchmark: {id: exact_match, dataset: data.jsonl}\n    harness: {id: openai_chat}\n"
        "    environment: {id: docker, run_network_policy: no-network}\n"
    )
    assert main(["explain", str(model), "m", "run_network_policy", "--task", "q0"]) == 0
    out = capsys.readouterr().out
    # openai_chat calls the model from the host: the sandbox policy is not widened (P6)
    assert '"network_mode": "no-network"' in out.splitlines()[0] and "llm.internal" not in out
    agent = tmp_path / "a.yaml"
    agent.write_text(
        "version: 1\nrequests:\n  - name: a\n    model: {id: gpt, base_url: 'http://llm.internal:8080/v1'}\n"
        "    benchmark: {id: exact_match, dataset: data.jsonl}\n    harness: {id: command, command: agent}\n"
        "    environment: {id: docker, run_network_policy: no-network}\n"
    )
    assert main(["explain", str(agent), "a", "run_network_policy", "--task", "q0"]) == 0
    out = capsys.readouterr().out
    assert '"network_mode": "allowlist", "allowed_hosts": ["acx-model-gateway"]' in out.splitlines()[0]
    assert "model gateway (the agent in the sandbox calls the model through it)" in out and "llm.internal" not in out
