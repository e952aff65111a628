"""The ``installed_agent`` answer extractor (``answer = {from = ...}``, issue 23 item 2): every
form on outputs captured from the real CLIs (tests/agents/golden: Claude Code 2.1.197's
stream-json stdout, mini-swe-agent 2.4.6's saved trajectory), located plan-time refusals, and a
property: whatever the agent wrote, extraction gives an answer or an ``answer_not_found`` issue,
never an exception."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.components._configs import AnswerFromFile, AnswerFromJsonl, AnswerFromStdout, InstalledAgentConfig
from acx.components.harnesses import _answer
from acx.components.harnesses._agents import AGENTS
from acx.components.harnesses.installed_agent import resolve_config
from acx.errors import AcxPlanError

GOLDEN = Path(__file__).parent / "golden"
CLAUDE = (GOLDEN / "claude_code_2.1.197_stream.jsonl").read_text()
MINI = (GOLDEN / "mini_swe_agent_2.4.6.traj.json").read_text()
#: Real `opencode run --format json` streams (opencode-ai 1.18.33): a bash tool call then "42"; a 400.
OPENCODE = (GOLDEN / "opencode_1.18.33_run.jsonl").read_text()
OPENCODE_ERROR = (GOLDEN / "opencode_1.18.33_error.jsonl").read_text()
#: Real aider 0.86.2 chat histories (--message-file): a reply; a refused model call.
AIDER = (GOLDEN / "aider_0.86.2_chat.md").read_text()
AIDER_ERROR = (GOLDEN / "aider_0.86.2_error.chat.md").read_text()
#: Real `openhands --headless --json` stdout (openhands 1.16.0): a terminal call then `finish`; a
#: plain reply; a refused model call (exit status 0, a ConversationErrorEvent).
OH_FINISH = (GOLDEN / "openhands_1.16.0_finish.jsonl").read_text()
OH_MESSAGE = (GOLDEN / "openhands_1.16.0_message.jsonl").read_text()
OH_ERROR = (GOLDEN / "openhands_1.16.0_error.jsonl").read_text()


def _issue(got: _answer.Extracted) -> str:
    assert got.answer is None and got.issue is not None
    assert got.issue.code == "answer_not_found" and got.issue.severity == "error" and got.issue.phase == "run"
    return got.issue.message


# ---- the shipped definitions on real outputs --------------------------------------------------
def test_claude_code_definition_on_its_real_stream_json() -> None:
    spec = AGENTS["claude-code"].answer
    assert spec is not None
    assert _answer.extract(spec, "", CLAUDE) == _answer.Extracted("4")
    # An error ending (the real CLI's is_error result, e.g. an API error) is no answer.
    err = CLAUDE.replace('"is_error":false', '"is_error":true')
    assert 'where type == "result" and is_error == false' in _issue(_answer.extract(spec, "", err))
    # Cut before the result event (the agent killed at its budget).
    cut = "\n".join(CLAUDE.splitlines()[:2])
    assert "none of the 2 JSON event(s)" in _issue(_answer.extract(spec, "", cut))


def test_mini_swe_agent_definition_on_its_real_trajectory() -> None:
    spec = AGENTS["mini-swe-agent"].answer
    assert spec is not None
    assert _answer.extract(spec, "", MINI) == _answer.Extracted("4\n")
    doc = json.loads(MINI)
    doc["info"].update(exit_status="LimitsExceeded", submission="")
    msg = _issue(_answer.extract(spec, "", json.dumps(doc)))
    assert 'info.exit_status is "LimitsExceeded"' in msg and "info.submission" in msg
    assert "the agent wrote no file" in _issue(_answer.extract(spec, "", None, "the agent wrote no file /x"))


def test_codex_definition_reads_its_last_message_file() -> None:
    spec = AGENTS["codex"].answer
    assert spec == AnswerFromFile(path="/logs/agent/codex-last-message.txt")
    assert _answer.extract(spec, "{...events...}", "the answer\n") == _answer.Extracted("the answer\n")


def test_opencode_definition_on_its_real_json_stream() -> None:
    spec = AGENTS["opencode"].answer
    assert spec is not None and _answer.source_path(spec) == "/logs/agent/opencode.jsonl"
    assert _answer.extract(spec, "", OPENCODE) == _answer.Extracted("42")
    # A failed run (an "error" event, no text) is no answer, saying what was looked for.
    assert 'where type == "text"' in _issue(_answer.extract(spec, "", OPENCODE_ERROR))
    # Text before a tool call is not the answer: the last step's text is.
    early = OPENCODE.replace('"text":"42"', '"text":"first"').splitlines()
    late = [line.replace('"text":"42"', '"text":"final"') for line in OPENCODE.splitlines()]
    assert _answer.extract(spec, "", "\n".join([*early, *late])).answer == "final"


def test_opencode_definition_passes_no_secret_and_keeps_its_exit_status() -> None:
    d = AGENTS["opencode"]
    config = json.loads(d.env["OPENCODE_CONFIG_CONTENT"])
    acx = config["provider"]["acx"]
    # The gateway's variables by reference: opencode fills them in; no value is written anywhere.
    assert acx["options"] == {"baseURL": "{env:OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}"}
    assert acx["npm"] == "@ai-sdk/openai-compatible"  # bundled in the binary: nothing fetched
    assert d.command.startswith("set -o pipefail; ") and d.command.endswith('exit "$rc"')
    assert "</dev/null | tee /logs/agent/opencode.jsonl; rc=$?;" in d.command


def test_aider_definition_on_its_real_chat_history() -> None:
    spec = AGENTS["aider"].answer
    assert spec is not None and _answer.source_path(spec) == "/logs/agent/aider.chat.md"
    assert _answer.extract(spec, "", AIDER) == _answer.Extracted("The answer is:\n\n42")
    # aider exits 0 after a failed call; its history has the error and no reply: no answer.
    assert "no match" in _issue(_answer.extract(spec, "", AIDER_ERROR))
    # A multi-line message (each line "#### ") and a reply with a file listing.
    multi = AIDER.replace("#### What is 6*7?  \n", "#### Line one  \n####   \n#### Line three  \n").replace(
        "The answer is:\n\n42", "hello.txt\n```\nHi\n```"
    )
    assert _answer.extract(spec, "", multi).answer == "hello.txt\n```\nHi\n```"


def test_file_regex_form() -> None:
    spec = AnswerFromFile(path="log.txt", regex=r"FINAL: (?P<answer>\w+)")
    assert _answer.extract(spec, "stdout FINAL: no", "FINAL: a\nFINAL: b\n").answer == "b"  # the file, last match
    assert "no match" in _issue(_answer.extract(spec, "", "nothing"))
    assert "a match of /FINAL: (?P<answer>\\w+)/ in the file log.txt" in _answer.describe(spec)


def test_openhands_definition_on_its_real_json_events() -> None:
    spec = AGENTS["openhands"].answer
    assert spec is not None and _answer.source_path(spec) == "/logs/agent/openhands.jsonl"
    assert _answer.extract(spec, "", OH_FINISH) == _answer.Extracted("42")  # the finish action's message
    assert _answer.extract(spec, "", OH_MESSAGE) == _answer.Extracted("42")  # a plain reply
    msg = _issue(_answer.extract(spec, "", OH_ERROR))
    assert "`action.message` or `llm_message.content.0.text`" in msg and "none of the 2 JSON event(s)" in msg
    # Stopped after a tool call (killed at its budget): that action has neither field.
    cut = "\n".join(line for line in OH_FINISH.splitlines() if '"tool_name": "finish"' not in line)
    assert "has no such field" in _issue(_answer.extract(spec, "", cut))


def test_jsonl_field_alternatives() -> None:
    spec = AnswerFromJsonl(field=["a.b", "c"])
    assert _answer.extract(spec, '{"c": 1}').answer == "1"
    assert _answer.extract(spec, '{"a": {"b": "x"}, "c": 1}').answer == "x"  # the first one present
    assert "`a.b` or `c`" in _issue(_answer.extract(spec, '{"d": 1}'))


def test_every_definition_reads_a_structured_answer() -> None:
    assert all(d.answer is not None for d in AGENTS.values())


def test_pipefail_where_a_tee_would_hide_the_exit_status() -> None:
    for name, d in AGENTS.items():
        if "| tee" in d.command and name != "codex":  # codex's command is another change's
            assert d.command.startswith("set -o pipefail; "), name


# ---- each form --------------------------------------------------------------------------------
def test_stdout_forms() -> None:
    out = "Model: x\nthinking...\nANSWER: 42\n\n"
    assert _answer.extract(AnswerFromStdout(), out).answer == out
    assert _answer.extract(AnswerFromStdout(pick="last_line"), out).answer == "ANSWER: 42"
    assert _answer.extract(AnswerFromStdout(regex=r"ANSWER: (\d+)"), "ANSWER: 1\nANSWER: 2").answer == "2"
    assert _answer.extract(AnswerFromStdout(regex=r"=(?P<answer>\w+)!(\d)"), "x=ab!3").answer == "ab"
    assert _answer.extract(AnswerFromStdout(regex=r"\d+"), "a 12 b 34").answer == "34"
    assert _answer.extract(AnswerFromStdout(regex="42", pick="last_line"), out).answer == "42"
    assert "no match" in _issue(_answer.extract(AnswerFromStdout(regex=r"FINAL: (\w+)"), out))
    assert "no non-blank line" in _issue(_answer.extract(AnswerFromStdout(pick="last_line"), " \n\n"))
    assert "took part in no match" in _issue(_answer.extract(AnswerFromStdout(regex=r"a|(b)"), "a"))


def test_file_forms() -> None:
    spec = AnswerFromFile(path="out.json", json_path="a.list.-1.v")
    assert _answer.extract(spec, "", '{"a": {"list": [{"v": 1}, {"v": "x"}]}}').answer == "x"
    assert _answer.extract(spec, "", '{"a": {"list": [{"v": 3.5}]}}').answer == "3.5"
    assert _answer.extract(spec, "", '{"a": {"list": [{"v": {"k": [1]}}]}}').answer == '{"k": [1]}'
    assert "has no such field" in _issue(_answer.extract(spec, "", '{"a": {"list": []}}'))
    assert "null" in _issue(_answer.extract(spec, "", '{"a": {"list": [{"v": null}]}}'))
    assert "is not JSON" in _issue(_answer.extract(spec, "", "not json"))
    assert _answer.extract(AnswerFromFile(path="a.txt"), "stdout", "text").answer == "text"
    where = AnswerFromFile(path="f", json_path="v", where={"ok": True})
    assert _answer.extract(where, "", '{"ok": true, "v": "y"}').answer == "y"
    assert "ok is 1" in _issue(_answer.extract(where, "", '{"ok": 1, "v": "y"}'))  # true is not 1
    assert "ok is absent" in _issue(_answer.extract(where, "", '{"v": "y"}'))


def test_jsonl_forms() -> None:
    log = 'noise line\n{"type": "a", "n": 1}\n{"type": "b", "n": 2}\n{broken\n{"type": "a", "n": 3}\n'
    last = AnswerFromJsonl(where={"type": "a"}, field="n")
    assert _answer.extract(last, log).answer == "3"  # path unset: stdout
    first = AnswerFromJsonl(where={"type": "a"}, field="n", pick="first")
    assert _answer.extract(first, log).answer == "1"
    assert _answer.extract(AnswerFromJsonl(field="type"), log).answer == "a"  # no where: the last event
    from_file = AnswerFromJsonl(path="log.jsonl", where={"type": "b"}, field="n")
    assert _answer.extract(from_file, "", log).answer == "2"
    assert "none of the 3 JSON event(s) in stdout" in _issue(
        _answer.extract(AnswerFromJsonl(where={"type": "z"}, field="n"), log)
    )
    assert "has no such field" in _issue(_answer.extract(AnswerFromJsonl(where={"type": "b"}, field="m"), log))
    assert "could not be read" in _issue(_answer.extract(from_file, "", None))


# ---- plan time ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "path", "words"),
    [
        ({"from": "stdout", "regex": "(unclosed"}, "harness.params.answer.regex", "does not compile"),
        ({"from": "file", "path": ""}, "harness.params.answer.path", "path is empty"),
        ({"from": "file", "path": "f", "json_path": "a..b"}, "harness.params.answer.json_path", "empty key"),
        ({"from": "file", "path": "f", "where": {"a": 1}}, "harness.params.answer.where", "needs `json_path`"),
        ({"from": "file", "path": "f", "regex": "(x"}, "harness.params.answer.regex", "does not compile"),
        ({"from": "file", "path": "f", "regex": "x", "json_path": "a"}, "harness.params.answer.regex", "both say"),
        ({"from": "jsonl", "field": "x.", "where": {}}, "harness.params.answer.field", "empty key"),
        ({"from": "jsonl", "field": "x", "where": {"": 1}}, "harness.params.answer.where", "empty key"),
        ({"from": "jsonl", "field": []}, "harness.params.answer.field", "empty list"),
        ({"from": "jsonl", "field": ["a", "b..c"]}, "harness.params.answer.field", "empty key"),
    ],
)
def test_bad_answer_specs_are_refused_at_plan_time(answer, path, words) -> None:
    config = msgspec.convert({"command": "true", "answer": answer}, InstalledAgentConfig)
    with pytest.raises(AcxPlanError) as info:
        resolve_config(config)
    assert info.value.path == path and words in str(info.value) and info.value.code == "E0433"


def test_answer_and_answer_file_together_are_refused() -> None:
    config = InstalledAgentConfig(command="true", answer_file="a.txt", answer=AnswerFromStdout())
    with pytest.raises(AcxPlanError) as info:
        resolve_config(config)
    assert info.value.path == "harness.params.answer"


def test_definitions_answer_and_user_override() -> None:
    assert resolve_config(InstalledAgentConfig(agent="claude-code")).answer == AGENTS["claude-code"].answer
    mine = AnswerFromStdout(pick="last_line")
    assert resolve_config(InstalledAgentConfig(agent="claude-code", answer=mine)).answer == mine
    # answer_file is the user saying where the answer is: the definition's extractor steps aside.
    c = resolve_config(InstalledAgentConfig(agent="mini-swe-agent", answer_file="a.txt"))
    assert c.answer is None and c.answer_file == "a.txt"


def test_shape_errors_are_located_by_the_config_parser(project, write, capsys) -> None:
    from acx.cli import main

    (Path.cwd() / "d.jsonl").write_text('{"id": "q", "question": "?", "answer": "a"}\n')
    write(
        "run.yaml",
        """
        version: 1
        name: a
        requests:
          - name: a
            benchmark: {id: exact_match, dataset: d.jsonl}
            harness: {id: installed_agent, command: "true", answer: {from: stdin}}
            model: {id: m, base_url: "http://127.0.0.1:9/v1"}
            environment: {id: host_process}
        """,
    )
    assert main(["compile", "--plans", "run.yaml"]) == 2
    err = capsys.readouterr().err
    assert "run.yaml:6:68: error[E0204]: `requests[0].harness.answer.from`: invalid value 'stdin'" in err, err
    assert "Traceback" not in err


# ---- property -----------------------------------------------------------------------------------
_keys = st.text(st.sampled_from("abc.-01"), min_size=1, max_size=6)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4))
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)),
    max_leaves=8,
)
_specs = st.one_of(
    st.builds(
        AnswerFromStdout,
        pick=st.sampled_from(["all", "last_line"]),
        regex=st.one_of(st.none(), st.sampled_from([r"\d+", r"(a)|b", r"(?P<answer>.)$", "x*", "[", "(?s).+"])),
    ),
    st.builds(
        AnswerFromFile,
        path=st.just("f"),
        json_path=st.one_of(st.none(), _keys),
        where=st.dictionaries(_keys, _scalars, max_size=2),
    ),
    st.builds(
        AnswerFromJsonl,
        path=st.one_of(st.none(), st.just("f")),
        where=st.dictionaries(_keys, _scalars, max_size=2),
        field=_keys,
        pick=st.sampled_from(["last", "first"]),
    ),
)
_outputs = st.one_of(
    st.text(max_size=200),
    _json.map(json.dumps),
    st.lists(_json.map(json.dumps), max_size=5).map("\n".join),
)


@settings(max_examples=400, deadline=None)
@given(spec=_specs, stdout=_outputs, file_text=st.one_of(st.none(), _outputs))
def test_any_output_gives_an_answer_or_an_issue(spec, stdout, file_text) -> None:
    got = _answer.extract(spec, stdout, file_text, None if file_text is not None else "missing")
    assert (got.answer is None) != (got.issue is None)
    if got.issue is not None:
        assert got.issue.code == "answer_not_found" and got.issue.severity == "error"
        assert got.issue.message.startswith("the agent's answer was not found: looked for ")
    else:
        assert isinstance(got.answer, str)


# ---- in the harness -------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "severity"), [(None, "error"), ("none", "error"), ("reuse", "warning")])
def test_not_found_is_a_warning_only_when_the_sandbox_is_judged(mode, severity) -> None:
    from types import SimpleNamespace
    from typing import Any, cast

    import trio

    from acx.components._context import HarnessContext
    from acx.components.harnesses.installed_agent import InstalledAgentHarness
    from acx.ir import EnvironmentSpec, ExecutionPlan, PreparedTask

    h = InstalledAgentHarness(InstalledAgentConfig(command="true", answer=AnswerFromStdout(regex="FINAL: (.*)")))
    ctx = HarnessContext(
        session=None,
        prepared=PreparedTask(task_id="t"),
        request=cast(Any, None),
        plan=ExecutionPlan(
            task_id="t", attempt=1, environment=EnvironmentSpec(id="docker"), evaluation_environment_mode=mode
        ),
    )
    telemetry: dict[str, Any] = {}
    res = SimpleNamespace(stdout="no final line\n", stderr="warn\n")
    answer, issues = trio.run(h.read_answer, ctx, res, telemetry)
    assert answer is None and [(i.code, i.severity) for i in issues] == [("answer_not_found", severity)]
    assert telemetry["agent_logs"] == {"stdout": "no final line\n", "stderr": "warn\n"}
