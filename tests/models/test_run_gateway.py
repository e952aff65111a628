"""`acx run` with models: every call goes through the run's gateway — host-side (openai_chat) and
an in-sandbox `command` agent calling $OPENAI_BASE_URL — with transcripts, ACTF trajectories,
usage/cost in result.json, metrics.json and summary.md, limits, the run cost limit, and the real
key in no file of the results directory. Contracts M4, M5, M6, P6."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acx.testing.fake_models import FakeModelServer, reflected, text

KEY = "sk-run-gateway-secret-0042"

AGENT = r"""
import json, os, sys, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
prompt = sys.stdin.read()
answer = ""
for turn in range(int(os.environ.get("TURNS", "1"))):
    body = json.dumps({"model": "ignored", "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(base + "/chat/completions", data=body,
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.loads(r.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as e:
        print("refused:", e.read().decode(), file=sys.stderr)
        break
print(answer)
"""


def acx(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def write_spec(
    tmp_path: Path, harness: str, model: str, *, execution: str = "", n: int = 2, env: str = "host_process"
) -> Path:
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"say {i}", "answer": str(i)}) + "\n" for i in range(n))
    )
    (tmp_path / "agent.py").write_text(AGENT)
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: m
task_concurrency: 1
runtime: {{results_dir: results, progress: none}}
requests:
  - name: m
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {harness}
    model: {model}
    environment: {{id: {env}}}
{execution}"""
    )
    return spec


def files_of(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def assert_key_nowhere(root: Path) -> None:
    for p in files_of(root):
        assert KEY not in p.read_bytes().decode("utf-8", "replace"), p


def test_openai_chat_through_the_gateway(tmp_path: Path) -> None:  # contracts M4, M6
    with FakeModelServer([text("0", usage=(20, 1)), text("1", usage=(30, 2, 10))]) as srv:
        price = "{input_per_mtok: 1.0, output_per_mtok: 4.0}"
        model = f'{{id: m1, base_url: "{srv.base_url}", api_key: "${{MKEY}}", price: {price}}}'
        spec = write_spec(tmp_path, "{id: openai_chat}", model)
        res = acx("run", str(spec), cwd=tmp_path, env={"MKEY": KEY})
    assert res.returncode == 0, res.stderr + res.stdout
    assert [r.headers["authorization"] for r in srv.requests] == [f"Bearer {KEY}"] * 2
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    results = sorted(run_dir.rglob("attempt-1/result.json"))
    assert len(results) == 2
    r0 = json.loads(results[0].read_text())
    traj = r0["trajectory"]
    assert traj["schema_version"] == "ACTF_v1.0" and traj["steps"][0]["user_content"] == "say 0"
    assert traj["steps"][0]["assistant_content"]["content"] == "0"
    assert r0["telemetry"]["model_usage"]["prompt_tokens"] == 20
    calls = json.loads((results[0].parent / "model_calls.json").read_text())["calls"]
    assert calls[0]["request"]["messages"][-1]["content"] == "say 0" and calls[0]["via"] == "in-process"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    usage = metrics["model_usage"]["run"]
    assert (usage["model_calls"], usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"]) == (
        2,
        50,
        3,
        10,
    )
    assert usage["cost_usd"] == pytest.approx((50 * 1.0 + 3 * 4.0) / 1e6)
    assert "## Model usage" in (run_dir / "summary.md").read_text()
    assert_key_nowhere(tmp_path / "results")


def test_unknown_price_is_unknown_in_metrics(tmp_path: Path) -> None:  # contract M5
    with FakeModelServer() as srv:
        spec = write_spec(tmp_path, "{id: openai_chat}", f'{{id: m1, base_url: "{srv.base_url}"}}', n=1)
        res = acx("run", str(spec), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    assert json.loads((run_dir / "metrics.json").read_text())["model_usage"]["run"]["cost_usd"] is None
    assert "unknown" in (run_dir / "summary.md").read_text()


def test_command_agent_in_sandbox_calls_through_the_gateway(tmp_path: Path) -> None:  # contracts M4, M6
    with FakeModelServer([text("0"), text("1")]) as srv:
        model = f'{{id: real-model, base_url: "{srv.base_url}", api_key: "${{MKEY}}"}}'
        spec = write_spec(tmp_path, '{id: command, command: "python3 $ACX_SPEC_DIR/agent.py"}', model)
        res = acx("run", str(spec), cwd=tmp_path, env={"MKEY": KEY})
    assert res.returncode == 0, res.stderr + res.stdout
    assert "correct.avg@1 = 1.000" in res.stdout
    assert all(r.headers["authorization"] == f"Bearer {KEY}" and r.body["model"] == "real-model" for r in srv.requests)
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    r0 = json.loads(sorted(run_dir.rglob("attempt-1/result.json"))[0].read_text())
    assert r0["trajectory"]["steps"][0]["assistant_content"]["content"] == "0"
    assert r0["telemetry"]["model_usage"]["model_calls"] == 1
    calls = json.loads((sorted(run_dir.rglob("attempt-1/model_calls.json"))[0]).read_text())["calls"]
    assert calls[0]["via"] == "http"
    assert_key_nowhere(tmp_path / "results")


def test_task_limit_refuses_and_records_limit_exceeded(tmp_path: Path) -> None:  # contract M5
    with FakeModelServer() as srv:
        model = f'{{id: m, base_url: "{srv.base_url}", limits: {{max_model_calls: 2}}}}'
        spec = write_spec(tmp_path, '{id: command, command: "TURNS=5 python3 $ACX_SPEC_DIR/agent.py"}', model, n=1)
        res = acx("run", str(spec), cwd=tmp_path)
    assert len(srv.requests) == 2  # the third call was refused by the gateway
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    r0 = json.loads(sorted(run_dir.rglob("attempt-1/result.json"))[0].read_text())
    codes = [i["code"] for i in r0["issues"]]
    assert "limit_exceeded" in codes, (codes, res.stderr)
    assert any("max_model_calls = 2 reached" in i["message"] for i in r0["issues"])


def test_run_cost_limit_stops_the_run_cleanly(tmp_path: Path) -> None:  # contract M5
    with FakeModelServer() as srv:
        model = f'{{id: m, base_url: "{srv.base_url}", price: {{input_per_mtok: 1000000, output_per_mtok: 0}}}}'
        spec = write_spec(tmp_path, "{id: openai_chat}", model, n=4, execution="    execution: {max_cost_usd: 15}\n")
        res = acx("run", str(spec), cwd=tmp_path)
    # 10 prompt tokens at $1/token: the second call reaches $20 >= $15; no task is dispatched after
    assert res.returncode != 0
    assert len(srv.requests) == 2
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    info = json.loads((run_dir / "run_info.json").read_text())
    assert info["status"] == "failed" and "max_cost_usd = 15 reached" in (info.get("error") or "")
    assert "task(s) not run" in (run_dir / "summary.md").read_text()


def test_unusable_model_refused_before_the_run(tmp_path: Path) -> None:  # contract M4 (located refusal)
    spec = write_spec(
        tmp_path,
        "{id: openai_chat}",
        '{id: m, base_url: "http://127.0.0.1:9/v1", roles: {grader: {id: g, api_protocol: [grpc]}}}',
        n=1,
    )
    res = acx("run", str(spec), cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "model.roles.grader" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()


def test_explain_shows_where_model_limits_came_from(tmp_path: Path) -> None:  # contract M7 (roles, provenance)
    spec = write_spec(
        tmp_path,
        "{id: openai_chat}",
        '{id: m, base_url: "http://127.0.0.1:9/v1", limits: {max_model_calls: 7}, roles: {grader: {id: g}}}',
        n=1,
    )
    res = acx("explain", str(spec), "m", "model.limits.max_model_calls", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "= 7" in res.stdout.splitlines()[0] and "run.yaml:" in res.stdout
    res = acx("explain", str(spec), "m", "model.roles.grader.id", cwd=tmp_path)
    assert res.returncode == 0 and "g" in res.stdout.splitlines()[0], res.stdout + res.stderr


def test_role_fields_validated_with_locations(tmp_path: Path) -> None:  # contract M7
    spec = write_spec(
        tmp_path,
        "{id: openai_chat}",
        '{id: m, base_url: "http://127.0.0.1:9/v1", roles: {grader: {id: g, api_protcol: anthropic}}}',
        n=1,
    )
    res = acx("validate", str(spec), cwd=tmp_path)
    assert res.returncode == 2 and "E0203" in res.stderr and "model.roles.grader" in res.stderr
    assert "did you mean `api_protocol`" in res.stderr and "run.yaml:" in res.stderr


def test_token_budget_without_usage_is_a_warning(tmp_path: Path) -> None:  # contract M5 (§7.7.5)
    with FakeModelServer([text("0", usage=None)]) as srv:
        model = f'{{id: m, base_url: "{srv.base_url}", limits: {{max_tokens_total: 100}}}}'
        spec = write_spec(tmp_path, "{id: openai_chat}", model, n=1)
        res = acx("run", str(spec), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    r0 = json.loads(next(run_dir.rglob("attempt-1/result.json")).read_text())
    warn = [i for i in r0["issues"] if i["code"] == "usage_unavailable"]
    assert warn and warn[0]["severity"] == "warning" and r0["status"] == "completed"
    assert r0["telemetry"]["model_usage"]["calls_without_usage"] == 1


def test_wrap_api_key_in_a_run(tmp_path: Path) -> None:  # contract M1 (model.wrap_api_key, issue 11.16)
    import base64

    with FakeModelServer() as srv:
        model = f'{{id: m, base_url: "{srv.base_url}", api_key: "${{MKEY}}", wrap_api_key: true}}'
        spec = write_spec(tmp_path, "{id: openai_chat}", model, n=1)
        res = acx("run", str(spec), cwd=tmp_path, env={"MKEY": KEY})
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    sent = base64.b64decode(srv.requests[0].headers["authorization"].removeprefix("Bearer ")).decode()
    assert sent == f"<api_secret>{KEY}</api_secret><session_id>{run_dir.resolve()}</session_id>"
    assert_key_nowhere(tmp_path / "results")


def test_grader_only_role_with_a_command_harness(tmp_path: Path) -> None:  # contracts M4, M7 (issue 24 item 5)
    """Only `model.roles.grader` (grading through the gateway) and a `command` harness that calls no
    model: every attempt runs and is graded; the agent gets no gateway token (it has no model)."""
    (tmp_path / "qa.jsonl").write_text('{"id": "q1", "input": "Capital of France?", "target": "Paris"}\n')
    (tmp_path / "env.py").write_text("import os, sys\nprint('Paris')\nprint(sorted(os.environ), file=sys.stderr)\n")
    with FakeModelServer([text("GRADE: C", usage=(40, 2))], default=None) as grader:
        (tmp_path / "run.yaml").write_text(
            f"""version: 1
name: g
runtime: {{results_dir: results, progress: none}}
requests:
  - name: g
    benchmark: {{id: dataset, path: qa.jsonl, scorers: [model_graded]}}
    harness: {{id: command, command: "python3 $ACX_SPEC_DIR/env.py"}}
    environment: {{id: host_process}}
    model:
      roles:
        grader: {{id: judge-m, base_url: "{grader.base_url}", api_key: "${{MKEY}}"}}
"""
        )
        res = acx("run", "run.yaml", cwd=tmp_path, env={"MKEY": KEY})
    assert res.returncode == 0, res.stdout + res.stderr
    assert [r.body["model"] for r in grader.requests] == ["judge-m"]
    (run_dir,) = (tmp_path / "results" / "g").iterdir()
    r0 = json.loads(next(run_dir.rglob("attempt-1/result.json")).read_text())
    assert r0["status"] == "completed" and r0["metrics"] == {"correct": True}, r0["issues"]
    assert not [i for i in r0["issues"] if i["severity"] in ("error", "fatal")]
    assert "KeyError" not in json.dumps(r0)
    assert_key_nowhere(tmp_path / "results")


def test_an_upstream_that_reflects_the_key_hands_the_agent_nothing(tmp_path: Path) -> None:
    # contract M4 (issue 24 item 2): a live run whose upstream echoes the Authorization header
    # into its 200 answer, written a few bytes at a time: the agent prints what it got, and neither
    # its answer nor any file of the run holds the key; the attempt says what happened
    with FakeModelServer([reflected("{auth}", chunk_size=4), reflected("x {auth} y")]) as srv:
        model = f'{{id: real-model, base_url: "{srv.base_url}", api_key: "${{MKEY}}"}}'
        spec = write_spec(tmp_path, '{id: command, command: "python3 $ACX_SPEC_DIR/agent.py"}', model)
        res = acx("run", str(spec), cwd=tmp_path, env={"MKEY": KEY})
    assert res.returncode == 0, res.stderr + res.stdout
    assert KEY not in res.stdout + res.stderr
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    results = [json.loads(p.read_text()) for p in sorted(run_dir.rglob("attempt-1/result.json"))]
    assert [r["final_answer"].strip() for r in results] == ["***", "x *** y"]
    assert all("secret_in_answer" in {i["code"] for i in r["issues"]} for r in results)
    assert_key_nowhere(tmp_path / "results")
