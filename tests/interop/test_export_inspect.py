"""`acx results export --format inspect` (issue 25 item 1): every exported log is read by
inspect-ai's own reader (`inspect_ai.log.read_eval_log`) and printed by `inspect log dump`, and its
samples, scores, messages, usage, errors and eval spec equal the acx run's. Contracts S1, S2 (the
statuses and scores of the attempts carry over)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acx.results import RunReader
from acx.testing.results import synthetic_tasks, write_run


def acx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], capture_output=True, text=True, timeout=300)


inspect_log = pytest.importorskip("inspect_ai.log")


def _attempts(run_dir: Path) -> dict[tuple[str, int], tuple[dict[str, Any], dict[str, Any]]]:
    out = {}
    for task in RunReader.open(run_dir).tasks():
        for a in task.attempts:
            assert a.result is not None
            out[(task.task_id, a.n)] = (task.task_json, a.result)
    return out


def _export(run_dir: Path, out: Path, *extra: str) -> Path:
    res = acx("results", "export", str(run_dir), "--format", "inspect", "-o", str(out), *extra)
    assert res.returncode == 0, res.stderr
    (log,) = [p for p in out.iterdir() if p.suffix in (".eval", ".json") and not p.name.endswith(".manifest.json")]
    assert str(log) in res.stdout
    return log


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_inspect_reads_every_sample_and_score(
    acx_run: Path, model_key: str, tmp_path: Path, fmt: str
) -> None:  # S1, S2
    log_path = _export(acx_run, tmp_path, "--inspect-format", fmt)
    assert log_path.suffix == f".{fmt}"
    log = inspect_log.read_eval_log(str(log_path))
    acx_attempts = _attempts(acx_run)
    assert log.samples is not None
    got = {(s.id, s.epoch): s for s in log.samples}
    assert set(got) == set(acx_attempts)
    for key, sample in got.items():
        task_json, result = acx_attempts[key]
        assert {n: s.value for n, s in sample.scores.items()} == result["metrics"]
        assert sample.input == task_json["instruction"] and sample.target == task_json["ground_truth"]
        assert sample.output.completion == (result["final_answer"] or "")
        assert sample.metadata["acx"]["status"] == result["status"]
        usage = result["telemetry"]["model_usage"]
        if usage["model_calls"]:
            (model_usage,) = sample.model_usage.values()
            assert model_usage.input_tokens == usage["prompt_tokens"]
            assert model_usage.output_tokens == usage["completion_tokens"]
            assert sample.role_usage["agent"].total_tokens == usage["total_tokens"]
        assert (sample.error is not None) == (result["status"] != "completed")
        if sample.error is not None:
            assert "model_failed" in sample.error.message
    # Messages from the ACTF trajectory: the tool call, its result, the reasoning.
    messages = got[("q0", 1)].messages
    roles = [m.role for m in messages]
    assert roles[:2] == ["system", "user"] and roles.count("tool") == 2
    call = next(m for m in messages if m.role == "assistant" and m.tool_calls)
    assert call.tool_calls[0].function == "bash" and call.tool_calls[0].arguments == {"command": "echo $((6*7))"}
    assert [c.reasoning for c in call.content if c.type == "reasoning"] == ["multiply first"]
    tool = next(m for m in messages if m.role == "tool")
    assert tool.tool_call_id == "c1" and tool.content.strip() == "42" and tool.function == "bash"
    assert got[("q0", 1)].model_usage["m1"].input_tokens_cache_read == 20
    # The eval spec and the aggregate results.
    metrics = json.loads((acx_run / "metrics.json").read_text())
    assert log.eval.task == "interop" and log.eval.model == "m1" and log.eval.config.epochs == 2
    assert log.eval.dataset.samples == 3 and log.eval.solver == "react"
    assert log.eval.metadata["acx"]["run_id"] == acx_run.name
    (score,) = log.results.scores
    assert score.name == "correct" and score.metrics["accuracy"].value == metrics["metrics"]["correct.avg@2"]
    assert score.metrics["pass_at_2"].value == metrics["metrics"]["correct.pass@2"]
    assert log.stats.model_usage["m1"].input_tokens == metrics["model_usage"]["run"]["prompt_tokens"]
    assert log.status == "success"
    # Nothing secret: the model key is nowhere in the export.
    for p in tmp_path.iterdir():
        assert model_key.encode() not in p.read_bytes()


def test_inspect_log_dump_prints_the_export(acx_run: Path, tmp_path: Path) -> None:
    log_path = _export(acx_run, tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "inspect_ai", "log", "dump", str(log_path)], capture_output=True, text=True, timeout=300
    )
    if res.returncode != 0 and "No module named inspect_ai.__main__" in res.stderr:
        res = subprocess.run(["inspect", "log", "dump", str(log_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    dumped = json.loads(res.stdout)
    assert sorted((s["id"], s["epoch"]) for s in dumped["samples"]) == sorted(_attempts(acx_run))
    assert dumped["results"]["scores"][0]["metrics"]["accuracy"]["value"] == pytest.approx(0.5)


def test_eval_zip_members_are_the_ones_inspect_writes(acx_run: Path, tmp_path: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(_export(acx_run, tmp_path)).namelist()
    assert {"header.json", "summaries.json", "reductions.json", "_journal/start.json"} <= set(names)
    samples = sorted(n for n in names if n.startswith("samples/"))
    assert "samples/q0_epoch_1.json" in samples and len(samples) == 6
    # An id with characters a member name cannot hold gets a hash: two ids never share a name.
    assert any(n.startswith("samples/q_2_odd_id-") and n.endswith("_epoch_2.json") for n in samples)
    log = inspect_log.read_eval_log(str(next(tmp_path.glob("*.eval"))), header_only=True)
    summaries = inspect_log.read_eval_log_sample_summaries(log.location)
    assert sorted((s.id, s.epoch) for s in summaries) == sorted(_attempts(acx_run))


def test_manifest_lists_what_inspect_cannot_hold(tmp_path: Path) -> None:
    """Retried tries, artifacts and unfinished attempts are named in the manifest, item by item."""
    run = tmp_path / "run"
    tasks = synthetic_tasks(12, seed=3)
    for t in tasks[:2]:
        t["attempts"][0]["retries"] = [{"reason": "overloaded", "stage": "run", "status": "run_error"}]
    write_run(run, tasks)
    # An attempt whose result.json is missing (a run killed while writing it) is unfinished.
    (gone,) = list(run.rglob("task-00005--*/attempt-1/result.json"))
    gone.unlink()
    res = acx("results", "export", str(run), "--format", "inspect", "-o", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    (manifest_path,) = (tmp_path / "out").glob("*.manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["schema_version"] == "acx.export_manifest.v1" and manifest["format"] == "inspect"
    assert manifest["source"]["run_id"] == RunReader.open(run).run_id
    assert len(manifest["files"]) == 1 and (tmp_path / "out" / manifest["files"][0]).is_file()
    lost = [(i["task_id"], i["attempt"]) for i in manifest["not_represented"] if "discarded" in i["what"]]
    assert lost == [("task-00000", 1), ("task-00001", 1)]
    unfinished = [i["task_id"] for i in manifest["not_represented"] if "unfinished" in i["what"]]
    assert unfinished == ["task-00005"]
    log = inspect_log.read_eval_log(str(tmp_path / "out" / manifest["files"][0]))
    assert log.samples is not None and len(log.samples) == 11


def test_bad_export_input_is_a_clear_error(acx_run: Path, tmp_path: Path) -> None:
    res = acx("results", "export", str(tmp_path), "--format", "inspect", "-o", str(tmp_path / "o"))
    assert res.returncode == 2 and "E0603" in res.stderr and "Traceback" not in res.stderr
    _export(acx_run, tmp_path / "o")
    again = acx("results", "export", str(acx_run), "--format", "inspect", "-o", str(tmp_path / "o"))
    assert again.returncode == 2 and "E0651" in again.stderr and "earlier export" in again.stderr
    (tmp_path / "file").write_text("x")
    clash = acx("results", "export", str(acx_run), "--format", "atif", "-o", str(tmp_path / "file"))
    assert clash.returncode == 2 and "E0651" in clash.stderr and "not a directory" in clash.stderr
    bad = acx("results", "export", str(acx_run), "--format", "csv", "-o", str(tmp_path / "p"))
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_a_run_still_being_written_is_refused(tmp_path: Path) -> None:
    import fcntl
    import os

    run = write_run(tmp_path / "run", synthetic_tasks(2), status="running")
    (run / ".acx").mkdir(exist_ok=True)
    fd = os.open(run / ".acx" / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a live `acx run` holds
        os.write(fd, str(os.getpid()).encode())
        res = acx("results", "export", str(run), "--format", "inspect", "-o", str(tmp_path / "o"))
        assert res.returncode == 2 and "E0650" in res.stderr and str(os.getpid()) in res.stderr
        assert not (tmp_path / "o").exists()
    finally:
        os.close(fd)
    done = acx("results", "export", str(run), "--format", "inspect", "-o", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr  # the lock released: a killed run exports as it is
    log = inspect_log.read_eval_log(str(next((tmp_path / "o").glob("2*.eval"))))
    assert log.status == "started"
