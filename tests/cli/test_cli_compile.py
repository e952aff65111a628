"""`acx compile` end to end through the CLI (contracts R4, R8–R11, P8)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from acx.cli import main
from acx.drivers import default_provider_limits

# An AgentCompass v1 orchestration file, unchanged (reference §3.2 shapes; acx component ids).
ORCH = """
version: 1
name: nightly
task_concurrency: 64
runtime:
  results_dir: results
  progress: plain
  provider_limits: {docker: 32}
defaults:
  harness: {id: openai_chat}
  environment: {id: docker, pull: missing}
  model:
    id: my-model
    base_url: ${MODEL_BASE_URL}
    api_key: ${MODEL_API_KEY}
    api_protocol: openai-chat
    params: {temperature: 0.0}
  execution: {attempts: {k: 3, strategy: avg}, max_retries: 2}
  runtime: {reuse: false, checkpoint_resume: true}
  output: {run_name: exp1}
requests:
  - name: swe-verified
    benchmark: {id: harbor, path: tasks/, sample_ids: [django__django-11099]}
    execution: {run_timeout_seconds: 1800}
  - name: qa
    benchmark: {id: exact_match, dataset: data/qa.jsonl}
    harness: {id: none}
    environment: {id: host_process}
    output: {run_id: qa-first}
