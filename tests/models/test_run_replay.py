"""`acx run --replay RUN_DIR` (issue 26 item 3): a run re-run with every model call answered from
its own transcripts (`model_calls.json`), per task and attempt in order, for `react` and for an
installed agent streaming through the real `openai` SDK, with the model server stopped; a call
that differs from the recorded one is a `replay_diverged` issue naming the first differing field.
Contracts M5 (nothing paid), M6 (records), R12 (located refusals)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.models.test_run_cache import COMMAND, REACT, acx, attempts, command_script, react_script, spec, steady

from acx.testing.fake_models import FakeModelServer


def runs_of(tmp_path: Path, name: str) -> list[Path]:
    return sorted((tmp_path / "results" / name).iterdir(), key=lambda p: p.stat().st_mtime)


@pytest.mark.slow
@pytest.mark.parametrize(("harness", "script"), [(REACT, react_script), (COMMAND, command_script)])
def test_replay_a_run_from_its_transcripts_with_the_server_stopped(
    tmp_path: Path, harness: str, script: object
) -> None:
    if harness == COMMAND:
        pytest.importorskip("openai")
    with FakeModelServer(script(), default=None) as srv:  # type: ignore[operator]
        first = acx(
            "run", str(spec(tmp_path, "p", harness, srv.base_url, "off", ", strip_punctuation: true")), cwd=tmp_path
        )
        assert first.returncode == 0, first.stderr + first.stdout
    (recorded,) = runs_of(tmp_path, "p")
    second = acx("run", "--replay", str(recorded), cwd=tmp_path)  # the spec and flags from the run itself
    assert second.returncode == 0, second.stderr + second.stdout
    replayed = next(r for r in runs_of(tmp_path, "p") if r != recorded)
    a1, a2 = attempts(recorded), attempts(replayed)
    assert sorted(a1) == sorted(a2) == ["q0", "q1"]
    for task, r1 in a1.items():
        r2 = a2[task]
        assert [i["code"] for i in r2["issues"]] == [i["code"] for i in r1["issues"]]
        assert r2["final_answer"] == r1["final_answer"] and r2["metrics"] == r1["metrics"]
        assert steady(r2["trajectory"]) == steady(r1["trajectory"])
        assert all(step["cached"] is True for step in r2["trajectory"]["steps"])
        u2 = r2["telemetry"]["model_usage"]
        assert u2["cost_usd"] == 0 and u2["cached_calls"] == 2
        assert u2["unpaid_cost_usd"] == pytest.approx(r1["telemetry"]["model_usage"]["cost_usd"])
    assert json.loads((replayed / "metrics.json").read_text())["model_usage"]["run"]["cost_usd"] == 0


@pytest.mark.slow
def test_a_call_that_differs_is_replay_diverged_naming_the_field(tmp_path: Path) -> None:
    with FakeModelServer(react_script(), default=None) as srv:
        base = srv.base_url
        first = acx("run", str(spec(tmp_path, "d", REACT, base, "off")), cwd=tmp_path)
        assert first.returncode == 0, first.stderr
    (recorded,) = runs_of(tmp_path, "d")
    # The same request with another system prompt: the agent's first call differs from the record.
    changed = spec(tmp_path, "d", REACT, base, "off", ', system_prompt: "Answer tersely."')
    second = acx("run", str(changed), "--replay", str(recorded), cwd=tmp_path)
    replayed = next(r for r in runs_of(tmp_path, "d") if r != recorded)
    for result in attempts(replayed).values():
        issues = [i for i in result["issues"] if i["code"] == "replay_diverged"]
        assert len(issues) == 1, (result["issues"], second.stderr)
        assert "call 1 differs from the recorded one first at request.messages[0]" in issues[0]["message"]
        assert str(recorded) in issues[0]["message"]


def test_replay_of_something_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    res = acx("run", "--replay", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "E0660" in res.stderr and "not an acx run directory" in res.stderr
    assert "Traceback" not in res.stderr
    (tmp_path / "run.yaml").write_text("")
    res = acx("run", str(tmp_path / "run.yaml"), "--replay", str(tmp_path), "--reuse", cwd=tmp_path)
    assert res.returncode == 2 and "E0661" in res.stderr


@pytest.mark.slow
def test_the_library_replays_a_run_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from tests.models.test_run_cache import KEY

    import acx
    from acx.errors import AcxUserError

    with FakeModelServer(react_script(), default=None) as srv:
        path = spec(tmp_path, "l", REACT, srv.base_url, "off", ", strip_punctuation: true")
        assert acx_run_ok(tmp_path, path)
    (recorded,) = runs_of(tmp_path, "l")
    monkeypatch.chdir(tmp_path)
    result = acx.run(path, replay=recorded, environ={**os.environ, "MKEY": KEY}, runtime={"progress": "none"})
    assert result.exit_code == 0
    replayed = next(r for r in runs_of(tmp_path, "l") if r != recorded)
    for r in attempts(replayed).values():
        assert r["metrics"]["correct"] is True and r["telemetry"]["model_usage"]["cached_calls"] == 2
    with pytest.raises(AcxUserError) as refused:
        acx.run(path, replay=recorded, reuse=True, environ={**os.environ, "MKEY": KEY})
    assert refused.value.code == "E0661"


def acx_run_ok(tmp_path: Path, path: Path) -> bool:
    res = acx("run", str(path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return True
