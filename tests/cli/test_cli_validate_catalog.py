"""`acx validate`, `acx list`, `acx config docs`, `acx schema`."""

from __future__ import annotations

import json
import re

from acx.cli import main
from acx.components import HARNESS_ALIASES, registry


def test_validate_reports_every_file_and_exits_2(project, write, capsys) -> None:
    write(
        "good.yaml",
        "version: 1\nrequests: [{name: a, benchmark: {id: harbor, path: t}, harness: {id: oracle}}]\n",
    )
    write("cfg.yaml", "execution: {max_retries: 1}\n")
    write("bad.yaml", "execution: {max_retires: 1}\nmodels: {}\n")
    assert main(["validate", "good.yaml", "cfg.yaml"]) == 0
    out = capsys.readouterr().out
    assert "good.yaml: ok (orchestration, 1 request(s))" in out and "cfg.yaml: ok (run_config)" in out
    assert main(["validate", "good.yaml", "bad.yaml", "missing.yaml"]) == 2
    out, err = capsys.readouterr()
    assert "bad.yaml:1:13: error[E0203]: unknown key `max_retires`" in err
    assert "bad.yaml:2:1: error[E0206]" in err
    assert "missing.yaml: 1 error(s) (unreadable)" in out


def test_validate_json(project, write, capsys) -> None:
    write("bad.yaml", "execution: {max_retires: 1}\n")
    assert main(["validate", "bad.yaml", "--format", "json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["valid"] is False and payload["files"][0]["error_count"] == 1
    assert payload["diagnostics"][0]["span"] == {
        "file": "bad.yaml",
        "line": 1,
        "col": 13,
        "end_line": 1,
        "end_col": 24,
    }


def test_list_components(capsys) -> None:
    assert main(["list", "benchmark"]) == 0
    out = capsys.readouterr().out
    assert "exact_match" in out and "harbor" in out
    assert main(["list", "harness", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    builtin = [row["id"] for row in rows if row["origin"] == "built-in"]
    assert builtin == list(registry("harness")), "the registered harnesses, in registry order"
    assert builtin[-2:] == ["installed_agent", "terminus"]
    # AgentCompass's ids follow, each with what it compiles to or why it is refused (issue 23 item 5)
    aliases = {row["id"]: row for row in rows if row["origin"] == "agentcompass-1.0.1"}
    assert set(aliases) == set(HARNESS_ALIASES)
    assert aliases["mini_swe_agent"]["maps_to"] == "installed_agent agent=mini-swe-agent"
    assert aliases["openclaw"]["nearest"] == "installed_agent" and aliases["openclaw"]["refused"]
    assert aliases["terminus2"]["maps_to"] == "terminus"
    assert main(["list", "harness"]) == 0
    text = capsys.readouterr().out
    assert "AgentCompass 1.0.1 harness ids" in text
    assert re.search(r"^claude_code +-> installed_agent agent=claude-code$", text, re.M)
    assert re.search(r"^openevolve +refused \(nearest acx harness: command\)$", text, re.M)
    assert main(["list", "env"]) == 0
    assert "host_process" in capsys.readouterr().out


def test_config_docs(capsys) -> None:
    assert main(["config", "docs", "benchmark", "exact_match"]) == 0
    out = capsys.readouterr().out
    assert "dataset" in out and "(required)" in out and "case_sensitive" in out
    assert main(["config", "docs", "env", "docker", "--format", "json"]) == 0
    fields = [row["field"] for row in json.loads(capsys.readouterr().out)["fields"]]
    assert "run_network_policy" in fields and "pull" in fields and "setup.image" in fields
    assert "evaluation_setup.workdir" in fields
    assert main(["config", "docs", "harness", "openai"]) == 2
    assert "did you mean `openai_chat`" in capsys.readouterr().err


def test_schema_out(tmp_path, capsys) -> None:
    assert main(["schema", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "orchestration.schema.json").read_text())["title"].startswith("acx orchestration")
    assert (tmp_path / "run_config.schema.json").exists()
    capsys.readouterr()
    assert main(["schema", "run_config"]) == 0
    assert json.loads(capsys.readouterr().out)["$schema"].endswith("2020-12/schema")


def test_config_show_merges_layers_with_origin(project, write, capsys) -> None:  # contract R4, R5
    write("config.yaml", "execution: {max_retries: 1}\nenvironments: {docker: {pull: missing}}\n")
    write("extra.yaml", "execution: {max_retries: 3}\nenvironments: {docker: {env_variables: {T: sk-x}}}\n")
    assert main(["config", "show", "--config", "extra.yaml", "--env", "docker", "--format", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["execution"]["max_retries"] == 3 and view["execution"]["timeout_multiplier"] == 1.0
    assert view["environments"]["docker"]["pull"] == "missing"
    assert view["environments"]["docker"]["env_variables"] == {"T": "********"}
    assert main(["config", "show", "--show-origin"]) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines()]
    assert ["config.yaml:1:26", "project", "config", "execution.max_retries", "=", "1"] in lines
    assert main(["config", "show", "--env", "dockr"]) == 2
    assert "did you mean `docker`" in capsys.readouterr().err


def test_config_show_rejects_invalid_layers(project, write, capsys) -> None:
    write("bad.yaml", "execution: {max_retires: 1}\n")
    assert main(["config", "show", "--config", "bad.yaml"]) == 2
    assert "did you mean `max_retries`" in capsys.readouterr().err
