"""Dataset options that would do nothing are refused with a located error, never ignored (QA).

contract B2: component params are typed configs; a param that cannot act is an error, not a no-op.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from acx.components._configs import DatasetConfig


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"shuffle_choices": True}, "shuffle_choices needs multiple choice"),
        ({"prompt_template": "Answer briefly."}, "prompt_template must contain {input}"),
        ({"prompt_template": "{input}\n{choices}"}, "{choices}/{letters}, which need multiple choice"),
        ({"prompt_template": "{input} one of {letters}"}, "{choices}/{letters}, which need multiple choice"),
        ({"scorers": ["exact", "choice"]}, "scorer `choice` needs multiple choice"),
        ({"scorers": [{"id": "choice", "name": "mc"}]}, "scorer `choice` needs multiple choice"),
    ],
)
def test_options_without_effect_are_refused(params: dict[str, object], message: str) -> None:
    # contract B2
    with pytest.raises(msgspec.ValidationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        msgspec.convert({"path": "d.jsonl", **params}, DatasetConfig)


def test_multiple_choice_options_still_accepted() -> None:
    # contract B2: with choices mapped the same options are valid
    cfg = msgspec.convert(
        {
            "path": "d.jsonl",
            "fields": {"choices": "options"},
            "shuffle_choices": True,
            "prompt_template": "{input}\n{choices}\nOne of {letters}",
            "scorers": ["choice"],
        },
        DatasetConfig,
    )
    assert cfg.shuffle_choices


def test_refusal_is_located_exit_2(tmp_path: Path) -> None:
    # contract B2: a located E0204 and exit 2 from the CLI, not a silent no-op
    (tmp_path / "d.jsonl").write_text('{"id": "a", "input": "q", "target": "x"}\n')
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "version: 1\nname: t\nrequests:\n  - name: t\n"
        "    benchmark: {id: dataset, path: d.jsonl, shuffle_choices: true}\n"
        '    harness: {id: command, command: "echo x"}\n'
        "    environment: {id: host_process}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "compile", str(spec), "--plans"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "s.yaml:5:62: error[E0204]" in out
    assert "shuffle_choices needs multiple choice" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("reducer", "k", "refused"), [("pass_at_5", 1, True), ("at_least_2", 1, True), ("pass_at_2", 2, False)]
)
def test_reducers_over_more_attempts_than_planned_are_refused(
    tmp_path: Path, reducer: str, k: int, refused: bool
) -> None:
    # contract B2 (a param that cannot act is an error): pass_at_5 with 1 attempt was "unavailable"
    # for every task; now E0406 at planning, naming the reducer list
    (tmp_path / "d.jsonl").write_text('{"id": "a", "input": "q", "target": "x"}\n')
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "version: 1\nname: t\nrequests:\n  - name: t\n"
        f"    benchmark: {{id: dataset, path: d.jsonl, scorers: [{{id: exact, reducers: [{reducer}]}}]}}\n"
        '    harness: {id: command, command: "echo x"}\n'
        "    environment: {id: host_process}\n"
        f"    execution: {{attempts: {{k: {k}}}}}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "compile", str(spec), "--plans"], capture_output=True, text=True, timeout=60
    )
    out = proc.stdout + proc.stderr
    if refused:
        assert proc.returncode == 2, out
        assert "benchmark.params.scorers[0].reducers: error[E0406]" in out
        assert f"reducer `{reducer}` needs at least" in out and "Traceback" not in out
    else:
        assert proc.returncode == 0, out
