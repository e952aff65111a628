"""The ``terminus`` harness's context summarization on ``host_process`` (the host's tmux), with
scripted replies through the run's gateway (docs/agents.md, "Context summarization"):

- the model reporting its context exceeded (a 400 with OpenAI's "maximum context length" body,
  which the gateway classifies ``context_length``) makes Terminus 2's three-step hand-off
  (summary, questions from a fresh agent, answers), and the episode continues in the fresh
  conversation and finishes the work;
- the proactive threshold triggers the same hand-off from the model's usage numbers;
- a failed hand-off falls back to a short summary;
- ``summarize: false`` makes the context error end the attempt with an issue saying so.

Telemetry (``telemetry.terminus.summarizations``) and the trajectory (``context_management`` on
the summarization calls' steps and on the first step of the fresh conversation) show each one
(contract S1: the attempt's trajectory and telemetry are in its RunResult)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from acx.cli import main
from acx.testing.fake_models import FakeModelServer, Step, error, text

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="!!! no tmux on this host !!!")

#: OpenAI's wording of a prompt that does not fit (acx.models classifies it ``context_length``).
OVERFLOW = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens."


def reply(*commands: tuple[str, float], complete: bool = False, usage: tuple[int, int] = (10, 5)) -> Step:
    body = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": k, "duration": d} for k, d in commands]}
    return text(json.dumps({**body, "task_complete": complete}), usage=usage)


def _run(tmp_path: Path, monkeypatch, srv: FakeModelServer, harness: dict[str, Any]) -> dict:
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "Make the files.", "answer": "x"}) + "\n")
    (tmp_path / "home").mkdir(exist_ok=True)  # bash --login without the host's start-up files
    # tmux's socket in a directory of this test's (short: a socket path is at most 107 bytes), so
    # test_terminus_host.py's check that no terminus socket is left sees none of these.
    sockets = Path(tempfile.mkdtemp(prefix="acxt"))
    env = {"HOME": str(tmp_path / "home"), "TMUX_TMPDIR": str(sockets)}
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: t
runtime: {{results_dir: results, progress: none}}
requests:
  - name: t
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps({"id": "terminus", "cwd": str(tmp_path), **harness})}
    model: {{id: m, base_url: "{srv.base_url}"}}
    environment: {{id: host_process, run_env_variables: {json.dumps(env)}}}
    execution: {{run_timeout_seconds: 60, max_retries: 0}}
"""
    )
    monkeypatch.chdir(tmp_path)
    try:
        main(["run", str(spec)])
        assert not list(sockets.rglob("acx-terminus-*"))  # the terminal's server and socket are gone
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    return json.loads(next((tmp_path / "results").rglob("attempt-1/result.json")).read_text())


def _messages(srv: FakeModelServer, i: int) -> list[dict[str, Any]]:
    return srv.requests[i].body["messages"]


def _contexts(result: dict) -> list[dict[str, Any] | None]:
    return [s.get("context_management") for s in result["trajectory"]["steps"]]


def test_a_context_overflow_is_summarized_and_the_episode_finishes_the_task(tmp_path, monkeypatch, capsys) -> None:
    script = [
        reply(("echo one > a.txt\n", 0.3), usage=(3000, 100)),
        reply(("echo more > c.txt\n", 0.3), usage=(6000, 100)),
        error(400, OVERFLOW),  # turn 3: the conversation no longer fits
        text("SUMMARY: wrote a.txt and c.txt"),
        text("QUESTIONS: what is in a.txt?"),
        text("ANSWERS: a.txt holds one"),
        reply(("echo two > b.txt\n", 0.3), complete=True),  # turn 3 again, in the fresh conversation
        reply(complete=True),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, {"max_turns": 6})
    capsys.readouterr()
    assert (tmp_path / "b.txt").read_text().strip() == "two"  # work done after the hand-off
    term = result["telemetry"]["terminus"]
    assert term["stop_reason"] == "completed", result["issues"]
    assert term["turns"] == 4  # the overflowing turn is one turn, its call made again after the hand-off
    assert term["summarization_count"] == 1
    (record,) = term["summarizations"]
    # The last fitting call counted 6100 tokens: the latest exchange is dropped to free 4000 of them.
    assert record == {
        "summarization": 1,
        "turn": 3,
        "trigger": "context_length",
        "messages_dropped": 2,
        "method": "handoff",
    }
    assert not [i for i in result["issues"] if i["code"] == "model_failed"]
    assert len(srv.requests) == 8
    first = _messages(srv, 0)[0]["content"]
    # Step 1: the unwound conversation (task and first exchange) plus the summary request.
    summary_call = _messages(srv, 3)
    assert [m["role"] for m in summary_call] == ["user", "assistant", "user"]
    assert summary_call[0]["content"] == first and "Make the files." in summary_call[-1]["content"]
    # Step 2: a fresh conversation of one message: the task, the summary and the terminal's screen.
    (questions_call,) = _messages(srv, 4)
    assert "Make the files." in questions_call["content"] and "SUMMARY: wrote a.txt" in questions_call["content"]
    assert "echo more > c.txt" in questions_call["content"]  # the screen
    # Step 3: the conversation again, with the summary and the questions to answer.
    answers_call = _messages(srv, 5)
    assert answers_call[:2] == summary_call[:2] and "QUESTIONS: what is in a.txt?" in answers_call[-1]["content"]
    # The episode continues from the first prompt, the questions and the answers.
    fresh = _messages(srv, 6)
    assert [m["role"] for m in fresh] == ["user", "user", "assistant", "user"]
    assert fresh[0]["content"] == first and fresh[2]["content"] == "QUESTIONS: what is in a.txt?"
    assert "ANSWERS: a.txt holds one" in fresh[3]["content"]
    assert _messages(srv, 7)[:4] == fresh  # the next turn builds on it
    # The trajectory marks the three summarization calls and where the fresh conversation starts.
    note = {"type": "summarization", "summarization": 1, "trigger": "context_length"}
    assert _contexts(result) == [
        None,
        None,
        {**note, "part": "summary"},
        {**note, "part": "questions"},
        {**note, "part": "answers"},
        {"type": "handoff", "summarization": 1, "method": "handoff"},
        None,
    ]


