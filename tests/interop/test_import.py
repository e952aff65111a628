"""`acx results import` (issue 25 item 4): an acx run exported to Inspect (both log formats) or to
a Harbor job and imported back compares equal on every score (`acx results compare`: 0
differences); a log written by inspect-ai itself (its `mockllm` model, generated here) imports
and its scores match Inspect's own; every acx reader (`results show|tasks`, `acx report`)
works on an imported run; bad input is a clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acx.results import RunReader

HERE = Path(__file__).parent


def acx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], capture_output=True, text=True, timeout=300)


def ok(*args: str) -> str:
    res = acx(*args)
    assert res.returncode == 0, res.stderr + res.stdout
    return res.stdout


def compare(a: Path, b: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(ok("results", "compare", str(a), str(b), "--format", "json"))
    return out


def assert_no_differences(cmp: dict[str, Any], metrics: set[str]) -> None:
    assert cmp["only_a"] == [] and cmp["only_b"] == []
    seen = {m["metric"]: m for m in cmp["metrics"]}
    for name in metrics:
        m = seen[name]
        assert m["n"] == cmp["matched"] and m["diff"] == 0 and m["flipped_up"] == [] and m["flipped_down"] == []


def _values(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        (t.task_id, a.n): a.result["metrics"] for t in RunReader.open(run_dir).tasks() for a in t.attempts if a.result
    }


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_inspect_round_trip_compares_equal(acx_run: Path, tmp_path: Path, fmt: str) -> None:
    pytest.importorskip("inspect_ai")
    ok("results", "export", str(acx_run), "--format", "inspect", "--inspect-format", fmt, "-o", str(tmp_path / "x"))
    (log,) = (tmp_path / "x").glob(f"2*.{fmt}")
    ok("results", "import", str(log), "-o", str(tmp_path / "back"))
    cmp = compare(acx_run, tmp_path / "back")
    assert cmp["matched"] == 3
    assert_no_differences(cmp, {"correct"})
    assert _values(tmp_path / "back") == _values(acx_run)  # per attempt, bools stay bools
    info = json.loads((tmp_path / "back" / "run_info.json").read_text())
    assert info["imported_from"]["tool"] == "inspect_ai" and info["imported_from"]["path"] == str(log.resolve())
    assert info["imported_from"]["format"] == fmt and info["read_only"] is True
    back = RunReader.open(tmp_path / "back")
    tasks = {t.task_id: t for t in back.tasks()}
    assert tasks["q/2 odd id"].state == "error" and tasks["q0"].state == "normal"
    q0 = tasks["q0"].attempts[0].result
    assert q0 is not None and q0["final_answer"] == "42"
    orig = next(t for t in RunReader.open(acx_run).tasks() if t.task_id == "q0").attempts[0].result
    assert orig is not None
    steps, orig_steps = q0["trajectory"]["steps"], orig["trajectory"]["steps"]
    assert [s["assistant_content"]["tool_calls"] for s in steps] == [
        s["assistant_content"]["tool_calls"] for s in orig_steps
    ]
    assert [s["observation"] for s in steps] == [s["observation"] for s in orig_steps]
    assert q0["telemetry"]["model_usage"]["prompt_tokens"] == orig["telemetry"]["model_usage"]["prompt_tokens"]
    # Every reader works on it.
    assert "imported from inspect_ai" in ok("results", "show", str(tmp_path / "back"))
    assert "3 of 3 task(s)" in ok("results", "tasks", str(tmp_path / "back"))
    ok("report", str(acx_run), str(tmp_path / "back"), "-o", str(tmp_path / "r.html"))
    assert "q/2 odd id" in (tmp_path / "r.html").read_text()
    # Read-only: the files of an imported run cannot be written.
    assert not os.access(tmp_path / "back" / "run_info.json", os.W_OK) or os.geteuid() == 0
    assert (tmp_path / "back" / "run_info.json").stat().st_mode & 0o222 == 0


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_a_log_inspect_wrote_imports_with_inspects_scores(tmp_path: Path, fmt: str) -> None:
    pytest.importorskip("inspect_ai")
    res = subprocess.run(
        [sys.executable, str(HERE / "make_inspect_log.py"), str(tmp_path / "logs"), fmt],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    theirs = json.loads(res.stdout)
    assert theirs["status"] == "success"
    ok("results", "import", theirs["location"], "-o", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    (series,) = metrics["series"]
    assert series["metric_id"] == "includes" and series["kind"] == "binary_success"
    assert series["value"] == pytest.approx(theirs["accuracy"])
    got = _values(tmp_path / "run")
    assert {(i, e): {"includes": v == "C"} for i, e, v in theirs["samples"]} == got
    run = RunReader.open(tmp_path / "run")
    sum_attempt = next(t for t in run.tasks() if t.task_id == "sum").attempts[0].result
    assert sum_attempt is not None
    (first, _second) = sum_attempt["trajectory"]["steps"]
    assert first["assistant_content"]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"x": 2, "y": 2}}
    assert first["observation"] == [
        {"source_call_id": first["assistant_content"]["tool_calls"][0]["id"], "content": "4", "tool": "add"}
    ]
    assert sum_attempt["final_answer"] == "It is 4" and sum_attempt["telemetry"]["model_usage"]["prompt_tokens"] == 40
    assert "includes" in ok("results", "tasks", str(tmp_path / "run"))


def test_harbor_round_trip_compares_equal(acx_run: Path, tmp_path: Path) -> None:
    ok("results", "export", str(acx_run), "--format", "harbor", "-o", str(tmp_path / "x"))
    (job,) = [p for p in (tmp_path / "x").iterdir() if p.is_dir()]
    ok("results", "import", str(job), "-o", str(tmp_path / "back"))
    cmp = compare(acx_run, tmp_path / "back")
    assert cmp["matched"] == 3
    assert_no_differences(cmp, {"correct"})
    info = json.loads((tmp_path / "back" / "run_info.json").read_text())
    assert info["imported_from"]["tool"] == "harbor"
    back = {t.task_id: t for t in RunReader.open(tmp_path / "back").tasks()}
    assert back["q/2 odd id"].state == "error"
    assert {i["code"] for a in back["q/2 odd id"].attempts for i in (a.result or {})["issues"]} == {
        "harbor_trial_exception"
    }
    q0 = back["q0"].attempts[0].result
    assert q0 is not None and q0["metrics"] == {"score": 1.0, "correct": True}
    assert [s["assistant_content"]["tool_calls"][0]["function"]["name"] for s in q0["trajectory"]["steps"]] == [
        "bash",
        "submit",
    ]


def test_id_map_renames_tasks_so_differently_named_runs_pair(acx_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    ok("results", "export", str(acx_run), "--format", "inspect", "-o", str(tmp_path / "x"))
    (log,) = (tmp_path / "x").glob("2*.eval")
    (tmp_path / "map.json").write_text(json.dumps({"q0": "renamed-q0"}))
    ok("results", "import", str(log), "-o", str(tmp_path / "back"), "--id-map", str(tmp_path / "map.json"))
    cmp = compare(acx_run, tmp_path / "back")
    assert cmp["only_a"] == ["q0"] and cmp["only_b"] == ["renamed-q0"]


def test_bad_import_input_is_a_clear_error(acx_run: Path, tmp_path: Path) -> None:
    cases = []
    res = acx("results", "import", str(tmp_path / "missing.eval"), "-o", str(tmp_path / "o"))
    cases.append((res, "E0654"))
    (tmp_path / "junk.eval").write_bytes(b"not a zip")
    cases.append((acx("results", "import", str(tmp_path / "junk.eval"), "-o", str(tmp_path / "o")), "E0654"))
    (tmp_path / "junk.json").write_text("{}")
    cases.append((acx("results", "import", str(tmp_path / "junk.json"), "-o", str(tmp_path / "o")), "E0654"))
    cases.append((acx("results", "import", str(tmp_path), "-o", str(tmp_path / "o")), "E0654"))  # no job config
    (tmp_path / "map.json").write_text('{"a": 1}')
    cases.append(
        (
            acx("results", "import", str(tmp_path / "junk.json"), "-o", "o2", "--id-map", str(tmp_path / "map.json")),
            "E0655",
        )
    )
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    cases.append((acx("results", "import", str(tmp_path / "junk.json"), "-o", str(tmp_path / "full")), "E0653"))
    for res, code in cases:
        assert res.returncode == 2 and code in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "o").exists()


def test_a_job_harbor_wrote_imports_and_pairs_with_an_acx_run(
    acx_run: Path, harbor_py: list[str], tmp_path: Path
) -> None:
    """A job directory serialised by Harbor's own models (as `harbor run` writes it) imports:
    rewards become score/correct, the errored trial an issue with no score (unavailable, never a
    0), the ATIF trajectory ACTF steps; an id map pairs its tasks with an acx run's."""
    res = subprocess.run(
        [*harbor_py, str(HERE / "harbor_make_job.py"), str(tmp_path / "jobs")],
        env={**os.environ, "PYENV_VERSION": "3.12.1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    made = json.loads(res.stdout)
    (tmp_path / "map.json").write_text(json.dumps({"hello-world": "q0", "fix-bug": "q1"}))
    ok("results", "import", made["job_dir"], "-o", str(tmp_path / "run"), "--id-map", str(tmp_path / "map.json"))
    got = _values(tmp_path / "run")
    assert got == {
        ("q0", 1): {"score": 1.0, "correct": True},
        ("q0", 2): {"score": 0.0, "correct": False},
        ("q1", 1): {"score": 0.5, "correct": False},
        ("q1", 2): {},
    }
    tasks = {t.task_id: t for t in RunReader.open(tmp_path / "run").tasks()}
    errored = tasks["q1"].attempts[1].result
    assert errored is not None and errored["status"] == "run_error"
    assert (
        errored["issues"][0]["code"] == "harbor_trial_exception"
        and "AgentTimeoutError" in errored["issues"][0]["message"]
    )
    first = tasks["q0"].attempts[0].result
    assert first is not None and first["telemetry"]["model_usage"]["prompt_tokens"] == 120
    (step, last) = first["trajectory"]["steps"]
    assert step["system_prompt"] == "You are a coding agent." and step["user_content"] == "Solve hello-world."
    assert step["assistant_content"]["tool_calls"][0]["function"] == {"name": "bash", "arguments": {"cmd": "pytest -q"}}
    assert step["observation"] == [{"source_call_id": "t1", "content": "1 passed"}]
    assert step["metric"]["prompt_tokens_len"] == 100 and last["assistant_content"]["content"] == "Done."
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["imported_from"]["tool"] == "harbor" and info["status"] == "completed"
    # Paired with the acx run on the metric both have, matched by (mapped) task id.
    cmp = compare(acx_run, tmp_path / "run")
    assert cmp["matched"] == 2 and cmp["only_a"] == ["q/2 odd id"]
    correct = next(m for m in cmp["metrics"] if m["metric"] == "correct")
    assert correct["n"] == 2 and correct["mean_a"] == pytest.approx(0.75) and correct["mean_b"] == pytest.approx(0.25)


def test_acx_view_lists_and_serves_an_imported_run(acx_run: Path, tmp_path: Path) -> None:
    import http.client

    from acx.report import ViewServer

    ok("results", "export", str(acx_run), "--format", "harbor", "-o", str(tmp_path / "x"))
    (job,) = [p for p in (tmp_path / "x").iterdir() if p.is_dir()]
    ok("results", "import", str(job), "-o", str(tmp_path / "results" / "from-harbor"))
    server = ViewServer(tmp_path / "results", port=0)
    server.start()
    try:
        addr, port = server.httpd.server_address[:2]

        def get(path: str) -> bytes:
            conn = http.client.HTTPConnection(str(addr), int(port), timeout=60)
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                assert resp.status == 200, path
                return resp.read()
            finally:
                conn.close()

        runs = json.loads(get("/api/runs"))
        (run,) = runs["runs"] if isinstance(runs, dict) else runs
        assert run["rel"] == "from-harbor"
        page = get("/run/from-harbor/").decode()
        assert "q/2 odd id" in page and "harbor_trial_exception" in page
    finally:
        server.close()
