"""Fixtures for compiler tests: an isolated project directory with a `.git` marker (so the
project-config search never leaves it) as the working directory, and a file writer."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

Writer = Callable[[str, str], Path]


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture()
def write(project: Path) -> Writer:
    """``write("orch.yaml", text)``: dedented text into the project dir; returns the path."""

    def _write(name: str, text: str) -> Path:
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return _write
