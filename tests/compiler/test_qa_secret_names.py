"""QA #5: a `${VAR}` whose *name* looks like a secret is a secret wherever it is used.

It stays a reference (like a reference at a sensitive key): never substituted, so no printed view
(dry run text/json/yaml, `--full`, explain) and no plan file holds its value; W0302 when unset.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from acx.cli import main
from acx.compiler._interpolate import interpolate
from acx.compiler._redact import is_secret_name
from acx.diagnostics import Span

Writer = Callable[[str, str], Path]

SECRETS = {
    "OPENAI_API_KEY": "sk-qa5-openai-value",
    "GITHUB_TOKEN": "ghp_qa5tokenvalue",
    "MY_TOKEN": "http://qa5-token-as-url",
    "X_PASSWORD": "qa5-password-value",
}

LEAK = """
version: 1
name: leak
requests:
  - name: a
    benchmark: {id: exact_match, dataset: qa.jsonl, system_prompt: "${OPENAI_API_KEY}"}
    harness: {id: command, command: "${GITHUB_TOKEN}"}
    model: {id: m, base_url: "${MY_TOKEN}", params: {token_x: "${X_PASSWORD}", temperature: 0}}
"""


def _span(rel: object) -> Span:
    return Span("f.yaml", 1, 1)


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "HF_TOKEN",
        "CLIENT_SECRET",
        "DB_PASSWORD",
        "PASSWORD_FILE",
        "MYPASSWD",
        "AWS_SECRET_ACCESS_KEY",
        "OPENAI_APIKEY",
        "my_jwt",
        "TOKEN",
        "Password",
    ],
)
def test_secret_looking_names(name: str) -> None:
    # contract R6
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["MODEL_BASE_URL", "MAX_TOKENS", "TOKENIZER", "WRAP_API_KEY", "HOME", "N"])
def test_ordinary_names(name: str) -> None:
    # contract R6
    assert not is_secret_name(name)


def test_secret_name_at_an_ordinary_key_stays_a_reference() -> None:
    # contract R6
    data = {"system_prompt": "${OPENAI_API_KEY}", "dataset": "${DATA}"}
    out, info = interpolate(
        data, {"OPENAI_API_KEY": "sk-1", "DATA": "d.jsonl"}, span_of=_span, abs_prefix=("benchmark", "params")
    )
    assert out == {"system_prompt": "${OPENAI_API_KEY}", "dataset": "d.jsonl"}
    assert info.secret_refs == {"OPENAI_API_KEY"} and info.env_inputs == {"DATA"}
    assert info.substituted == {("dataset",): "DATA"} and not info.diagnostics


def test_unset_secret_name_is_a_warning_not_an_error() -> None:  # same path as sensitive keys
    _, info = interpolate({"command": "${GITHUB_TOKEN}"}, {}, span_of=_span, abs_prefix=("harness", "params"))
    assert [(d.code, d.severity) for d in info.diagnostics] == [("W0302", "warning")]
    assert info.secret_refs == {"GITHUB_TOKEN"}


def test_ordinary_names_are_still_substituted() -> None:  # contract R6
    out, info = interpolate({"max_tokens": "${MAX_TOKENS}"}, {"MAX_TOKENS": "64"}, span_of=_span)
    assert out == {"max_tokens": "64"} and info.env_inputs == {"MAX_TOKENS"} and not info.secret_refs


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    # contract R6
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out + err


def test_no_view_and_no_plan_file_holds_the_value(
    write: Writer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    # contract R6
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    write("qa.jsonl", '{"id": "q1", "question": "q", "answer": "a"}\n')
    write("leak.yaml", LEAK)
    texts = [
        _run(capsys, ["compile", "--dry-run", "leak.yaml"]),
        _run(capsys, ["compile", "--dry-run", "--full", "--format", "json", "leak.yaml"]),
        _run(capsys, ["compile", "--dry-run", "--full", "--format", "yaml", "leak.yaml"]),
        _run(capsys, ["compile", "--plans", "--full", "leak.yaml"]),
        *(_run(capsys, ["explain", "leak.yaml", "a", f]) for f in ("benchmark", "harness", "model")),
        _run(capsys, ["explain", "--format", "json", "leak.yaml", "a", "model"]),
    ]
    _run(capsys, ["compile", "leak.yaml", "-o", "plan.json"])
    texts.append((project / "plan.json").read_text(encoding="utf-8"))
    for text in texts:
        for value in SECRETS.values():
            assert value not in text
    dry = json.loads(texts[1])
    request = json.dumps(dry)
    for name in SECRETS:
        assert f"${{{name}}}" in request  # shown as the reference
    assert "${OPENAI_API_KEY}" in texts[0] and "via ${OPENAI_API_KEY}" not in texts[0]
    assert "metadata.secret_refs" in texts[0]


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ('execution: {max_retries: "${DB_PASSWORD}"}', "spec.yaml"),
        ('execution { max_retries = secret("DB_PASSWORD") }', "spec.acx"),
    ],
)
def test_a_secret_reference_in_a_non_string_field_is_an_error_not_a_dropped_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, source: str, name: str
) -> None:
    # contract R6
    # Before: the request silently vanished ("0 request(s)", exit 0).
    monkeypatch.setenv("DB_PASSWORD", "sekret-31337")
    (tmp_path / "qa.jsonl").write_text('{"id": "a", "question": "1?", "answer": "1"}\n')
    if name.endswith(".yaml"):
        text = (
            "version: 1\nname: s\nrequests:\n  - name: a\n"
            "    benchmark: {id: exact_match, dataset: qa.jsonl}\n"
            "    harness: {id: command, command: echo}\n"
            f"    {source}\n"
        )
    else:
        text = (
            'run a {\n  benchmark exact_match { dataset = "qa.jsonl" }\n  harness command { command = "echo" }\n'
            f"  {source}\n}}\n"
        )
    (tmp_path / name).write_text(text)
    assert main(["compile", "--dry-run", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert "E0204" in err and "the secret reference `${DB_PASSWORD}`" in err and "sekret-31337" not in err


def test_a_malformed_reference_is_reported_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # contract R6
    (tmp_path / "s.yaml").write_text(
        "version: 1\nname: s\nrequests:\n  - name: a\n"
        "    benchmark: {id: exact_match, dataset: qa.jsonl}\n"
        "    harness: {id: command, command: echo}\n"
        '    execution: {max_retries: "${X:-5}"}\n'
    )
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("error[") == 1 and "E0212" in err


def test_validate_reports_every_secret_named_reference_in_a_non_string_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # contract R6
    # Known from the variable's name alone: the CI gate (validate/check) catches what compile would.
    (tmp_path / "s.yaml").write_text(
        "version: 1\nname: s\nrequests:\n  - name: a\n"
        '    benchmark: {id: exact_match, dataset: qa.jsonl, case_sensitive: "${CASE_SECRET}"}\n'
        "    harness: {id: command, command: echo}\n"
        '    execution: {max_retries: "${RETRY_TOKEN}", run_timeout_seconds: "${TIMEOUT_SECRET}"}\n'
    )
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "`requests[0].benchmark.case_sensitive` cannot take the secret reference `${CASE_SECRET}`" in err
    for name in ("RETRY_TOKEN", "TIMEOUT_SECRET"):  # execution: shown in events and logs
        assert f"cannot be the secret reference `${{{name}}}`" in err
