"""Issue 11 item 5: a saved plan (`acx compile -o plan.json`) holds references, never resolved
secret values, and is written owner-only; so is result.json.
# contract V1
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "hunter2-9b8c7d"


def _acx(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _spec(tmp_path: Path, extra_env: str = "") -> Path:
    shutil.copytree(REPO / "examples", tmp_path / "ex")
    agent = tmp_path / "ex" / "agents" / "url.py"
    agent.write_text(
        "import os, sys\nsys.stdin.read()\nurl = os.environ['ACX_MODEL_BASE_URL']\n"
        "print(url, url.split(':')[2].split('@')[0])\n"
    )
    spec = tmp_path / "ex" / "url.yaml"
    text = (
        (tmp_path / "ex" / "quickstart.yaml")
        .read_text()
        .replace('"$ACX_SPEC_DIR/agents/arith_agent.py"', '"$ACX_SPEC_DIR/agents/url.py"')
        .replace("    execution:", '    model: {id: m, base_url: "${MODEL_URL}"}\n    execution:')
    )
    if extra_env:
        text = text.replace(
            "environment: {id: host_process, evaluation_environment_mode: none}",
            "environment:\n        id: host_process\n        evaluation_environment_mode: none\n"
            f"        run_env_variables: {extra_env}",
        )
    spec.write_text(text)
    return spec


def test_a_url_password_from_an_ordinary_variable_stays_a_reference_in_plan_json(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    env = {"MODEL_URL": f"http://user:{PASSWORD}@127.0.0.1:9/v1"}
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    os.chmod(plan, 0o644)  # an existing world-readable file is replaced by an owner-only one
    res = _acx("compile", str(spec), "-o", str(plan), cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    text = plan.read_text()
    assert PASSWORD not in text and "${MODEL_URL}" in text
    assert stat.S_IMODE(plan.stat().st_mode) == 0o600
    # Resolved at run time, credentials in a model URL are refused before the run starts (the
    # client would not send them as the key), with the field's path and never the password.
    run = _acx("run", str(plan), "--results-dir", "r", "--progress", "none", cwd=tmp_path, env=env)
    assert run.returncode == 2, run.stderr
    assert "E0471" in run.stderr and "model.base_url" in run.stderr and "api_key" in run.stderr
    assert PASSWORD not in run.stdout + run.stderr
    for p in (tmp_path / "r").rglob("*"):
        if p.is_file():
            assert PASSWORD not in p.read_text(errors="replace"), p


def test_a_literal_password_in_a_model_url_is_a_located_compile_error(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    spec.write_text(spec.read_text().replace('"${MODEL_URL}"', f'"https://u:{PASSWORD}@api.example.com/v1"'))
    res = _acx("compile", str(spec), "-o", "plan.json", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "E0471" in res.stderr and "model.base_url" in res.stderr and "url.yaml:" in res.stderr
    assert PASSWORD not in res.stderr + res.stdout
    assert not (tmp_path / "plan.json").exists()


def test_a_literal_secret_in_an_env_map_is_refused_in_a_saved_plan(tmp_path: Path) -> None:
    spec = _spec(tmp_path, extra_env='{OPENAI_API_KEY: "sk-literal-0123", MODE: "plain"}')
    plan = tmp_path / "plan.json"
    res = _acx("compile", str(spec), "-o", str(plan), cwd=tmp_path, env={"MODEL_URL": "http://127.0.0.1:9/v1"})
    assert res.returncode == 2, res.stderr
    assert "E0230" in res.stderr and "run_env_variables.OPENAI_API_KEY" in res.stderr
    assert "sk-literal-0123" not in res.stderr + res.stdout
    assert not plan.exists()


def test_a_literal_url_password_is_refused_in_a_saved_plan(tmp_path: Path) -> None:
    spec = _spec(tmp_path, extra_env='{DB: "postgres://u:pw-literal-77@db/x"}')
    res = _acx("compile", str(spec), "-o", "plan.json", cwd=tmp_path, env={"MODEL_URL": "http://127.0.0.1:9/v1"})
    assert res.returncode == 2 and "E0230" in res.stderr and "run_env_variables.DB" in res.stderr
    assert "pw-literal-77" not in res.stderr
    assert not (tmp_path / "plan.json").exists()
    # references are fine, embedded ones included
    ok = _spec(tmp_path / "b", extra_env='{DB: "postgres://u:${DB_PW}@db/x", AUTH: "Bearer ${TOKEN}"}')
    res = _acx("compile", str(ok), "-o", "plan.json", cwd=tmp_path, env={"MODEL_URL": "http://127.0.0.1:9/v1"})
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["content_hash"]
