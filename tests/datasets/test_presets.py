"""AgentCompass benchmark ids as presets: an AgentCompass orchestration naming them compiles
unchanged once the data is on disk; ids acx cannot honour are refused naming what is missing
(contracts R12, P5, P6)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import msgspec
import pytest

from acx.cli import main
from acx.components import BENCHMARKS
from acx.components.benchmarks._preset_table import HARBOR_PRESETS, QA_PRESETS, UNSUPPORTED
from acx.components.benchmarks.presets import decrypt_canary
from acx.ir import decode_program

ORCH = """version: 1
name: compass
defaults:
  harness: {{id: command, command: "echo 42"}}
  environment: {{id: {env}}}
  model: {{id: m}}
requests:
{requests}
"""


def _orch(project: Path, ids: list[str], env: str = "docker") -> Path:
    reqs = "".join(f"  - name: r{i}\n    benchmark: {{id: {bid}}}\n" for i, bid in enumerate(ids))
    path = project / "orch.yaml"
    path.write_text(ORCH.format(env=env, requests=reqs))
    return path


def _program(project: Path) -> dict[str, object]:
    assert main(["compile", "orch.yaml", "-o", "plan.json"]) == 0
    program = decode_program((project / "plan.json").read_bytes())
    return {r.name: r for r in program.requests}  # type: ignore[attr-defined]


def _encrypt(text: str, password: str) -> str:
    data = text.encode()
    key = hashlib.sha256(password.encode()).digest()
    key = key * (len(data) // len(key)) + key[: len(data) % len(key)]
    return base64.b64encode(bytes(a ^ b for a, b in zip(data, key, strict=True))).decode()


def test_every_preset_is_registered_with_its_own_config() -> None:
    for pid in (*QA_PRESETS, *HARBOR_PRESETS):
        info = BENCHMARKS[pid]
        assert info.load().id == pid and info.config_class.__name__.endswith("PresetConfig")
        assert msgspec.convert({}, info.config_class).path == f"data/{pid}"  # type: ignore[attr-defined]
    assert not set(UNSUPPORTED) & set(BENCHMARKS)


def test_harbor_presets_compile_with_their_modes_and_policies(project: Path) -> None:
    ids = list(HARBOR_PRESETS)
    for pid in ids:
        task = project / "data" / pid / "hello"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text('[environment]\ndocker_image = "acx-test:none"\n')
        (task / "instruction.md").write_text("Say hello.\n")
        (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    _orch(project, ids)
    assert main(["compile", "orch.yaml", "-o", "plan.json"]) == 0
    doc = json.loads((project / "plan.json").read_text())
    by_name = {r["name"]: r for r in doc["requests"]}
    for i, pid in enumerate(ids):
        (plan,) = by_name[f"r{i}"]["plans"]["hello"].values()
        mode = HARBOR_PRESETS[pid][1]
        # contract P5: the preset's default mode applies unless the task declares its own
        assert plan["evaluation_environment_mode"] == mode, pid
        run_policy = plan["run_network_policy"]
        if pid == "swebench_pro_verified":  # contract P6: a task hint the preset fills
            assert run_policy["network_mode"] == "denylist" and "github.com" in run_policy["denied_hosts"]
        else:
            assert run_policy["network_mode"] == "public"


def test_qa_preset_compiles_from_a_local_copy(project: Path) -> None:
    (project / "data" / "hle").mkdir(parents=True)
    rows = [
        {"id": "h1", "question": "6*7?", "answer": "42", "category": "Math", "image": ""},
        {"id": "h2", "question": "See image", "answer": "x", "category": "Bio", "image": "data:image/png;base64,AA"},
    ]
    (project / "data" / "hle" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _orch(project, ["hle"], env="host_process")
    assert main(["compile", "orch.yaml", "-o", "plan.json"]) == 0
    doc = json.loads((project / "plan.json").read_text())
    assert list(doc["requests"][0]["plans"]) == ["h1"]  # the text-only default filter


def test_missing_data_names_the_preset_and_where_to_put_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _orch(project, ["swebench_verified"])
    assert main(["compile", "orch.yaml", "-o", "plan.json"]) == 2
    err = capsys.readouterr().err
    assert "E0410" in err and "data/swebench_verified" in err and "SWE-bench Verified" in err
    _orch(project, ["sealqa"], env="host_process")
    assert main(["compile", "orch.yaml", "-o", "plan.json"]) == 2
    err = capsys.readouterr().err
    assert "E0401" in err and "vtllms/sealqa" in err and "Traceback" not in err


@pytest.mark.parametrize("bid", sorted(UNSUPPORTED))
def test_unsupported_ids_are_refused_naming_what_is_missing(
    project: Path, capsys: pytest.CaptureFixture[str], bid: str
) -> None:
    _orch(project, [bid])
    assert main(["compile", "orch.yaml", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"error[E0309]: AgentCompass benchmark `{bid}` is not supported by acx: {UNSUPPORTED[bid][:40]}" in err


def test_browsecomp_rows_are_decrypted_with_their_canary(tmp_path: Path) -> None:
    import csv

    from acx.components.benchmarks.presets import BrowsecompPresetBenchmark, BrowsecompPresetConfig  # type: ignore[attr-defined]
    from acx.ir import BenchmarkSpec, EnvironmentSpec, HarnessSpec, ModelSpec, RunRequest

    assert decrypt_canary(_encrypt("héllo", "pw"), "pw") == "héllo"
    (tmp_path / "data" / "browsecomp").mkdir(parents=True)
    with (tmp_path / "data" / "browsecomp" / "browse_comp_test_set.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["problem", "answer", "problem_topic", "canary"])
        w.writerow([_encrypt("Who wrote X?", "c1"), _encrypt("Ann", "c1"), _encrypt("Art", "c1"), "c1"])
    bench = BrowsecompPresetBenchmark(BrowsecompPresetConfig(), base_dir=tmp_path)
    req = RunRequest(
        model=ModelSpec(id="m"),
        benchmark=BenchmarkSpec(id="browsecomp"),
        harness=HarnessSpec(id="command"),
        environment=EnvironmentSpec(id="host_process"),
    )
    (task,) = bench.load_tasks(req)
    assert (task.question, task.ground_truth, task.category) == ("Who wrote X?", "Ann", "Art")
    assert bench.metric_contract.primary_id() == "correct"
    assert bench.scorers[0].scorer.id == "model_graded"


def test_gaia_preset_places_attachments_and_scores_like_gaia(tmp_path: Path) -> None:
    import trio

    from acx.components.benchmarks.presets import GaiaPresetBenchmark, GaiaPresetConfig  # type: ignore[attr-defined]
    from acx.components.scorers._text import gaia_match
    from acx.ir import BenchmarkSpec, EnvironmentSpec, HarnessSpec, ModelSpec, RunRequest, RunResult

    d = tmp_path / "data" / "gaia"
    d.mkdir(parents=True)
    (d / "sheet.csv").write_text("a,b\n")
    rows = [
        {"task_id": "g1", "Question": "Sum?", "Final answer": "1,234", "Level": 1, "file_name": "sheet.csv"},
        {"task_id": "g2", "Question": "Names?", "Final answer": "Ann; Bob", "Level": 2, "file_name": ""},
    ]
    (d / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "sheet.csv").write_text("x")
    bench = GaiaPresetBenchmark(GaiaPresetConfig(), base_dir=tmp_path)
    req = RunRequest(
        model=ModelSpec(id="m"),
        benchmark=BenchmarkSpec(id="gaia"),
        harness=HarnessSpec(id="command"),
        environment=EnvironmentSpec(id="host_process"),
    )
    g1, g2 = bench.load_tasks(req)
    assert g1.metadata["files"] == {"sheet.csv": str((d / "sheet.csv").resolve())} and g1.category == "1"
    assert "files" not in g2.metadata
    assert gaia_match("1234", "1,234") and gaia_match("ann, BOB", "Ann; Bob") and not gaia_match("Ann", "Ann; Bob")

    async def score(answer: str) -> object:
        from acx.components.scorers import ScoreContext

        s = await bench.scorers[0].scorer.score(answer, ["Ann; Bob"], ScoreContext(task=g2))
        return s.value

    assert trio.run(score, "I think... FINAL ANSWER: ann;bob") is True
    assert RunResult  # imported for parity with other tests


def test_judge_model_param_like_agentcompass(tmp_path: Path) -> None:
    """AgentCompass QA benchmarks take `judge_model`; the presets give it to their graders."""
    from acx.components.benchmarks.presets import (  # type: ignore[attr-defined]
        GaiaPresetBenchmark,
        GaiaPresetConfig,
        HlePresetBenchmark,
        HlePresetConfig,
    )

    judge = {"id": "o3-mini", "base_url": "http://127.0.0.1:9/v1", "api_key": "${JUDGE_KEY}"}
    hle = HlePresetBenchmark(msgspec.convert({"judge_model": judge}, HlePresetConfig), base_dir=tmp_path)
    (bound,) = hle.scorers
    assert bound.metric == "correct" and bound.scorer.config.model.id == "o3-mini"
    assert bound.scorer.config.template == "hle" and not hle.calls_model  # its own endpoint: no gateway needed
    gaia = GaiaPresetBenchmark(msgspec.convert({"judge_model": judge}, GaiaPresetConfig), base_dir=tmp_path)
    assert [b.metric for b in gaia.scorers] == ["correct", "judge"]
    plain = HlePresetBenchmark(HlePresetConfig(), base_dir=tmp_path)
    assert plain.calls_model  # grades with the run's grader role: the run starts its gateway
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"judge_model": {"id": "x"}}, HlePresetConfig)  # base_url is required
