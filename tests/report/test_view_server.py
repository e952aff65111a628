"""`acx view` over real HTTP on loopback: the DNS-rebinding guard and a results root holding a
symlink that leads out of it (issue 24 item 8). Contract B1: results reach no one but the user
(a rebinding page on another origin must not read them); bad input is never a 500 for every run."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from acx.report import ViewServer
from acx.report._server import is_loopback
from acx.testing.results import synthetic_tasks, write_run


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("127.evil.example", False),
        ("127.0.0.1.nip.io", False),
        ("127.", False),
        ("localhost.evil.example", False),
        ("evil.example", False),
        ("128.0.0.1", False),
        ("0.0.0.0", False),
        ("", False),
    ],
)
def test_is_loopback_parses_ip_literals_and_matches_names_exactly(host: str, ok: bool) -> None:  # contract B1
    assert is_loopback(host) is ok


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[ViewServer, Path]]:
    root = tmp_path / "results"
    write_run(root / "qa" / "20260101_000000", synthetic_tasks(3, seed=1, error_rate=0.0))
    outside = tmp_path / "elsewhere"
    write_run(outside / "20260102_000000", synthetic_tasks(3, seed=2, error_rate=0.0))
    (root / "linked").symlink_to(outside, target_is_directory=True)
    server = ViewServer(root, port=0)
    server.start()
    try:
        yield server, root
    finally:
        server.close()


def _get(server: ViewServer, path: str, host: str | None = None) -> tuple[int, bytes]:
    addr, port = server.httpd.server_address[:2]
    conn = http.client.HTTPConnection(str(addr), int(port), timeout=60)
    try:
        conn.request("GET", path, headers={"Host": host} if host is not None else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["127.evil.example", "127.0.0.1.nip.io", "127.evil.example:8765", "localhost.x"])
def test_rebinding_hosts_that_start_like_loopback_are_refused(served: tuple[ViewServer, Path], host: str) -> None:
    # contract B1: a page on `127.evil.example` that rebinds its name to 127.0.0.1 sends its own name.
    server, _ = served
    status, body = _get(server, "/api/runs", host)
    assert status == 403 and b"loopback" in body


def test_loopback_hosts_are_answered(served: tuple[ViewServer, Path]) -> None:  # contract B1
    server, _ = served
    port = server.httpd.server_address[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        assert _get(server, "/api/runs", host)[0] == 200, host


def test_a_symlink_out_of_the_root_is_skipped_with_a_note(served: tuple[ViewServer, Path]) -> None:  # contract B1
    server, _ = served
    status, body = _get(server, "/")
    assert status == 200, body
    page = body.decode()
    assert "1 run(s)" in page and 'data-testid="skipped"' in page
    assert "linked/20260102_000000: a symlink to" in page and "outside the results root" in page
    status, body = _get(server, "/api/runs")
    assert status == 200 and [r["rel"] for r in json.loads(body)] == ["qa/20260101_000000"]
    assert _get(server, "/run/linked/20260102_000000/")[0] == 404  # never served either
    assert _get(server, "/run/qa/20260101_000000/")[0] == 200
