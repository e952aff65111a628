"""Shared test configuration."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

# Hypothesis: deterministic enough for CI, fast enough for a 2-core machine.
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile("acx", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "acx"))
except ImportError:  # pragma: no cover
    pass


@pytest.fixture(autouse=True)
def _isolated_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read the developer's own ~/.config/acx/config.yaml in tests."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))


# Compiler and CLI tests: an isolated project directory with a `.git` marker (so the
# project-config search never leaves it) as the working directory, and a file writer.
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
