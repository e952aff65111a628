"""Terminus 2's reply format and observations (``acx.components.harnesses._terminus``, pure): the
JSON object found in the reply, its required fields and defaults, the warnings and errors the
model is told about, output limits and the terminal's new output (issue 23 item 3)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from acx.components.harnesses import _terminus as t


def _reply(**fields: object) -> str:
    return json.dumps({"analysis": "a", "plan": "p", "commands": [], **fields})


def test_a_well_formed_reply() -> None:
    r = t.parse_reply(
        _reply(commands=[{"keystrokes": "ls\n", "duration": 0.1}, {"keystrokes": "C-c"}], task_complete=True)
    )
    assert r.error == "" and r.warnings == []
    assert r.commands == [t.Command("ls\n", 0.1), t.Command("C-c", 1.0)]  # duration defaults to 1 s
    assert r.task_complete and (r.analysis, r.plan) == ("a", "p")


def test_defaults_caps_and_tolerated_text() -> None:
    r = t.parse_reply("Sure! " + _reply(commands=[{"keystrokes": "sleep 99\n", "duration": 600}]) + " done")
    assert r.error == "" and r.commands == [t.Command("sleep 99\n", 60.0)]  # waits are capped at 60 s
    assert r.warnings == ["text before the JSON object", "text after the JSON object"]
    assert not r.task_complete  # defaults to false
    assert t.parse_reply(_reply(task_complete="true")).task_complete  # a string flag, as Terminus reads it
    r = t.parse_reply(_reply(task_complete="maybe"))
    assert not r.task_complete and "not a boolean" in r.warnings[0]
    r = t.parse_reply(_reply(commands=[{"keystrokes": "x", "duration": "soon"}]))
    assert r.commands == [t.Command("x", 1.0)] and "duration" in r.warnings[0]


def test_a_command_without_newline_before_another_is_a_warning() -> None:
    r = t.parse_reply(_reply(commands=[{"keystrokes": "echo a"}, {"keystrokes": "echo b\n"}]))
    assert r.error == "" and "commands[0] does not end with a newline" in r.warnings[0]
    # The last command may be left unterminated (typed, not run), and key names need no newline.
    assert t.parse_reply(_reply(commands=[{"keystrokes": "C-c"}, {"keystrokes": "vim"}])).warnings == []


def test_unusable_replies_say_why() -> None:
    assert t.parse_reply("I will list the files.").error == "no JSON object found in the reply"
    assert "missing required field(s): plan, commands" in t.parse_reply('{"analysis": "x"}').error
    assert t.parse_reply(_reply(commands="ls")).error == '"commands" is not a list'
    assert t.parse_reply(_reply(commands=[{"duration": 1}])).error == 'commands[0] has no "keystrokes" string'
    assert t.parse_reply(_reply(commands=["ls"])).error == "commands[0] is not an object"
    assert "invalid JSON" in t.parse_reply('{"analysis": "a", "plan": p}').error
    fb = t.parse_error_feedback(t.parse_reply("no json"))
    assert "could not be used: no JSON object found" in fb and "valid JSON object" in fb


def test_braces_inside_strings_do_not_end_the_object() -> None:
    body = _reply(commands=[{"keystrokes": "awk '{print $1}' f \\\"}\\\"\n"}])
    r = t.parse_reply(body + "\n{not this one}")
    assert r.error == "" and r.commands[0].keystrokes == "awk '{print $1}' f \\\"}\\\"\n"


@given(
    st.lists(
        st.fixed_dictionaries({"keystrokes": st.text(max_size=30), "duration": st.floats(min_value=0, max_value=1000)}),
        max_size=5,
    ),
    st.booleans(),
    st.text(alphabet=" \nabc:!", max_size=20),
)
def test_any_valid_reply_round_trips(commands: list[dict], complete: bool, around: str) -> None:
    r = t.parse_reply(around + _reply(commands=commands, task_complete=complete) + around)
    assert r.error == ""
    assert [c.keystrokes for c in r.commands] == [c["keystrokes"] for c in commands]
    assert all(c.duration == min(d["duration"], 60.0) for c, d in zip(r.commands, commands, strict=True))
    assert r.task_complete is complete


@given(st.text(max_size=200))
def test_parse_never_raises(text: str) -> None:
    r = t.parse_reply(text)
    assert isinstance(r.error, str)


def test_output_limit_keeps_head_and_tail() -> None:
    assert t.limit_output("short", 100) == "short"
    out = t.limit_output("A" * 500 + "B" * 500, 200)
    assert out.startswith("A" * 100) and out.endswith("B" * 100) and "800 interior bytes omitted" in out
    # UTF-8 is cut on character boundaries
    assert "omitted" in t.limit_output("é" * 300, 101)


def test_new_output_is_what_appeared_since_the_last_look() -> None:
    first, seen = t.new_output(None, "$ \n", "$ ")
    assert first == "Current terminal screen:\n$ "
    obs, seen = t.new_output(seen, "$ ls\nfile.txt\n$ \n", "screen")
    assert obs == "New terminal output:\n$ ls\nfile.txt\n$ \n"
    # Nothing new: the visible screen
    assert t.new_output(seen, seen, "screen")[0] == "Current terminal screen:\nscreen"
    # The history was cleared (`clear`, scrolled out): the visible screen, not a wrong diff
    assert t.new_output("gone\n", "fresh\n", "fresh")[0] == "Current terminal screen:\nfresh"


def test_prompts_carry_the_task_and_the_format() -> None:
    p = t.first_prompt("Create hello.txt {literally}", "Current terminal screen:\n$ ")
    assert "Create hello.txt {literally}" in p and '"keystrokes"' in p and '"task_complete"' in p
    assert p.rstrip().endswith("$")
    assert '"task_complete": true' in t.completion_check("$ ")