"""


@pytest.fixture()
def setup(project, write, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("MODEL_BASE_URL", "http://gateway:8000/v1")
    monkeypatch.setenv("MODEL_API_KEY", "sk-very-secret")
    xdg = tmp_path_factory.mktemp("xdg2")
    (xdg / "acx").mkdir()
    (xdg / "acx" / "config.yaml").write_text("execution: {timeout_multiplier: 2.0, run_timeout_seconds: 100}\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    write("orch.yaml", ORCH)
    write("config.yaml", "execution: {timeout_multiplier: 3.0, task_concurrency: 8}\nruntime: {reuse: true}\n")
    write("ci.yaml", "environments: {docker: {setup: {image: 'python:3.12'}}}\nexecution: {max_retries: 5}\n")
    return project


def _json(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_agentcompass_orchestration_compiles_to_the_precedence_tables(setup, capsys) -> None:  # R4, R10, R11
    payload = _json(
        capsys,
        [
            "compile",
            "orch.yaml",
            "--dry-run",
            "--format",
            "json",
            "--config",
            "ci.yaml",
            "--execution-params",
            '{"evaluation_timeout_seconds": 900}',
        ],
    )
    assert payload["format_version"] == 1 and payload["name"] == "nightly"
    assert payload["task_concurrency"] == 64
    swe, qa = payload["requests"]
    assert (swe["name"], swe["index"], qa["index"]) == ("swe-verified", 0, 1)
    ex = swe["execution"]
    assert ex["task_concurrency"] == 64  # R11: orchestration beats config execution
    assert ex["timeout_multiplier"] == 3.0  # project config beats user config
    assert ex["run_timeout_seconds"] == 1800  # request beats user config
    assert ex["max_retries"] == 2  # defaults.execution beats --config execution
    assert ex["attempts"] == {"k": 3, "strategy": "avg"}
    assert ex["evaluation_timeout_seconds"] == 900  # --execution-params beats everything
    assert qa["execution"]["run_timeout_seconds"] == 100  # user config, not overridden
    assert swe["environment"]["setup"]["image"] == "python:3.12"  # --config environment layer
    assert swe["environment"]["params"]["pull"] == "missing"
    assert qa["environment"]["id"] == "host_process"
    assert swe["runtime"]["reuse"] is False  # defaults.runtime beats config runtime.reuse
    assert swe["output"] == {"run_name": "exp1", "run_id": None, "export": []}
    assert qa["output"]["run_id"] == "qa-first"
    assert swe["benchmark"] == {
        "id": "harbor",
        "params": {
            "sample_ids": ["django__django-11099"],
            "aggregation_mode": "micro_weighted",
            "category_hierarchy": None,
            "path": "tasks/",
            "task_names": None,
            "n_tasks": None,
            "solution_env_for_agent": False,
        },
    }
    assert swe["model"]["base_url"] == "http://gateway:8000/v1"
    assert swe["model"]["api_key"] == "${MODEL_API_KEY}"
    # The providers the requests use get their default (not every registered driver's, which
    # would tie the plan to the installed plugins); the spec's override wins for docker.
    used = {r["environment"]["id"] for r in payload["requests"]}
    defaults = {p: n for p, n in default_provider_limits().items() if p in used}
    assert payload["runtime"]["provider_limits"] == {**defaults, "docker": 32}
    assert len(swe["metadata"]["config_path"]) == 3


def test_secrets_never_reach_the_output(setup, capsys, write) -> None:
    write("orch.yaml", ORCH.replace("${MODEL_API_KEY}", "sk-literal-key"))
    for fmt in ("json", "yaml", "text"):
        assert main(["compile", "orch.yaml", "--format", fmt, "--full"]) == 0
        out, err = capsys.readouterr()
        assert "sk-literal-key" not in out + err and "sk-very-secret" not in out + err


def test_yaml_output_parses_back_to_the_json_payload(setup, capsys) -> None:
    as_json = _json(capsys, ["compile", "orch.yaml", "--format", "json"])
    assert main(["compile", "orch.yaml", "--format", "yaml"]) == 0
    as_yaml = YAML(typ="safe", pure=True).load(capsys.readouterr().out)
    assert as_yaml == as_json


def test_text_view_shows_sources_and_hides_defaults(setup, capsys) -> None:
    assert main(["compile", "orch.yaml"]) == 0
    out = capsys.readouterr().out
    assert "execution.run_timeout_seconds = 1800.0" in out and "request `swe-verified`  orch.yaml:" in out
    assert "at defaults (hidden; --full shows them)" in out
    assert main(["compile", "orch.yaml", "--full"]) == 0
    assert "hidden" not in capsys.readouterr().out


def test_output_file(setup, capsys) -> None:
    assert main(["compile", "orch.yaml", "--dry-run", "--format", "json", "-o", "out.json"]) == 0
    assert json.loads((setup / "out.json").read_text())["name"] == "nightly"


def test_plans_load_tasks_and_report_a_missing_dataset_as_input_error(setup, capsys) -> None:  # P1, P8
    # --plans goes past the dry run: it loads tasks, so the missing `tasks/` directory of the
    # harbor request is a clear input error (exit 2) naming it, never a traceback.
    code = main(["compile", "orch.yaml", "--plans"])
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and "tasks" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compile", "nope.yaml"], "file not found: nope.yaml"),
        (["compile", "orch.yaml", "--config", "missing.yaml"], "config file not found: missing.yaml"),
        (
            ["compile", "orch.yaml", "--execution-params", "{max_retries: 1}"],
            "--execution-params is not valid JSON",
        ),
        (["compile", "orch.yaml", "--execution-params", "[1]"], "must be a JSON object"),
        (["compile", "orch.yaml", "--execution-params", '{"task_concurrency": 2}'], "use --task-concurrency"),
        (["compile", "orch.yaml", "--task-concurrency", "0"], "task_concurrency must be an integer >= 1"),
        (["compile", "config.yaml"], "is a run config file, not an orchestration"),
        (["compile", "orch.yaml", "--config", "orch.yaml"], "is an orchestration file"),
    ],
)
def test_bad_input_exits_2_with_one_clear_error(setup, capsys, argv, needle) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_no_traceback_in_a_real_process(setup) -> None:
    (setup / "bad.yaml").write_text("version: 1\nrequests:\n  - name: a\n    benchmark: {id: nope\n")
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "compile", "bad.yaml", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=setup,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "bad.yaml:5:1: error[E0201]" in proc.stderr or "bad.yaml:4" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_json_errors_with_format_json(setup, capsys, write) -> None:
    write("orch.yaml", ORCH.replace("max_retries: 2", "max_retries: two"))
    assert main(["compile", "orch.yaml", "--format", "json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["valid"] is False and payload["diagnostics"][0]["code"] == "E0204"
    assert payload["diagnostics"][0]["span"]["line"] == 17


def test_acx_files_work_as_config_layers(setup, capsys, write) -> None:  # contract R4 (any front end)
    pytest.importorskip("acx.compiler._acx_lower")
    write("layer.acx", "execution {\n  max_retries = 7\n}\n")
    payload = _json(capsys, ["compile", "orch.yaml", "--config", "layer.acx", "--format", "json", "--full"])
    swe = payload["requests"][0]
    assert swe["execution"]["max_retries"] == 2  # defaults.execution still beats any config layer
    chain = swe["provenance"]["execution.max_retries"]
    assert [c["source"].split(":")[0] for c in chain] == ["ExecutionSpec default", "layer.acx", "orch.yaml"]
    assert chain[1]["value"] == 7 and chain[1]["layer"] == "--config"


def test_code_frames_never_print_literal_secrets(setup, capsys, write) -> None:  # reference §2.2
    write(
        "orch.yaml",
        "version: 1\nrequests:\n  - name: a\n    model: {id: m, api_key: sk-literal-9, bogus: 1}\n"
        "    benchmark: {id: exact_match, dataset: q}\n    harness: {id: none}\n",
    )
    assert main(["compile", "orch.yaml"]) == 2
    err = capsys.readouterr().err
    assert "unknown key `bogus`" in err and "sk-literal-9" not in err
    frame = next(ln for ln in err.splitlines() if "api_key" in ln)
    caret = next(ln for ln in err.splitlines() if ln.strip().endswith("^^^^^"))
    assert frame.index("bogus") == caret.index("^")  # masking keeps the columns
