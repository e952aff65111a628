"""Every shipped example is canonical (`acx fmt --check`), valid (`acx check`) and compiles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from acx.cli import main
from acx.compiler import compile_orchestration

ROOT = Path(__file__).parent.parent / "examples"
#: examples/plugin needs its package installed: tests/test_plugin_example.py checks it that way.
EXAMPLES = sorted(p for p in ROOT.rglob("*.acx") if "plugin" not in p.relative_to(ROOT).parts)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_fmt_clean_and_valid(path: Path) -> None:
    assert main(["fmt", "--check", str(path)]) == 0
    assert main(["check", str(path)]) == 0


#: Orchestration specs among the examples (run-config.* are config layers; plugin: see above).
SPECS = sorted(
    p
    for p in (*ROOT.rglob("*.acx"), *ROOT.rglob("*.yaml"))
    if "plugin" not in p.relative_to(ROOT).parts
    and not p.name.startswith(("run-config", "common"))
    and "tests" not in p.relative_to(ROOT).parts
)
_VAR = re.compile(r'\$\{(\w+)|env\("(\w+)"\)|secret\("(\w+)"\)')


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_compiles(path: Path, capsys) -> None:
    # contract R12: no shipped example trips a compile-time refusal (e.g. E0306, a model harness
    # without a model); the variables it references are given placeholder values.
    names = {n for m in _VAR.findall(path.read_text(encoding="utf-8")) for n in m if n}
    environ = {n: "http://127.0.0.1:9/v1" for n in names}
    compiled = compile_orchestration(str(path), environ=environ, cwd=str(path.parent))
    assert compiled.orchestration.requests
