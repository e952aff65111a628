"""The report and the live view in real headless Chromium (issue 16): filters, a task page, the
comparison page, the live refresh; screenshots are saved as test artifacts."""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from acx.report import ViewServer, load_run, write_report
from acx.testing.results import actf_trajectory, synthetic_tasks, write_run

pytestmark = pytest.mark.browser


def _only_local(urls: list[str]) -> None:
    """The page fetched nothing from anywhere: file:/data:/about: only (plus the viewer's own
    loopback origin, checked by the caller)."""
    assert all(u.split(":", 1)[0] in ("file", "data", "about", "blob") for u in urls), urls


@pytest.fixture()
def report(tmp_path: Path) -> tuple[Path, Path, Path]:
    tasks = synthetic_tasks(300, seed=7)
    tasks[0]["attempts"][0]["trajectory"] = actf_trajectory("What is 0 + 0?", "0", steps=3)
    tasks[0]["attempts"][0]["extra"] = {"verifier_output_tail": "1 passed\n"}
    tasks[0]["attempts"][0]["retries"] = [{"reason": "matched retry pattern 'overloaded'", "stage": "run"}]
    a = write_run(tmp_path / "a", tasks, run_id="20260101_000000")
    b = write_run(tmp_path / "b", synthetic_tasks(310, seed=8), run_id="20260102_000000")
    out = write_report([a, b], tmp_path / "report.html").path
    return out, a, b


def _shows(locator: Any, text: str) -> None:
    """The element's text becomes ``text`` (retried: the page filters after a debounce, and a
    loaded machine runs its script late — bounded, not fast)."""
    from playwright.sync_api import expect

    expect(locator).to_have_text(text, timeout=30_000)


def test_report_filters_sort_and_task_page(page: Any, report: tuple[Path, Path, Path], shots: Path) -> None:
    out, a, _ = report
    rows = load_run(str(a)).rows
    page.goto(out.as_uri())
    page.wait_for_selector("[data-testid=headline]")
    assert "correct.avg@1" not in page.inner_text("[data-testid=headline]")  # no metrics.json: computed
    assert "95 % interval" in page.inner_text("[data-testid=headline]")
    assert page.locator("#page-run-0 figure.chart").count() == 5
    assert page.locator("[data-testid=redacted]").count() == 0  # nothing in the data looks like a secret
    page.screenshot(path=str(shots / "overview.png"), full_page=True)

    page.click("[data-testid=open-tasks] >> nth=0")
    count = page.locator("[data-testid=count]")
    _shows(count, "300 of 300 tasks")
    assert page.locator("[data-testid=task-table] tbody tr").count() == 100  # one page of 100

    page.select_option("[data-testid=filter-state]", "error")
    errors = [r for r in rows if r[1] == "error"]
    _shows(count, f"{len(errors)} of 300 tasks")
    states = page.locator("[data-testid=task-table] tbody tr td:nth-child(2)").all_inner_texts()
    assert states and set(states) == {"error"}
    code = errors[0][5][0]
    page.select_option("[data-testid=filter-code]", code)
    _shows(count, f"{sum(code in r[5] for r in errors)} of 300 tasks")
    page.screenshot(path=str(shots / "filtered.png"), full_page=True)

    page.select_option("[data-testid=filter-code]", "")
    page.select_option("[data-testid=filter-state]", "")
    page.select_option("[data-testid=filter-score]", "fail")
    fails = [r for r in rows if r[4] == 0.0]
    _shows(count, f"{len(fails)} of 300 tasks")
    page.select_option("[data-testid=filter-score]", "")
    page.fill("[data-testid=search]", "task-0001")
    page.press("[data-testid=search]", "Enter")
    _shows(count, "10 of 300 tasks")  # task-00010 … task-00019
    page.fill("[data-testid=search]", "")
    page.press("[data-testid=search]", "Enter")

    from playwright.sync_api import expect

    # Each click re-renders the table after the hash changes (asynchronously): wait for its arrow
    # before the next click, and for the sorted first row before reading it.
    header = page.locator("th[data-sort=duration]")
    header.click()
    expect(header).to_have_text("duration (s) ▲", timeout=30_000)
    header.click()  # descending
    expect(header).to_have_text("duration (s) ▼", timeout=30_000)
    longest = max((r for r in rows if r[8] is not None), key=lambda r: r[8])
    first = page.locator("[data-testid=task-table] tbody tr >> nth=0")
    expect(first).to_have_attribute("data-task", longest[0], timeout=30_000)

    page.click("text=next ›")
    expect(page.locator(".pager")).to_contain_text("page 2 / 3", timeout=30_000)

    page.goto(out.as_uri() + "#tasks/0?q=task-00000")
    page.click("[data-testid=task-table] a >> text=task-00000")
    expect(page.locator("[data-testid=task-title]")).to_have_text("task-00000", timeout=30_000)
    assert page.inner_text("[data-testid=instruction]") == "What is 0 + 0?"
    traj = page.locator("[data-testid=trajectory] >> nth=0")
    assert "ACTF_v1.0 — 3 step(s)" in traj.inner_text()
    assert traj.locator("summary", has_text="tool call: bash").count() == 2
    observation = traj.locator("details", has_text="observation").first
    assert not observation.evaluate("d => d.open")
    observation.locator("summary").click()
    assert observation.evaluate("d => d.open") and "step1" in observation.inner_text()
    assert "1 passed" in page.inner_text("[data-testid=verifier]")
    assert "discarded try 1" in page.inner_text("[data-testid=attempt-1]")
    assert page.locator("[data-testid=phases] tbody tr").count() == 7
    assert "run_timeout_seconds" in page.inner_text("[data-testid=plan]")
    page.screenshot(path=str(shots / "task.png"), full_page=True)
    _only_local(page.requests)
    assert page.errors == []


