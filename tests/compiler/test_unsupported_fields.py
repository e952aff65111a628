"""Nothing accepted and silently ignored (issue 11 item 16).

AgentCompass fields acx reads but does not implement are refused with a located E0311 that says
they are not supported — from every layer that can set them — while the value acx behaves as is
still accepted. A recipe declared in (or imported into) a spec is applied, as docs/language.md
promises, instead of being checked and dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acx.cli import main

SPEC = """version: 1
name: q
requests:
  - name: q
    benchmark: {{id: exact_match, dataset: d.jsonl{bench}}}
    harness: {{id: command, command: "true"}}
    environment: {{id: host_process}}
{extra}"""

#: (section written where, YAML fragment, field path in the message)
CASES = [
    ("request", "    execution: {enable_analysis: true}\n", "execution.enable_analysis"),
    ("request", "    execution: {analysis_params: {analyzers: [x]}}\n", "execution.analysis_params"),
    ("defaults", "defaults:\n  execution: {enable_analysis: true}\n", "execution.enable_analysis"),
    ("config", "execution: {enable_analysis: true}\n", "execution.enable_analysis"),
    ("config", "execution: {analysis_params: {exclude_analyzers: [y]}}\n", "execution.analysis_params"),
    ("config", "runtime: {log_file: /tmp/x.log}\n", "runtime.log_file"),
    ("config", "runtime: {data_dir: /srv/data}\n", "runtime.data_dir"),
    ("config", "runtime: {auto_install_dependencies: true}\n", "runtime.auto_install_dependencies"),
    ("orchestration", "runtime: {log_file: run.log}\n", "runtime.log_file"),
    ("bench", ", category_hierarchy: {all: [a, b]}", "benchmark.category_hierarchy"),
    (
        "config",
        "benchmarks: {exact_match: {category_hierarchy: {all: [a]}}}\n",
        "benchmarks.exact_match.category_hierarchy",
    ),
]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "d.jsonl").write_text('{"id": "1", "question": "1+1", "answer": "2"}\n')
    return tmp_path


def _write(work: Path, where: str, fragment: str) -> list[str]:
    extra = fragment if where in ("request", "defaults", "orchestration") else ""
    bench = fragment if where == "bench" else ""
    (work / "s.yaml").write_text(SPEC.format(bench=bench, extra=extra))
    args = ["s.yaml"]
    if where == "config":
        (work / "c.yaml").write_text(fragment)
        args += ["--config", "c.yaml"]
    return args


@pytest.mark.parametrize(("where", "fragment", "field"), CASES)
def test_unsupported_field_is_a_located_e0311(
    work: Path, capsys: pytest.CaptureFixture[str], where: str, fragment: str, field: str
) -> None:
    # contract R12; issue 11 item 16: these were accepted without effect
    args = _write(work, where, fragment)
    assert main(["compile", "--dry-run", *args]) == 2
    err = capsys.readouterr().err
    assert "error[E0311]" in err and f"`{field}` is not supported by acx" in err, err
    located = "c.yaml:" if where == "config" else "s.yaml:"
    assert located in err.split("error[E0311]")[0], err


@pytest.mark.parametrize(("where", "fragment", "field"), CASES)
def test_validate_reports_unsupported_fields_too(
    work: Path, capsys: pytest.CaptureFixture[str], where: str, fragment: str, field: str
) -> None:
    # issue 11 item 16: `acx validate` (CI) must not call a file valid that compile refuses
    args = _write(work, where, fragment)
    target = args[-1]
    assert main(["validate", target]) == 2
    out = capsys.readouterr()
    assert f"{target}:" in out.err + out.out and "E0311" in out.err + out.out


def test_check_reports_unsupported_fields_in_acx(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 11 item 16: the same in .acx
    (work / "s.acx").write_text(
        'run q { benchmark exact_match { dataset = "d.jsonl" } harness none\n  execution { enable_analysis = true } }\n'
    )
    assert main(["check", "s.acx"]) == 2
    assert "s.acx:2:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--execution-params", {"enable_analysis": True}, "execution.enable_analysis"),
        ("--runtime-params", {"log_file": "x.log"}, "runtime.log_file"),
    ],
)
def test_unsupported_field_from_the_command_line_names_the_flag(
    work: Path, capsys: pytest.CaptureFixture[str], flag: str, value: dict[str, object], field: str
) -> None:
    # issue 11 item 16: the CLI layer too
    args = _write(work, "request", "")
    assert main(["compile", "--dry-run", *args, flag, json.dumps(value)]) == 2
    err = capsys.readouterr().err
    assert "error[E0311]" in err and flag in err and field in err


@pytest.mark.parametrize(
    "fragment",
    [
        "    execution: {enable_analysis: false, analysis_params: {}}\n",
        "runtime: {auto_install_dependencies: false, data_dir: data, log_file: null}\n",
    ],
)
def test_the_value_acx_behaves_as_is_accepted(work: Path, capsys: pytest.CaptureFixture[str], fragment: str) -> None:
    # issue 11 item 16: only values with no effect are refused; what acx does is fine to say
    where = "request" if fragment.startswith("    ") else "config"
    args = _write(work, where, fragment)
    assert main(["compile", "--dry-run", *args]) == 0, capsys.readouterr().err


def test_enable_analysis_defaults_to_what_acx_does(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 11 item 16: the dry run no longer claims analysis is enabled
    args = _write(work, "request", "")
    assert main(["compile", "--dry-run", *args, "--format", "json", "--full"]) == 0
    out = json.loads(capsys.readouterr().out)
    (request,) = out["requests"]
    assert request["execution"]["enable_analysis"] is False


# -- recipes declared in a spec are applied ------------------------------------------------------

ACX = """{imports}
recipe {rid} {{
  description = "spec-local budget"
  match {{ benchmark = "exact_match" }}
  set {{ run_timeout = 7s }}
}}
run q {{
  benchmark exact_match {{ dataset = "d.jsonl" }}
  harness command {{ command = "true" }}
  environment host_process {{ }}
  execution {{ enabled_recipes = {enabled} }}
}}
"""


def _plans(work: Path, capsys: pytest.CaptureFixture[str], spec: str) -> dict[str, object]:
    assert main(["compile", spec, "-o", "plan.json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return json.loads((work / "plan.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("imported", [False, True])
@pytest.mark.parametrize("enabled", ["[]", '["spec_budget"]'])
def test_a_recipe_declared_in_or_imported_into_a_spec_is_applied(
    work: Path, capsys: pytest.CaptureFixture[str], imported: bool, enabled: str
) -> None:
    # contract RC1, RC2; issue 11 item 16: the recipe was checked but never applied
    if imported:
        lib = ACX.split("run q")[0].format(imports="", rid="spec_budget")
        (work / "lib.acx").write_text(lib)
        body = "run q" + ACX.split("run q", 1)[1].format(enabled=enabled)
        (work / "s.acx").write_text('import "lib.acx"\n' + body)
    else:
        (work / "s.acx").write_text(ACX.format(imports="", rid="spec_budget", enabled=enabled))
    program = _plans(work, capsys, "s.acx")
    text = json.dumps(program)
    assert '"spec_budget"' in text
    assert '"run_timeout_seconds": 7' in text.replace("7.0", "7")


def test_a_spec_recipe_that_repeats_a_builtin_id_is_an_error(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # contract RC1: ids are unique across built-ins and spec recipes
    from acx.compiler._recipes import builtin_registry

    builtin = builtin_registry().ids()[0]
    (work / "s.acx").write_text(ACX.format(imports="", rid=builtin, enabled="[]"))
    assert main(["compile", "s.acx", "-o", "plan.json"]) == 2
    assert "E0430" in capsys.readouterr().err
