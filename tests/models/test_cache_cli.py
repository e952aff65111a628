"""`acx cache stats|prune|clear` and `acx explain` showing each role's cache mode (issue 26
item 4). Contracts M7 (model roles and their provenance), R12 (located refusals, exit 2)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.models.test_run_cache import REACT, acx, react_script, spec

from acx.models import CallCache
from acx.models._cache import CachedAnswer
from acx.testing.fake_models import FakeModelServer


def test_explain_shows_the_cache_mode_of_each_role(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        """version: 1
name: e
runtime: {results_dir: out}
requests:
  - name: e
    benchmark: {id: exact_match, dataset: data.jsonl}
    harness: {id: react}
    model: {id: m, base_url: "http://127.0.0.1:9/v1", cache: read-write, cache_max_bytes: 5000000,
            roles: {grader: {id: g, base_url: "http://127.0.0.1:9/v1", cache: replay}}}
    environment: {id: host_process}
"""
    )
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q", "question": "?", "answer": "a"}) + "\n")
    res = acx("explain", str(path), "e", "model.cache", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith('model.cache = "read-write"') and "run.yaml:" in res.stdout
    assert "  agent: read-write" in res.stdout and "  grader: replay" in res.stdout
    assert str((tmp_path / "out" / ".acx-cache" / "model-calls").resolve()) in res.stdout and "5000000" in res.stdout
    res = acx("explain", str(path), "e", "model.roles.grader.cache", "--format", "json", cwd=tmp_path)
    assert json.loads(res.stdout)["model_cache"]["roles"] == {"agent": "read-write", "grader": "replay"}
    bad = path.read_text().replace("cache: replay", "cache: sometimes")
    path.write_text(bad)
    res = acx("explain", str(path), "e", "model.cache", cwd=tmp_path)
    assert res.returncode == 2 and "model.roles.grader.cache" in res.stderr and "Traceback" not in res.stderr


def test_cache_stats_prune_and_clear(tmp_path: Path) -> None:
    with FakeModelServer(react_script(), default=None) as srv:
        assert acx("run", str(spec(tmp_path, "c", REACT, srv.base_url, "write")), cwd=tmp_path).returncode == 0
    res = acx("cache", "stats", "--format", "json", cwd=tmp_path)  # the default under ./results
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)
    assert stats["entries"] == 4 and stats["by_model"] == {"m1": 4} and stats["bytes"] > 0
    root = Path(stats["directory"])
    cache = CallCache(root)
    extra = CachedAnswer("f" * 64, "openai-chat", "m1", False, 200, b"{}")
    cache.put(extra)
    old = time.time() - 30 * 86400
    os.utime(cache.path("f" * 64), (old, old))
    res = acx("cache", "prune", "--older-than", "7", "--dir", str(root), cwd=tmp_path)
    assert res.returncode == 0 and "removed 1 entry" in res.stdout, res.stdout + res.stderr
    res = acx("cache", "prune", "--max-bytes", "1", "--dir", str(root), cwd=tmp_path)
    assert "removed 4 entries" in res.stdout and CallCache(root).stats().entries == 0
    cache.put(extra)
    res = acx("cache", "clear", "--results-dir", "results", cwd=tmp_path)
    assert res.returncode == 0 and "removed 1 entry" in res.stdout
    assert "0 entries" in acx("cache", "stats", cwd=tmp_path).stdout


def test_cache_command_refusals(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    res = acx("cache", "stats", "--dir", str(tmp_path / "file"), cwd=tmp_path)
    assert res.returncode == 2 and "E0662" in res.stderr and "not a directory" in res.stderr
    res = acx("cache", "prune", "--max-bytes", "0", cwd=tmp_path)
    assert res.returncode == 2 and "--max-bytes must be positive" in res.stderr
    assert "Traceback" not in res.stderr
