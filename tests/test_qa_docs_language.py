"""QA: the first spec of docs/language.md and its YAML twin are valid and are examples/nightly.*."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from acx.compiler import validate_document
from acx.compiler._acx_lower import load_acx_document
from acx.compiler._yaml import load_yaml_document, parse_yaml_text

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")


def _block(after: str, lang: str) -> str:
    start = DOC.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(DOC, start)
    assert match is not None
    return match.group(1)


def test_yaml_twin_snippet_is_valid_and_equals_examples_nightly_yaml() -> None:
    snippet = _block("It lowers to exactly this orchestration file", "yaml")
    doc = parse_yaml_text(snippet, "lang1.yaml")
    assert validate_document(doc) == []
    assert doc.data == load_yaml_document(str(ROOT / "examples" / "nightly.yaml")).data


def test_first_spec_snippet_lowers_to_examples_nightly(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "common.acx", tmp_path / "common.acx")
    spec = tmp_path / "nightly.acx"
    spec.write_text(_block("## A first spec", "acx"), encoding="utf-8")
    assert load_acx_document(str(spec)).data == load_acx_document(str(ROOT / "examples" / "nightly.acx")).data


def test_diagnostics_example_is_what_acx_check_prints(tmp_path: Path) -> None:
    import io
    import os
    from contextlib import redirect_stderr

    from acx.cli import main

    spec = tmp_path / "spec.acx"
    spec.write_text(
        'run qa {\n  benchmark exact_match { dataset = "qa.jsonl" }\n  execution {\n    max_retries =\n  }\n'
        '  harness command { command = "echo" }\n  environment host_process {\n'
        "    evaluation_environment_mode = none\n      run_network_policy = no_netwrk\n  }\n}\n",
        encoding="utf-8",
    )
    section = DOC[DOC.index("## Diagnostics") :]
    examples = re.findall(r"```console\n\$ acx check spec.acx\n(.*?)```", section, re.S)
    assert len(examples) == 2
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for expected in examples:
            err = io.StringIO()
            with redirect_stderr(err):
                assert main(["check", "spec.acx"]) == 2
            assert err.getvalue() == expected
            spec.write_text(spec.read_text(encoding="utf-8").replace("max_retries =\n", "max_retries = 2\n"))
    finally:
        os.chdir(cwd)
