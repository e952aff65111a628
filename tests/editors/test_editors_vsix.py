"""The VS Code extension: its manifest, the server command it starts, and the .vsix that
``@vscode/vsce package`` builds from it (offline, from the installed npm packages; issue 27)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from .conftest import EXTENSION, NODE_MODULES

MANIFEST = json.loads((EXTENSION / "package.json").read_text(encoding="utf-8"))


def test_manifest_contributes_the_language_grammar_and_settings() -> None:
    contributes = MANIFEST["contributes"]
    (language,) = contributes["languages"]
    assert language["id"] == "acx" and language["extensions"] == [".acx"]
    assert (EXTENSION / language["configuration"]).is_file()
    (grammar,) = contributes["grammars"]
    assert grammar["language"] == "acx"
    assert json.loads((EXTENSION / grammar["path"]).read_text(encoding="utf-8"))["scopeName"] == grammar["scopeName"]
    settings = contributes["configuration"]["properties"]
    assert settings["acx.path"]["default"] == "acx" and settings["acx.path"]["type"] == "string"
    assert settings["acx.lsp.enabled"] == {**settings["acx.lsp.enabled"], "type": "boolean", "default": True}
    assert MANIFEST["activationEvents"] == ["onLanguage:acx"]
    assert MANIFEST["main"] == "./dist/extension.js"


def test_engines_match_the_language_client(node: str) -> None:
    """The client library states the VS Code it needs; the extension must not claim less."""
    client = json.loads((NODE_MODULES / "vscode-languageclient" / "package.json").read_text(encoding="utf-8"))
    assert MANIFEST["engines"]["vscode"] == client["engines"]["vscode"]


def test_language_configuration_comments_and_brackets() -> None:
    config = json.loads((EXTENSION / "language-configuration.json").read_text(encoding="utf-8"))
    assert config["comments"] == {"lineComment": "#"}
    assert ["{", "}"] in config["brackets"] and ["[", "]"] in config["brackets"]
    assert {p["open"] for p in config["autoClosingPairs"]} == {"{", "[", "(", '"'}
    increase = re.compile(config["indentationRules"]["increaseIndentPattern"])
    decrease = re.compile(config["indentationRules"]["decreaseIndentPattern"])
    assert increase.match("run qa {") and increase.match("command = [") and not increase.match("x = { a = 1 }")
    assert decrease.match("  }") and not decrease.match("  x = 1")
    word = re.compile(config["wordPattern"])
    assert word.fullmatch("glm-4") and word.fullmatch("1h30m")


def _node_eval(node: str, script: str) -> object:
    proc = subprocess.run([node, "-e", script], cwd=EXTENSION, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_server_command_is_acx_path_lsp(node: str) -> None:
    script = """
const s = require("./src/server.js");
console.log(JSON.stringify([
  s.serverCommand({}), s.serverCommand({ path: " /opt/venv/bin/acx " }), s.serverCommand({ path: "" }),
  s.serverEnabled({}), s.serverEnabled({ lspEnabled: true }), s.serverEnabled({ lspEnabled: false }),
]));
"""
    assert _node_eval(node, script) == [
        {"command": "acx", "args": ["lsp"]},
        {"command": "/opt/venv/bin/acx", "args": ["lsp"]},
        {"command": "acx", "args": ["lsp"]},
        True,
        True,
        False,
    ]


@pytest.fixture(scope="module")
def vsix(node: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``vsce package`` in a copy of the extension (its prepublish step bundles the client)."""
    if shutil.which("npm") is None:
        pytest.fail("node is installed but npm is not (vsce runs the prepublish script with npm)")
    work = tmp_path_factory.mktemp("vsix")
    src = work / "vscode"
    shutil.copytree(EXTENSION, src, ignore=shutil.ignore_patterns("node_modules", "dist", "*.vsix"))
    (src / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    out = work / "acx.vsix"
    vsce = NODE_MODULES / "@vscode" / "vsce" / "vsce"
    env = {**os.environ, "npm_config_offline": "true", "npm_config_update_notifier": "false"}
    proc = subprocess.run(
        [node, str(vsce), "package", "--no-dependencies", "--allow-missing-repository", "--out", str(out)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"vsce package failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_vsix_contents(vsix: Path) -> None:
    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
        packaged = json.loads(archive.read("extension/package.json"))
        grammar = archive.read("extension/syntaxes/acx.tmLanguage.json")
        bundle = archive.read("extension/dist/extension.js").decode("utf-8")
        manifest = archive.read("extension.vsixmanifest").decode("utf-8")
    assert {
        "extension/package.json",
        "extension/syntaxes/acx.tmLanguage.json",
        "extension/language-configuration.json",
        "extension/dist/extension.js",
        "extension/readme.md",
        "extension/changelog.md",
        "extension/LICENSE.txt",
    } <= names
    assert not [n for n in names if "node_modules" in n or n.startswith(("extension/src/", "extension/test/"))]
    assert packaged["contributes"] == MANIFEST["contributes"]
    assert grammar == (EXTENSION / "syntaxes" / "acx.tmLanguage.json").read_bytes()
    assert f'Version="{MANIFEST["version"]}"' in manifest and f'Publisher="{MANIFEST["publisher"]}"' in manifest
    # Bundled: the client library is inside; only VS Code's own module and Node's are required.
    assert '"lsp"' in bundle
    required = set(re.findall(r'require\("([^"]+)"\)', bundle))
    assert "vscode" in required
    assert required - {"vscode", "child_process", "crypto", "fs", "net", "os", "path", "util", "url", "events"} == set()
    assert "LanguageClient" in bundle or "languageclient" in bundle.lower()