def test_the_proactive_threshold_summarizes_from_the_usage_numbers(tmp_path, monkeypatch, capsys) -> None:
    script = [
        reply(("echo one > a.txt\n", 0.3), usage=(1500, 100)),  # 8400 tokens free of 10000: no summary
        reply(("echo more > c.txt\n", 0.3), usage=(2500, 100)),  # 7400 free < 8000: summarize before turn 3
        text("SUMMARY"),
        text("QUESTIONS"),
        text("ANSWERS"),
        reply(("echo two > b.txt\n", 0.3), complete=True),
        reply(complete=True),
    ]
    harness = {"context_limit": 10000, "proactive_summarization_threshold": 8000}
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, harness)
    capsys.readouterr()
    assert (tmp_path / "b.txt").read_text().strip() == "two"
    term = result["telemetry"]["terminus"]
    assert term["stop_reason"] == "completed" and term["turns"] == 4
    assert term["summarizations"] == [
        {"summarization": 1, "turn": 2, "trigger": "proactive", "free_tokens": 7400, "method": "handoff"}
    ]
    # The summary call carries the whole conversation (nothing is dropped when nothing overflowed),
    # not the observation of turn 2, which the hand-off replaces.
    summary_call = _messages(srv, 2)
    assert len(summary_call) == 5 and summary_call[:3] == _messages(srv, 1)
    assert summary_call[3]["role"] == "assistant" and "echo more > c.txt" in summary_call[3]["content"]
    assert summary_call[4]["role"] == "user" and "Make the files." in summary_call[4]["content"]
    assert [m["role"] for m in _messages(srv, 5)] == ["user", "user", "assistant", "user"]
    # The fresh conversation is small again: no second summarization although the last count was high.
    assert len(srv.requests) == 7
    assert [c["part"] if c and "part" in c else c for c in _contexts(result)][2:6] == [
        "summary",
        "questions",
        "answers",
        {"type": "handoff", "summarization": 1, "method": "handoff"},
    ]


def test_a_failed_handoff_falls_back_to_a_short_summary(tmp_path, monkeypatch, capsys) -> None:
    script = [
        reply(("echo one > a.txt\n", 0.3)),
        error(400, OVERFLOW),
        error(400, "the summary request is refused too"),  # step 1 fails (not retried: a 400)
        text("NEXT: write b.txt"),  # the short summary, from the task and the screen alone
        reply(("echo two > b.txt\n", 0.3), complete=True),
        reply(complete=True),
    ]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, {})
    capsys.readouterr()
    assert (tmp_path / "b.txt").read_text().strip() == "two"
    term = result["telemetry"]["terminus"]
    assert term["stop_reason"] == "completed" and term["summarization_count"] == 1
    (record,) = term["summarizations"]
    assert record["method"] == "short_summary" and "refused too" in record["error"]
    (short,) = _messages(srv, 3)
    assert "Make the files." in short["content"] and "echo one > a.txt" in short["content"]
    # The conversation continues (unwound) with the task and the short summary as its user message.
    after = _messages(srv, 4)
    assert after[:2] == _messages(srv, 1)[:2] and "NEXT: write b.txt" in after[-1]["content"]


def test_summarize_false_ends_the_attempt_on_a_context_overflow(tmp_path, monkeypatch, capsys) -> None:
    script = [reply(("echo one > a.txt\n", 0.3)), error(400, OVERFLOW)]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, {"summarize": False})
    capsys.readouterr()
    term = result["telemetry"]["terminus"]
    assert term["stop_reason"] == "model_failed" and term["summarization_count"] == 0
    (issue,) = [i for i in result["issues"] if i["code"] == "model_failed"]
    assert issue["severity"] == "error"
    assert "exceeds the model's context after 1 turn(s) and summarize is false" in issue["message"]
    assert "maximum context length" in issue["message"]  # the model's own words
    assert len(srv.requests) == 2  # no summary was asked for


def test_another_model_error_is_not_summarized(tmp_path, monkeypatch, capsys) -> None:
    script = [reply(("echo one > a.txt\n", 0.3)), error(400, "scripted refusal")]
    with FakeModelServer(script, default=None) as srv:
        result = _run(tmp_path, monkeypatch, srv, {})
    capsys.readouterr()
    term = result["telemetry"]["terminus"]
    assert term["stop_reason"] == "model_failed" and term["summarizations"] == []
    (issue,) = [i for i in result["issues"] if i["code"] == "model_failed"]
    assert "scripted refusal" in issue["message"]
    assert len(srv.requests) == 2
