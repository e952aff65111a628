"""An exported log opens in Inspect's own viewer (issue 25 "done when"): `inspect view` serves
the export directory on loopback and headless Chromium (Debian's, through Playwright) finds the
log's samples and, on a sample's page, its messages — the system prompt, the tool call and its
result. Skipped loudly without a browser unless ACX_REQUIRE_BROWSER=1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def _chromium() -> str | None:
    explicit = os.environ.get("ACX_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _unavailable(why: str) -> None:
    if os.environ.get("ACX_REQUIRE_BROWSER") == "1":
        pytest.fail(f"headless Chromium is required (ACX_REQUIRE_BROWSER=1) but {why}", pytrace=False)
    pytest.skip(f"!!! inspect view browser test SKIPPED: {why} !!!")


@pytest.fixture()
def browser_page() -> Iterator[Any]:
    path = _chromium()
    if path is None:
        _unavailable("no chromium executable was found")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.set_default_timeout(90_000)  # bounded, not fast: a loaded machine renders slowly
            page = context.new_page()
            page.errors = []  # type: ignore[attr-defined]
            page.on("pageerror", lambda e: page.errors.append(str(e)))  # type: ignore[attr-defined]
            yield page
        finally:
            browser.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture()
def inspect_view(acx_run: Path, tmp_path: Path) -> Iterator[str]:
    pytest.importorskip("inspect_ai")
    logs = tmp_path / "logs"
    res = subprocess.run(
        [sys.executable, "-m", "acx", "results", "export", str(acx_run), "--format", "inspect", "-o", str(logs)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    inspect = shutil.which("inspect") or str(Path(sys.executable).with_name("inspect"))
    port = _free_port()
    proc = subprocess.Popen(
        [inspect, "view", "--log-dir", str(logs), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        import urllib.request

        while True:
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "inspect view did not start within 120 s"
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def test_inspect_view_shows_an_exported_samples_messages(inspect_view: str, browser_page: Any) -> None:
    page = browser_page
    page.goto(inspect_view, wait_until="networkidle")
    # The log's sample list: every task of the run with its input.
    for question in ("What is 6 times 7?", "What is 2+2?", "What is 1+1?"):
        page.get_by_text(question).first.wait_for()
    page.get_by_text("What is 6 times 7?").first.click()
    page.wait_for_url("**/samples/sample/q0/1/**")
    page.get_by_text("MESSAGES", exact=False).first.click()
    body = page.locator("body")
    page.get_by_text("You are an autonomous agent").first.wait_for()
    page.get_by_text("echo $((6*7))").first.wait_for()
    text = body.inner_text()
    assert "[submitted]" in text and "42" in text
    assert page.errors == []  # type: ignore[attr-defined]
