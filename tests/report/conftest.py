"""Headless Chromium for the report and viewer tests.

Debian's ``chromium`` (installed by scripts/test.sh) driven through Playwright's Python API with
``executable_path``: no browser is downloaded. Without a browser the tests are skipped loudly,
unless ``ACX_REQUIRE_BROWSER=1`` (set by .ci/run), which turns the skip into a failure.
Screenshots go to ``$ACX_TEST_ARTIFACTS`` (default ``test-artifacts/``, gitignored).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_path() -> str | None:
    explicit = os.environ.get("ACX_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _unavailable(why: str) -> None:
    if os.environ.get("ACX_REQUIRE_BROWSER") == "1":
        pytest.fail(f"headless Chromium is required (ACX_REQUIRE_BROWSER=1) but {why}", pytrace=False)
    pytest.skip(f"!!! browser tests SKIPPED: {why} (scripts/test.sh installs Debian's chromium) !!!")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        _unavailable("no chromium executable was found")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    """A fresh page that records every request and every script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    # Bounded, not fast: a re-render on a loaded machine (ACX_TEST_STRESS=1) can take many seconds.
    context.set_default_timeout(90_000)
    pg = context.new_page()
    pg.requests = []  # type: ignore[attr-defined]
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("request", lambda r: pg.requests.append(r.url))  # type: ignore[attr-defined]
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture()
def shots(request: pytest.FixtureRequest) -> Path:
    root = Path(os.environ.get("ACX_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / "test-artifacts")
    d = root / "screenshots" / request.node.name
    d.mkdir(parents=True, exist_ok=True)
    return d
