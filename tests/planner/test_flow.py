"""The planning flow and its purity (contracts P1, P8, B3, B5, H5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import acx.ir as ir
from acx.cli import main
from acx.compiler._planner import plan_request
from acx.compiler._recipes import RecipeRegistry

from ._helpers import HOST, make_request


def test_load_plan_flow(dataset, tmp_path: Path) -> None:  # contract P1
    dataset([{"id": "a", "question": "q?", "answer": "x"}])
    req = make_request(
        benchmark="exact_match",
        bench_params={"dataset": "d.jsonl"},
        harness="command",
        harness_params={"command": "cat"},
        env="host_process",
    )
    rp = plan_request(req, base_dir=str(tmp_path), capabilities=HOST, recipes=RecipeRegistry())
    (task,) = rp.tasks
    assert isinstance(task, ir.TaskSpec)
    plan = rp.plan_attempt(task, 1)
    assert isinstance(plan, ir.ExecutionPlan) and plan.task_id == "a"
    assert callable(rp.benchmark.prepare_task)  # the next step of the flow (run time)


def test_dry_run_loads_no_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # contract P8
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "version: 1\nname: s\nrequests:\n  - name: r\n"
        "    benchmark: {id: exact_match, dataset: missing.jsonl}\n"
        "    harness: {id: command, command: cat}\n    environment: {id: host_process}\n"
    )
    assert main(["compile", str(spec), "--dry-run"]) == 0  # the dataset is not read
    capsys.readouterr()
    assert main(["compile", str(spec), "--plans"]) == 2  # planning reads it
    assert "missing.jsonl does not exist" in capsys.readouterr().err


def test_nothing_heavy_at_import() -> None:  # contract B3
    code = (
        "import sys\n"
        "import acx.components.benchmarks.exact_match, acx.components.benchmarks.harbor\n"
        "import acx.compiler._planner, acx.cli._plans, acx.stdlib_recipes\n"
        "print(json.dumps([m for m in ('trio', 'docker', 'lark', 'ruamel') if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_build_plan_does_not_mutate_request(dataset, tmp_path: Path) -> None:  # contract B5
    dataset([{"id": "a", "question": "q?", "answer": "x"}])
    req = make_request(
        benchmark="exact_match",
        bench_params={"dataset": "d.jsonl"},
        harness="command",
        harness_params={"command": "cat"},
        env="host_process",
    )
    before = ir.canonical_json(req)
    rp = plan_request(req, base_dir=str(tmp_path), capabilities=HOST)
    for task in rp.tasks:
        rp.plan_attempt(task, 1)
    assert ir.canonical_json(req) == before


def test_workdir_must_be_absolute_posix(harbor_task) -> None:  # contract H5
    from acx.components.harbor_task import load_harbor_task
    from acx.errors import AcxPlanError

    assert (
        load_harbor_task(harbor_task("ok", '[environment]\nworkdir = "/srv/app"\n')).environment_setup.workdir
        == "/srv/app"
    )
    for bad in ("relative/dir", "C:\\\\work"):
        with pytest.raises(AcxPlanError, match="absolute POSIX"):
            load_harbor_task(harbor_task(f"bad{len(bad)}", f'[environment]\nworkdir = "{bad}"\n'))
