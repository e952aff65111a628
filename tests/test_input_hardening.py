"""Bad input never crashes or hangs (issue 11 items 7, 8, 9, 10): every class of hostile input ends
in exit 2 with a located diagnostic, in bounded time.

Each test covers a class across the formats acx reads (YAML, JSON, JSONL datasets, Harbor TOML,
.acx), through the CLI entry point in-process. Timing is not asserted here (no timed tests); the
fuzz test (tests/test_input_fuzz.py) measures time and memory in a resource-limited subprocess.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import pytest

from acx.cli import main
from acx.inputs import MAX_EXPANDED_NODES, MAX_LOOP_ITERATIONS, MAX_NESTING_DEPTH

HEAD = "version: 1\nname: q\nrequests:\n  - name: q\n"
REQ = (
    "    benchmark: {id: exact_match, dataset: d.jsonl}\n"
    '    harness: {id: command, command: "true"}\n'
    "    environment: {id: host_process}\n"
)
ACX_RUN = 'run q {{ benchmark exact_match {{ dataset = "d.jsonl" }} harness command {{ command = "true" }} {extra} }}\n'
EXAMPLE_TASK = Path(__file__).resolve().parents[1] / "examples" / "harbor" / "hello-workdir"


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    """Exit code and the first JSON diagnostic of ``acx check``/``compile`` (``--format json``)."""
    code = main(args)
    out, err = capsys.readouterr()
    assert "internal error" not in err + out and "Traceback" not in err + out
    return code, {"text": err + out}


def _expect(args: list[str], capsys: pytest.CaptureFixture[str], code: str, *, located: bool = True) -> str:
    rc, got = _run(args, capsys)
    text = str(got["text"])
    assert rc == 2, text
    assert f"error[{code}]" in text, text
    if located:  # file:line:col or a field path before the code
        head = text.split(f"error[{code}]")[0].splitlines()[-1]
        assert head.rstrip(": ").strip(), text
    return text


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text('{"id": "1", "question": "1+1", "answer": "2"}\n')
    return tmp_path


# -- item 7: nesting ≥ 1000, recursive aliases, huge integers, ~nosuchuser: exit 2, never 70 ----------


DEEP = 1200


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("list.yaml", HEAD + REQ + "    metadata: " + "[" * DEEP + "]" * DEEP + "\n"),
        ("map.yaml", HEAD + REQ + "x: " + "{a: " * DEEP + "1" + "}" * DEEP + "\n"),
        ("block.yaml", HEAD + REQ + "x:\n" + "".join(" " * (i + 1) + "k:\n" for i in range(600))),
        ("list.json", '{"version": 1, "x": ' + "[" * DEEP + "]" * DEEP + "}"),
        ("map.json", '{"version": 1, "x": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}"),
        ("list.acx", ACX_RUN.format(extra="metadata = " + "[" * DEEP + "]" * DEEP)),
        ("block.acx", ACX_RUN.format(extra="a { " * DEEP + "}" * DEEP)),
        ("call.acx", ACX_RUN.format(extra="x = " + "env(" * DEEP + ")" * DEEP)),
    ],
)
@pytest.mark.parametrize("command", [["check"], ["compile", "--dry-run"]])
def test_deep_nesting_is_a_located_limit_error(
    work: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, command: list[str]
) -> None:
    # contract R12; issue 11 item 7 (RecursionError → exit 70 before)
    (work / name).write_text(text)
    if command == ["check"] and not name.endswith(".acx"):
        command = ["validate"]
    out = _expect([*command, name], capsys, "E0219")
    assert f"{name}:" in out and str(MAX_NESTING_DEPTH) in out


@pytest.mark.parametrize(
    "text",
    [
        "x: &a [*a]\n",
        "x: &a {k: *a}\n",
        "x: &a {<<: *a}\n",
        "x: &a [1, [2, [3, *a]]]\n",
    ],
)
def test_recursive_yaml_alias_is_located(work: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    # issue 11 item 7: RecursionError before
    (work / "s.yaml").write_text(HEAD + REQ + text)
    out = _expect(["compile", "--dry-run", "s.yaml"], capsys, "E0219")
    assert "recursive alias" in out and "s.yaml:8:" in out


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("int.json", '{"version": 1, "name": "q", "requests": [], "task_concurrency": ' + "9" * 5000 + "}"),
        ("int.yaml", HEAD + REQ + "task_concurrency: " + "9" * 5000 + "\n"),
        ("hex.yaml", HEAD + REQ + "task_concurrency: 0x" + "f" * 5000 + "\n"),
        ("int.acx", "orchestration q { task_concurrency = " + "9" * 5000 + " }\n"),
    ],
)
def test_huge_integers_are_located(work: Path, capsys: pytest.CaptureFixture[str], name: str, text: str) -> None:
    # issue 11 item 7: ValueError (4,300-digit limit) → exit 70 before
    (work / name).write_text(text)
    out = _expect(["compile", "--dry-run", name], capsys, "E0219")
    assert f"{name}:" in out and "integer" in out


def _spec_with_dataset(work: Path, dataset: str) -> str:
    (work / "s.yaml").write_text(HEAD + REQ.replace("dataset: d.jsonl", f"dataset: {json.dumps(dataset)}"))
    return "s.yaml"


@pytest.mark.parametrize("dataset", ["~nosuchuser/x", "~nosuchuser"])
def test_unknown_user_in_dataset_path_is_not_found(
    work: Path, capsys: pytest.CaptureFixture[str], dataset: str
) -> None:
    # issue 11 item 7: Path.expanduser raised RuntimeError → exit 70 before
    spec = _spec_with_dataset(work, dataset)
    out = _expect(["compile", spec, "-o", "plan.json"], capsys, "E0401")
    assert "benchmark.params.dataset" in out


@pytest.mark.parametrize(
    "line",
    [
        '{"id": "a", "question": "q", "answer": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"id": "a", "question": "q", "answer": ' + '{"k": ' * 3000 + "1" + "}" * 3000 + "}",
        '{"id": "a", "question": "q", "answer": ' + "[" * 150 + "]" * 150 + "}",
    ],
)
def test_deep_jsonl_records_are_located(work: Path, capsys: pytest.CaptureFixture[str], line: str) -> None:
    # issue 11 item 7 (JSONL): RecursionError → exit 70 before
    (work / "deep.jsonl").write_text(line + "\n")
    spec = _spec_with_dataset(work, "deep.jsonl")
    out = _expect(["compile", spec, "-o", "plan.json"], capsys, "E0219")
    assert "deep.jsonl:1:" in out


# -- item 8: alias bombs, let-doubling and string bombs, huge loops: a limit, located, at once -------


def test_yaml_alias_bomb_is_refused_before_expansion(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 11 item 8: > 1 GiB and > 40 s before
    names = "abcdefghij"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in itertools.pairwise(names)
    )
    (work / "s.yaml").write_text(HEAD + REQ + bomb)
    out = _expect(["compile", "--dry-run", "s.yaml"], capsys, "E0219")
    assert f"{MAX_EXPANDED_NODES:,}" in out and "s.yaml:" in out


def test_yaml_merge_key_bomb_is_refused(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 11 item 8: the same class through `<<` merge keys
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: {i}" for i in range(10)) + "}"]
    for i in range(1, 9):
        lines.append(f"m{i}: &m{i} [" + ", ".join([f"*m{i - 1}"] * 10) + "]")
    (work / "s.yaml").write_text(HEAD + REQ + "\n".join(lines) + "\n")
    _expect(["compile", "--dry-run", "s.yaml"], capsys, "E0219")


def _acx_bomb(kind: str) -> str:
    if kind == "string":
        lets = 'let a0 = "xxxxxxxxxx"\n' + "".join(f'let a{i + 1} = "${{a{i}}}${{a{i}}}"\n' for i in range(40))
        return lets + ACX_RUN.format(extra="output { run_name = a40 }")
    if kind == "list":
        lets = 'let a0 = ["x"]\n' + "".join(f"let a{i + 1} = [a{i}, a{i}, a{i}]\n" for i in range(40))
        return lets + ACX_RUN.format(extra="metadata = a40")
    if kind == "map":
        lets = "let a0 = {x = 1}\n" + "".join(f"let a{i + 1} = {{ a = a{i}, b = a{i} }}\n" for i in range(40))
        return lets + ACX_RUN.format(extra="metadata = a40")
    if kind == "chain":  # lets nest values deeper than the text does
        lets = 'let a0 = "x"\n' + "".join(f"let a{i + 1} = [a{i}]\n" for i in range(MAX_NESTING_DEPTH + 20))
        return lets + ACX_RUN.format(extra=f"metadata = a{MAX_NESTING_DEPTH + 20}")
    if kind == "loop":
        items = ", ".join(str(i) for i in range(MAX_LOOP_ITERATIONS + 1))
        return f'orchestration q {{ for x in [{items}] {{ run "r${{x}}" {{ harness none }} }} }}\n'
    assert kind == "nested_loop"
    items = ", ".join(str(i) for i in range(200))
    return (
        f"let l = [{items}]\n"
        'orchestration q { for x in l { for y in l { run "r${x}-${y}" { harness none } } } }\n'
    )


@pytest.mark.parametrize("kind", ["string", "list", "map", "chain", "loop", "nested_loop"])
def test_acx_expansion_bombs_hit_a_documented_limit(work: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    # issue 11 item 8: > 40 s and up to 3.7 GiB before
    (work / "s.acx").write_text(_acx_bomb(kind))
    out = _expect(["check", "s.acx"], capsys, "E0219")
    assert "s.acx:" in out and "docs/errors.md#E0219" in out


def test_a_long_line_frames_in_linear_time(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 11 item 8: the URL-password mask was quadratic (64 KB line ≈ 10 s, 10 MB hung); the
    # frame is now a window of the line, masked with its context.
    from acx.diagnostics import Diagnostic, Span, render_text

    line = "    bad: http://a:" + "b" * 900_000
    out = render_text([Diagnostic("E0203", "m", Span("x.yaml", 1, 5))], sources={"x.yaml": line})
    assert max(len(ln) for ln in out.splitlines()) < 300
    secret = '{"api_key": "' + "S" * 500 + '", ' + '"pad": "' + "p" * 400 + '", "zz": 1}'
    col = secret.index('"zz"') + 1
    out = render_text([Diagnostic("E0203", "m", Span("x.json", 1, col))], sources={"x.json": secret})
    assert "SSSS" not in out  # the secret's tail, cut from its key, is still masked


def test_an_oversized_document_is_refused_before_parsing(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 11 item 8 (file size): a 10 MB line hung the frame masker before
    (work / "s.yaml").write_text(HEAD + REQ + "    bad: http://a:" + "b" * 3_000_000 + "\n")
    (work / "s.acx").write_text(ACX_RUN.format(extra='x = "' + "b" * 300_000 + '"'))
    for name in ("s.yaml", "s.acx"):
        out = _expect(["compile", "--dry-run", name], capsys, "E0219")
        assert "above the limit" in out


# -- item 9: non-regular files are refused with their own code, before any read --------------------


def _special(work: Path, kind: str, name: str) -> Path:
    path = work / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")
    return path


KINDS = ["fifo", "dir", "device"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("suffix", [".yaml", ".json", ".acx"])
def test_non_regular_spec_is_e0218(work: Path, capsys: pytest.CaptureFixture[str], kind: str, suffix: str) -> None:
    # issue 11 item 9: a FIFO hung check/validate/compile; a directory was "not found"
    _special(work, kind, "s" + suffix)
    for command in (["compile", "--dry-run"], ["check" if suffix == ".acx" else "validate"]):
        _expect([*command, "s" + suffix], capsys, "E0218", located=False)


@pytest.mark.parametrize("kind", KINDS)
def test_non_regular_config_and_import_are_e0218(work: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    # issue 11 item 9
    (work / "s.yaml").write_text(HEAD + REQ)
    _special(work, kind, "c.yaml")
    out = _expect(["compile", "--dry-run", "s.yaml", "--config", "c.yaml"], capsys, "E0218")
    assert "--config" in out
    _special(work, kind, "lib.acx")
    (work / "s.acx").write_text('import "lib.acx"\n' + ACX_RUN.format(extra=""))
    out = _expect(["check", "s.acx"], capsys, "E0218")
    assert "s.acx:1:8" in out


@pytest.mark.parametrize("kind", KINDS)
def test_non_regular_dataset_is_e0218(work: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    # issue 11 item 9: a dataset symlinked to /dev/zero was read without bound
    _special(work, kind, "x.jsonl")
    spec = _spec_with_dataset(work, "x.jsonl")
    out = _expect(["compile", spec, "-o", "plan.json"], capsys, "E0218")
    assert "benchmark.params.dataset" in out


# -- item 10: a Harbor task uses only files inside its directory ------------------------------------


def _task(work: Path) -> Path:
    task = work / "tasks" / "hello"
    shutil.copytree(EXAMPLE_TASK, task)
    return task


def _harbor_spec(work: Path) -> str:
    (work / "h.yaml").write_text(
        HEAD + "    benchmark: {id: harbor, path: tasks}\n    harness: {id: oracle}\n    environment: {id: docker}\n"
    )
    return "h.yaml"


def _link_out(task: Path, rel: str, target: Path) -> None:
    path = task / rel
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize(
    "rel", ["instruction.md", "task.toml", "tests", "tests/test.sh", "tests/helper.py", "environment", "solution"]
)
def test_harbor_task_files_must_resolve_inside_the_task(
    work: Path, capsys: pytest.CaptureFixture[str], rel: str
) -> None:
    # issue 11 item 10: a symlinked instruction.md put a host file in the prompt; task.toml echoed
    # /etc lines in frames; a symlinked tests/ was uploaded
    outside = work / "host"
    outside.mkdir()
    (outside / "test.sh").write_text("#!/bin/sh\necho HOST-SECRET-LINE\n")
    (outside / "secret.txt").write_text("HOST-SECRET-LINE = [\n")
    task = _task(work)
    target = outside if rel in ("tests", "environment", "solution") else outside / "secret.txt"
    if rel == "tests/test.sh":
        target = outside / "test.sh"
    _link_out(task, rel, target)
    out = _expect(["compile", _harbor_spec(work), "-o", "plan.json"], capsys, "E0414")
    assert "HOST-SECRET-LINE" not in out and "outside the task directory" in out
    assert not (work / "plan.json").exists()


def test_harbor_links_inside_the_task_are_fine(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 11 item 10: the rule is "resolves inside", not "no symlinks"
    task = _task(work)
    (task / "docs").mkdir()
    (task / "docs" / "instruction.md").write_text((task / "instruction.md").read_text())
    _link_out(task, "instruction.md", Path("docs/instruction.md"))
    rc, got = _run(["compile", _harbor_spec(work), "-o", "plan.json"], capsys)
    assert rc == 0, got["text"]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_harbor_task_files_that_are_not_regular_are_e0218(
    work: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    # issue 11 item 9 (task files): a FIFO instruction.md would hang the load
    task = _task(work)
    (task / "instruction.md").unlink()
    if kind == "fifo":
        os.mkfifo(task / "instruction.md")
    else:
        (task / "instruction.md").symlink_to("/dev/null")  # outside too: E0414 wins, checked first
    out = _expect(["compile", _harbor_spec(work), "-o", "plan.json"], capsys, "E0218" if kind == "fifo" else "E0414")
    assert "instruction.md" in out


@pytest.mark.parametrize(
    "toml",
    [
        "x = " + "[" * 1200 + "]" * 1200,
        "x = " + "{a = " * 1200 + "1" + "}" * 1200,
        "[extra." + ".".join(["a"] * 1200) + "]\nb = 1",
        "x = " + "9" * 5000,
        "x = 0x" + "f" * 5000,
    ],
)
def test_harbor_toml_limits_are_located(work: Path, capsys: pytest.CaptureFixture[str], toml: str) -> None:
    # issue 11 item 7 (TOML): RecursionError / ValueError → exit 70 before
    task = _task(work)
    extra = toml if toml.startswith("[") else "[extra]\n" + toml
    (task / "task.toml").write_text((task / "task.toml").read_text() + "\n" + extra + "\n")
    out = _expect(["compile", _harbor_spec(work), "-o", "plan.json"], capsys, "E0219")
    assert "task.toml:" in out


# -- item 7: command-line JSON and damaged run records are input too -------------------------------


@pytest.mark.parametrize("flag", ["--execution-params", "--runtime-params"])
@pytest.mark.parametrize(
    "value",
    [
        '{"a": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"a": ' + "[" * 300 + "]" * 300 + "}",
        '{"max_retries": ' + "9" * 5000 + "}",
        '{"max_retries": ' + "9" * 200 + "}",
    ],
)
def test_command_line_json_has_the_input_limits(
    work: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    # issue 11 item 7: RecursionError / ValueError → exit 70 before
    (work / "s.yaml").write_text(HEAD + REQ)
    out = _expect(["compile", "--dry-run", "s.yaml", flag, value], capsys, "E0219")
    assert f"{flag}: error[E0219]" in out


@pytest.mark.parametrize(
    "record", ['{"a": ' + "[" * 5000 + "]" * 5000 + "}", '{"a": ' + "9" * 5000 + "}"], ids=["deep", "bigint"]
)
@pytest.mark.parametrize("command", [["results", "show"], ["run", "--resume"], ["report"]])
def test_a_damaged_run_record_is_e0618(
    work: Path, capsys: pytest.CaptureFixture[str], record: str, command: list[str]
) -> None:
    # issue 11 item 7: a run_info.json nested past the decoder crashed results/resume/report
    run = work / "run"
    (run / ".acx").mkdir(parents=True)
    (run / "run_info.json").write_text(record)
    _expect([*command, "run"], capsys, "E0618")


@pytest.mark.parametrize("kind", ["file", "fifo", "device"])
def test_schema_out_that_is_not_a_directory_is_e0217(work: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    # issue 11 item 7: `acx schema --out` onto a file in the way was exit 70 (FileExistsError)
    target = work / "out"
    if kind == "file":
        target.write_text("x")
    else:
        _special(work, kind, "out")
    _expect(["schema", "--out", "out"], capsys, "E0217")


def test_fmt_stdin_is_bounded(work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 11 item 8/9: `acx fmt - < /dev/zero` read without bound
    import io

    from acx.inputs import MAX_ACX_BYTES

    monkeypatch.setattr("sys.stdin", io.StringIO("\0" * (MAX_ACX_BYTES + 10)))
    out = _expect(["fmt", "-"], capsys, "E0219")
    assert "<stdin>" in out
