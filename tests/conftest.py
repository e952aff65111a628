"""Shared test configuration."""

from __future__ import annotations

import os

import pytest

# Hypothesis: deterministic enough for CI, fast enough for a 2-core machine.
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "acx", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "acx"))
except ImportError:  # pragma: no cover
    pass


@pytest.fixture(autouse=True)
def _isolated_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read the developer's own ~/.config/acx/config.yaml in tests."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
