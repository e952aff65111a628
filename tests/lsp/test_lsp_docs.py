"""docs/editors.md: the editor snippets start `acx lsp`, and the Helix one is valid TOML."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

DOC = (Path(__file__).resolve().parents[2] / "docs" / "editors.md").read_text(encoding="utf-8")


def test_helix_languages_toml_snippet_is_valid_and_starts_acx_lsp() -> None:
    [block] = re.findall(r"```toml\n(.*?)```", DOC, re.S)
    config = tomllib.loads(block)
    assert config["language-server"]["acx"] == {"command": "acx", "args": ["lsp"]}
    [language] = config["language"]
    assert language["file-types"] == ["acx"] and language["language-servers"] == ["acx"]


def test_neovim_snippets_start_acx_lsp_for_acx_files() -> None:
    blocks = re.findall(r"```lua\n(.*?)```", DOC, re.S)
    assert len(blocks) == 2
    for block in blocks:
        assert 'cmd = { "acx", "lsp" }' in block and 'filetypes = { "acx" }' in block


def test_the_vs_code_section_points_at_the_extension() -> None:
    section = DOC.split("## VS Code", 1)[1]
    assert "editors/vscode" in section
