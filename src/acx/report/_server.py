"""``acx view``: a local web server listing the runs under a results directory and serving their
reports; a run still in progress is re-rendered as its files change and its page reloads itself.

Loopback by default, and then only requests whose Host header is a loopback name are answered
(no DNS rebinding). Only GET/HEAD of four kinds of path are answered (``/``, ``/run/<rel>/``,
``/api/progress/<rel>``, ``/api/runs``); ``<rel>`` must name a run directory under the root
(no ``..``, no symlink out of it).
"""

from __future__ import annotations

import html
import ipaddress
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from acx.report._build import render_runs
from acx.results import RunReader, find_runs

__all__ = ["ViewServer", "is_loopback"]


def _stamp(run_dir: Path) -> str:
    """Changes whenever the run's visible state may have changed."""
    parts = []
    for name in ("run_info.json", "progress.json", "metrics.json"):
        try:
            parts.append(str(os.stat(run_dir / name).st_mtime_ns))
        except OSError:
            parts.append("-")
    return ".".join(parts)


class ViewServer:
    """Serves the runs under ``root``; :meth:`serve_forever` blocks, :meth:`start` runs in a
    thread (tests), :attr:`url` is where it listens."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        interval_ms: int = 2000,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.interval_ms = interval_ms
        self.environ = environ
        self._cache: dict[str, tuple[str, bytes]] = {}
        self._render_seconds: dict[str, float] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._handle(self, send_body=True)

            def do_HEAD(self) -> None:
                server._handle(self, send_body=False)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: no per-request lines
                return

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}/"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="acx-view", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ---- routing -----------------------------------------------------------------------------
    def _run_dir(self, rel: str) -> Path | None:
        rel = rel.strip("/")
        if not rel or any(part in ("", ".", "..") for part in rel.split("/")):
            return None
        path = (self.root / rel).resolve()
        if path != self.root and self.root not in path.parents:
            return None
        return path if (path / "run_info.json").is_file() else None

    def _host_ok(self, req: BaseHTTPRequestHandler) -> bool:
        """On loopback, only requests addressed to a loopback name are answered: a web page
        elsewhere cannot read the results through DNS rebinding (its Host header names its own
        domain)."""
        if not is_loopback(str(self.httpd.server_address[0])):
            return True
        host = (req.headers.get("Host") or "").strip().lower()
        name = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        return is_loopback(name)

    def _handle(self, req: BaseHTTPRequestHandler, *, send_body: bool) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(req.path).path)
        if not self._host_ok(req):
            self._send(req, 403, "text/plain; charset=utf-8", b"forbidden: not a loopback Host\n", send_body)
            return
        try:
            if path == "/":
                self._send(req, 200, "text/html; charset=utf-8", self._index(), send_body)
            elif path == "/api/runs":
                self._send(req, 200, "application/json", json.dumps(self._runs()).encode(), send_body)
            elif path.startswith("/api/progress/") and (d := self._run_dir(path[len("/api/progress/") :])):
                self._send(req, 200, "application/json", json.dumps(self._progress(d)).encode(), send_body)
            elif path.startswith("/run/") and path.endswith("/") and (d := self._run_dir(path[5:])):
                self._send(req, 200, "text/html; charset=utf-8", self._report(d), send_body)
            else:
                self._send(req, 404, "text/plain; charset=utf-8", b"not found\n", send_body)
        except Exception as exc:  # one bad run must not take the server down; say what failed
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            self._send(req, 500, "text/plain; charset=utf-8", f"cannot render: {message}\n".encode(), send_body)

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, code: int, ctype: str, body: bytes, send_body: bool) -> None:
        req.send_response(code)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.send_header("Cache-Control", "no-store")
        req.end_headers()
        if send_body:
            req.wfile.write(body)

    # ---- pages -------------------------------------------------------------------------------
    def _rel(self, d: Path) -> str:
        return d.resolve().relative_to(self.root).as_posix()

    def _progress(self, d: Path) -> dict[str, Any]:
        reader = RunReader.open(d)
        p = reader.progress or {}
        return {
            "status": reader.info.get("status"),
            "live": reader.is_live(),
            "finished": p.get("finished"),
            "total": p.get("total"),
            "stamp": _stamp(d),
            # A page reloads at most this often: re-rendering a large run costs seconds of CPU.
            "min_reload_ms": max(self.interval_ms, int(self._render_seconds.get(self._rel(d), 0.0) * 4000)),
        }

    def _runs(self) -> list[dict[str, Any]]:
        return self._scan()[0]

    def _scan(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The runs to list, and a note for each directory left out (a symlink that leads out of
        the root — never served, and never a 500 for the whole index — or a run that cannot be
        read)."""
        out: list[dict[str, Any]] = []
        skipped: list[str] = []
        for d in find_runs(self.root):
            shown = d.relative_to(self.root).as_posix() if d.is_relative_to(self.root) else str(d)
            real = d.resolve()
            if real != self.root and self.root not in real.parents:
                skipped.append(f"{shown}: a symlink to {real}, outside the results root (not served)")
                continue
            try:
                reader = RunReader.open(d)
            except Exception as exc:
                message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                skipped.append(f"{shown}: cannot be read ({message})")
                continue
            metrics = reader.metrics or {}
            head: dict[str, Any] = next(
                (s for s in metrics.get("series") or [] if isinstance(s, dict) and s.get("role") == "headline"), {}
            )
            p = reader.progress or {}
            out.append(
                {
                    "rel": self._rel(d),
                    "request": reader.info.get("request_name"),
                    "run_id": reader.run_id,
                    "status": reader.info.get("status"),
                    "live": reader.is_live(),
                    "started_at": reader.info.get("started_at"),
                    "finished": p.get("finished"),
                    "total": p.get("total"),
                    "headline": head.get("series_id"),
                    "value": head.get("value"),
                }
            )
        return out, skipped

    def _report(self, d: Path) -> bytes:
        rel = self._rel(d)
        stamp = _stamp(d)
        with self._lock:
            cached = self._cache.get(rel)
            if cached and cached[0] == stamp:
                return cached[1]
            live = {
                "progress_url": "/api/progress/" + urllib.parse.quote(rel),
                "stamp": stamp,
                "interval_ms": self.interval_ms,
            }
            started = time.monotonic()
            doc, _, _ = render_runs([d], live=live, environ=self.environ)
            self._render_seconds[rel] = time.monotonic() - started
            body = doc.encode("utf-8")
            self._cache[rel] = (stamp, body)
            return body

    def _index(self) -> bytes:
        runs, skipped = self._scan()
        notes = (
            '<div data-testid="skipped"><p>left out:</p><ul>'
            + "".join(f"<li>{html.escape(n)}</li>" for n in skipped)
            + "</ul></div>"
            if skipped
            else ""
        )
        rows = "".join(
            f'<tr data-run="{html.escape(r["rel"])}"><td><a href="/run/{urllib.parse.quote(r["rel"])}/">'
            f"{html.escape(str(r['request']))}</a></td><td>{html.escape(str(r['run_id']))}</td>"
            f"<td>{html.escape(str(r['status']))}{' (in progress)' if r['live'] else ''}</td>"
            f"<td>{_or_dash(r['finished'])} / {_or_dash(r['total'])}</td>"
            f"<td>{html.escape(str(r['headline'] or '—'))} = "
            f"{'—' if not isinstance(r['value'], int | float) else format(r['value'], '.3f')}</td>"
            f"<td>{html.escape(str(r['started_at'] or '—'))}</td></tr>"
            for r in runs
        )
        # The list follows live runs closely and picks up new ones within 10 s.
        refresh = f'<meta http-equiv="refresh" content="{3 if any(r["live"] for r in runs) else 10}">'
        doc = (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"{refresh}<title>acx view — {html.escape(str(self.root))}</title>"
            "<style>body{font:14px system-ui,sans-serif;margin:16px}table{border-collapse:collapse}"
            "td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left}</style></head><body>"
            f"<h1>acx runs in {html.escape(str(self.root))}</h1>"
            f'<p data-testid="run-count">{len(runs)} run(s)</p>'
            "<table><thead><tr><th>request</th><th>run id</th><th>status</th><th>tasks done</th>"
            f"<th>headline</th><th>started</th></tr></thead><tbody>{rows}</tbody></table>{notes}</body></html>"
        )
        return doc.encode("utf-8")


def _or_dash(v: Any) -> str:
    return "—" if v is None else html.escape(str(v))


def is_loopback(host: str) -> bool:
    """``localhost`` exactly, or an IP literal in 127.0.0.0/8 or ``::1`` (an IPv4-mapped one
    included). Parsed, never matched by prefix: ``127.evil.example`` and ``127.0.0.1.nip.io`` are
    names anyone can point at any address — a DNS-rebinding page's own Host."""
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback
