"""The VS Code extension's tests: the TextMate grammar run by vscode-textmate + vscode-oniguruma
(the engine VS Code itself uses) under Node, and the .vsix built by @vscode/vsce.

The npm packages are pinned by ``editors/vscode/package-lock.json`` and installed into
``editors/vscode/node_modules`` (``npm ci``, by scripts/test.sh). Without them these tests skip
loudly; ``ACX_REQUIRE_EDITORS=1`` (set by .ci/run) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTENSION = REPO / "editors" / "vscode"
TOKENIZE_JS = EXTENSION / "test" / "tokenize.js"
NODE_MODULES = EXTENSION / "node_modules"

# One TextMate token: [start, end) on its line and its scope stack, outermost first.
Token = dict[str, Any]
Tokenize = Callable[[list[Path]], dict[Path, list[list[Token]]]]


def _missing(reason: str) -> None:
    if os.environ.get("ACX_REQUIRE_EDITORS") == "1":
        pytest.fail(f"{reason} (ACX_REQUIRE_EDITORS=1)")
    pytest.skip(f"!!! editor tests SKIPPED: {reason} !!!")


@pytest.fixture(scope="session")
def node() -> str:
    found = shutil.which("node")
    if found is None:
        _missing("no `node` on PATH (scripts/test.sh installs Debian's nodejs)")
    assert found is not None
    for package in ("vscode-textmate", "vscode-oniguruma", "@vscode/vsce", "esbuild", "vscode-languageclient"):
        if not (NODE_MODULES / package / "package.json").is_file():
            _missing(f"{package} is not installed: run `npm ci` in {EXTENSION}")
    return found


def run_tokenizer(node: str, files: list[Path], *, check: bool = False) -> dict[str, Any]:
    args = [node, str(TOKENIZE_JS), *(["--check"] if check else []), *map(str, files)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"tokenize.js failed ({proc.returncode}):\n{proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.fixture(scope="session")
def tokenize(node: str) -> Tokenize:
    """Tokenize files in one Node process; results keyed by the paths given."""

    def _tokenize(files: list[Path]) -> dict[Path, list[list[Token]]]:
        out = run_tokenizer(node, files)["files"]
        return {path: out[str(path)] for path in files}

    return _tokenize