def test_report_comparison_page(page: Any, report: tuple[Path, Path, Path], shots: Path) -> None:
    out, a, b = report
    page.goto(out.as_uri() + "#compare/1")
    page.wait_for_selector("#page-compare-1:not([hidden])")
    ids_a = {r[0] for r in load_run(str(a)).rows}
    ids_b = {r[0] for r in load_run(str(b)).rows}
    assert page.inner_text("[data-testid=matched]") == str(len(ids_a & ids_b))
    assert "correct" in page.inner_text("[data-testid=compare-table]")
    assert f"Only in B ({len(ids_b - ids_a)})" in page.inner_text("#page-compare-1")
    page.screenshot(path=str(shots / "compare.png"), full_page=True)
    page.click("#page-compare-1 a >> nth=0")  # a flipped task opens its page in run B
    from playwright.sync_api import expect

    expect(page.locator("[data-testid=task-title]")).to_be_visible(timeout=30_000)  # after the re-render
    _only_local(page.requests)
    assert page.errors == []


def test_live_view_refreshes_a_run_in_progress(page: Any, tmp_path: Path, shots: Path) -> None:
    root = tmp_path / "results"
    run_dir = root / "synthetic" / "20260101_000000"
    tasks = synthetic_tasks(40, seed=9, error_rate=0.0)
    write_run(run_dir, tasks[:10], status="running")
    fd = os.open(run_dir / ".acx" / "lock", os.O_RDWR)  # this test is "the process running the run"
    os.write(fd, str(os.getpid()).encode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    server = ViewServer(root, port=0, interval_ms=300)
    server.start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        page.goto(server.url)
        assert page.inner_text("[data-testid=run-count]") == "1 run(s)"
        assert "(in progress)" in page.inner_text("tbody")
        page.click("tbody a")
        page.wait_for_selector("[data-testid=headline]")
        page.wait_for_function("document.getElementById('live-banner').textContent.includes('in progress')")
        assert "10 shown" in page.inner_text("#page-run-0 table.kv")
        page.screenshot(path=str(shots / "live-10.png"), full_page=True)

        write_run(run_dir, tasks[:25], status="running")  # the run advances
        page.wait_for_function(
            "document.querySelector('#page-run-0 table.kv').textContent.includes('25 shown')", timeout=60_000
        )
        write_run(run_dir, tasks, status="completed")
        fcntl.flock(fd, fcntl.LOCK_UN)
        page.wait_for_function(
            "document.querySelector('#page-run-0 table.kv').textContent.includes('40 shown')", timeout=60_000
        )
        page.wait_for_function("document.getElementById('live-banner').textContent.includes('completed')")
        page.screenshot(path=str(shots / "live-done.png"), full_page=True)
        origin = server.url.rstrip("/")
        assert all(u.startswith(origin) for u in page.requests), page.requests
        assert page.errors == []
        # Only run directories under the root are served (raw paths: a browser would normalise them).
        host, port = server.httpd.server_address[:2]
        for bad in ("/run/../../etc/", "/run/%2e%2e/%2e%2e/", "/api/progress/..%2f..", "/run/synthetic/", "/x"):
            conn = http.client.HTTPConnection(str(host), int(port), timeout=5)
            conn.request("GET", bad)
            assert conn.getresponse().status == 404, bad
            conn.close()
        conn = http.client.HTTPConnection(str(host), int(port), timeout=5)
        conn.request("GET", "/api/runs", headers={"Host": "attacker.example:80"})  # DNS rebinding
        assert conn.getresponse().status == 403
        conn.close()
        runs = json.loads(page.request.get(server.url + "api/runs").text())
        assert [r["rel"] for r in runs] == ["synthetic/20260101_000000"]
        progress = json.loads(page.request.get(server.url + "api/progress/synthetic/20260101_000000").text())
        assert progress["status"] == "completed" and progress["live"] is False
    finally:
        os.close(fd)
        server.close()


def test_report_of_a_real_model_run(page: Any, tmp_path: Path, shots: Path) -> None:
    """`acx run` with openai_chat against a scripted model server on loopback: the report written at
    the end shows the ACTF trajectory, usage and cost, and never the key (contracts M6, issue 16)."""
    import subprocess
    import sys

    from acx.testing.fake_models import FakeModelServer, text

    key = "sk-report-test-secret-0042-abcdefghij"
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"say {i}", "answer": str(i)}) + "\n" for i in range(2))
    )
    with FakeModelServer([text("0", usage=(20, 1)), text("7", usage=(30, 2))]) as srv:
        price = "{input_per_mtok: 1.0, output_per_mtok: 4.0}"
        (tmp_path / "run.yaml").write_text(
            "version: 1\nname: m\ntask_concurrency: 1\nruntime: {results_dir: results, progress: none}\n"
            "requests:\n  - name: m\n    benchmark: {id: exact_match, dataset: data.jsonl}\n"
            "    harness: {id: openai_chat}\n"
            f'    model: {{id: m1, base_url: "{srv.base_url}", api_key: "${{MODEL_KEY}}", price: {price}}}\n'
            "    environment: {id: host_process}\n"
        )
        res = subprocess.run(
            [sys.executable, "-m", "acx", "run", "run.yaml"],
            cwd=tmp_path,
            env={**os.environ, "MODEL_KEY": key},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 0, res.stderr + res.stdout
    (run_dir,) = (tmp_path / "results" / "m").iterdir()
    report = run_dir / "report.html"
    text_ = report.read_text(encoding="utf-8")
    assert key not in text_ and key[:10] not in text_
    page.goto(report.as_uri())
    assert "cost $" in page.inner_text("#page-run-0 table.kv")
    page.goto(report.as_uri() + "#tasks/0?score=fail")
    assert page.inner_text("[data-testid=count]") == "1 of 2 tasks"
    page.click("[data-testid=task-table] a")
    assert page.inner_text("[data-testid=task-title]") == "q1"
    assert page.inner_text("[data-testid=instruction]") == "say 1"
    traj = page.inner_text("[data-testid=trajectory] >> nth=0")
    assert "ACTF_v1.0 — 1 step(s)" in traj and "say 1" in traj and "m1" in traj
    assert '"prompt_tokens":30' in page.inner_text("[data-testid=attempt-1]")
    page.screenshot(path=str(shots / "model-task.png"), full_page=True)
    _only_local(page.requests)
    assert page.errors == []


_NAVIGATION_RACES = ("ERR_ABORTED", "interrupted by another navigation", "Execution context was destroyed")


def _reload_and_read(page: Any, selector: str) -> str:
    """Load the page again and read ``selector``. A live page may be navigating itself (its
    refresh timer) at that very moment, which aborts or interrupts our navigation or our read (all
    seen in CI): try again."""
    for attempt in range(5):
        try:
            page.goto(page.url, wait_until="load")
            text: str = page.inner_text(selector)
            return text
        except Exception as exc:
            if not any(race in str(exc) for race in _NAVIGATION_RACES) or attempt == 4:
                raise
            time.sleep(0.3)
    raise AssertionError("unreachable")


def test_live_view_follows_a_real_run(page: Any, tmp_path: Path, shots: Path) -> None:
    """`acx view` over a real `acx run` in progress (its lock held by the running process): the
    run's page shows it in progress and follows it to completion."""
    import subprocess
    import sys

    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"What is {i}?", "answer": str(i)}) + "\n" for i in range(6))
    )
    (tmp_path / "run.yaml").write_text(
        "version: 1\nname: slow\ntask_concurrency: 1\nruntime: {results_dir: results, progress: none}\n"
        "requests:\n  - name: slow\n    benchmark: {id: exact_match, dataset: data.jsonl}\n"
        "    harness: {id: command, command: 'sleep 1.2; echo 1'}\n    environment: {id: host_process}\n"
    )
    (tmp_path / "results").mkdir()
    server = ViewServer(tmp_path / "results", port=0, interval_ms=300)
    server.start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "acx", "run", "run.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not list((tmp_path / "results").rglob("run_info.json")):
            assert time.monotonic() < deadline and proc.poll() is None, "the run did not start"
            time.sleep(0.05)
        page.goto(server.url)
        page.wait_for_function("document.body.textContent.includes('(in progress)')", timeout=30_000)
        page.click("tbody a")
        page.wait_for_function(
            "document.getElementById('live-banner').textContent.includes('in progress')", timeout=15_000
        )
        page.screenshot(path=str(shots / "real-running.png"), full_page=True)
        page.wait_for_function(
            "document.getElementById('live-banner').textContent.includes('status: completed')", timeout=60_000
        )
        assert proc.wait(timeout=60) == 0
        assert "6 shown of 6" in _reload_and_read(page, "#page-run-0 table.kv")
        page.screenshot(path=str(shots / "real-done.png"), full_page=True)
        assert page.errors == []
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        server.close()
