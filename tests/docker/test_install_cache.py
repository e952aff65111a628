"""The install cache on the real Docker engine (issue 23 item 4; contract P7).

An ``installed_agent`` install runs once per (base image digest × install command × uploads'
content × the variables it sees) and becomes an image every attempt starts from: five attempts of
one task, started together, share one install (the install leaves a random id and a counter in the
image; every attempt's agent reports the same id and a count of 1); a changed install command, a
changed upload or a changed base image installs again; a failed install is not cached (the next
run installs again); ``install_cache = false`` installs in every attempt. Each test's install
command carries the test's unique label, so no earlier run's image can answer for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acx.testing.fake_models import FakeModelServer

pytestmark = pytest.mark.slow

BOOKWORM = "acx-test/bookworm:latest"
#: The install leaves a random id and one counter line per run of the command in the image.
INSTALL = (
    "set -e; : {label}; cat /proc/sys/kernel/random/uuid > $ACX_AGENT_DIR/install-id; "
    "echo installed >> $ACX_AGENT_DIR/installs; sleep 1; ! printenv ACX_TASK_ID"
)
#: The agent reports what it found in its image, and the uploaded file's content.
COMMAND = "cat /installed-agent/install-id; wc -l < /installed-agent/installs; cat /installed-agent/tool.txt"
LOGS = ["/installed-agent/install-id", "/installed-agent/installs"]


def _images(run_id: str) -> list[dict[str, Any]]:
    """The install images run ``run_id`` built (their ``acx.install_run`` label), with their config."""
    ids = subprocess.run(
        ["docker", "image", "ls", "-q", "--filter", f"label=acx.install_run={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for image in dict.fromkeys(ids):
        out = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True, check=True)
        info = json.loads(out.stdout)[0]
        found.append({**info["Config"], "RepoTags": info.get("RepoTags") or []})
    return found


@pytest.fixture
def cleanup_images() -> Iterator[list[str]]:
    """Image tags (install images, test base images) the test made; removed afterwards."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)


def _spec(
    tmp_path: Path,
    base_url: str,
    run_id: str,
    install: str,
    *,
    k: int = 1,
    image: str = BOOKWORM,
    extra: str = "",
) -> Path:
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "report", "answer": "1"}) + "\n")
    spec = tmp_path / "run.yaml"
    harness = {
        "id": "installed_agent",
        "upload": ["agent/tool.txt"],
        "install": install,
        "command": COMMAND,
        "logs": LOGS,
        "install_timeout_seconds": 120,
    }
    spec.write_text(
        f"""version: 1
name: ic
runtime: {{results_dir: results, progress: none}}
task_concurrency: {k}
requests:
  - name: ic
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)[:-1]}{extra}}}
    model: {{id: m, base_url: "{base_url}"}}
    environment: {{id: docker, setup: {{image: "{image}"}}}}
    execution: {{attempts: {{k: {k}}}}}
    output: {{run_id: "{run_id}"}}
"""
    )
    return spec


def _run(tmp_path: Path, spec: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", command, str(spec), *args],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _results(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    run_dir = tmp_path / "results" / "ic" / run_id
    found = [json.loads(p.read_text()) for p in sorted(run_dir.rglob("attempt-*/result.json"))]
    assert found, sorted(str(p) for p in run_dir.rglob("*"))
    return found


def _reported(result: dict[str, Any]) -> tuple[str, int]:
    """(install id, number of installs) the attempt's agent found in its image."""
    logs = result["telemetry"]["agent_logs"]
    return logs["/installed-agent/install-id"].strip(), len(logs["/installed-agent/installs"].splitlines())


def _tool(tmp_path: Path, content: str) -> None:
    (tmp_path / "agent").mkdir(exist_ok=True)
    (tmp_path / "agent" / "tool.txt").write_text(content)


def test_five_concurrent_attempts_share_one_install(tmp_path: Path, run_label: str, cleanup_images) -> None:
    _tool(tmp_path, "tool-v1\n")
    install = INSTALL.format(label=run_label)
    with FakeModelServer([]) as srv:
        spec = _spec(tmp_path, srv.base_url, f"{run_label}-a", install, k=5)
        plans = _run(tmp_path, spec, "compile", "--plans")
        explain = _run(tmp_path, spec, "explain", "ic", "install_cache_key", "--task", "q0")
        res = _run(tmp_path, spec, "run")
    images = _images(f"{run_label}-a")
    cleanup_images.extend(t for i in images for t in i["RepoTags"])
    assert plans.returncode == 0 and explain.returncode == 0, plans.stderr + explain.stderr
    assert "once per base image (install cache, key sha256:" in plans.stdout, plans.stdout
    assert "installed_agent harness (install, upload" in explain.stdout, explain.stdout
    assert res.returncode == 0, res.stdout + res.stderr
    results = _results(tmp_path, f"{run_label}-a")
    assert len(results) == 5
    for r in results:
        assert r["status"] == "completed", r["issues"]
        assert "tool-v1" in r["final_answer"]  # the upload is in the image too
    reported = {_reported(r) for r in results}
    # One install for all five: the same id, and the install command ran once.
    assert len(reported) == 1 and next(iter(reported))[1] == 1, reported
    cached = sorted(r["telemetry"]["install_cached"] for r in results)
    assert cached == [False, True, True, True, True], cached
    assert len({r["telemetry"]["install_cache_key"] for r in results}) == 1
    assert all(r["telemetry"]["install_seconds"] >= 0 for r in results)
    # The one that installed waited for the install (its `sleep 1` included).
    (builder,) = [r for r in results if not r["telemetry"]["install_cached"]]
    assert builder["telemetry"]["install_seconds"] >= 1.0
    # The image: the base image's own config (no idle loop, no session labels, no start-up env).
    (image,) = images
    assert image["Labels"]["acx.install_key"] == builder["telemetry"]["install_cache_key"]
    assert image["RepoTags"] == [f"acx-install/{builder['telemetry']['install_cache_key']}:latest"]
    assert not image.get("Entrypoint") and image["Cmd"] == ["/bin/bash"], image
    assert image["Env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], image["Env"]
    assert not image["Labels"].get("acx.session") and not image["Labels"].get("acx.pid"), image["Labels"]
    assert srv.requests == []  # the stand-in agent called no model


def test_a_changed_install_upload_or_image_installs_again(tmp_path: Path, run_label: str, cleanup_images) -> None:
    base = f"acx-test/install-base-{run_label}:latest"
    subprocess.run(["docker", "tag", BOOKWORM, base], check=True)
    cleanup_images.append(base)
    _tool(tmp_path, "tool-v1\n")
    install = INSTALL.format(label=run_label)
    ids: dict[str, tuple[str, int]] = {}
    cached: dict[str, bool] = {}

    def run(name: str, install: str, image: str = base) -> None:
        with FakeModelServer([]) as srv:
            res = _run(tmp_path, _spec(tmp_path, srv.base_url, f"{run_label}-{name}", install, image=image), "run")
        assert res.returncode == 0, res.stdout + res.stderr
        (result,) = _results(tmp_path, f"{run_label}-{name}")
        ids[name] = _reported(result)
        cached[name] = result["telemetry"]["install_cached"]

    try:
        run("first", install)
        run("again", install)  # a later run, same key: the image from the first one
        _tool(tmp_path, "tool-v2\n")
        run("upload", install)  # the uploaded file changed
        run("command", install + "; : changed")  # the install command changed
        # The base image changed (a new digest under the same tag).
        cid = subprocess.run(
            ["docker", "create", BOOKWORM, "true"], capture_output=True, text=True, check=True
        ).stdout.strip()
        subprocess.run(["docker", "commit", cid, base], check=True, capture_output=True)
        subprocess.run(["docker", "rm", cid], check=True, capture_output=True)
        run("image", install + "; : changed")
    finally:
        for name in ("first", "upload", "command", "image"):
            cleanup_images.extend(t for i in _images(f"{run_label}-{name}") for t in i["RepoTags"])
    assert cached == {"first": False, "again": True, "upload": False, "command": False, "image": False}, cached
    assert ids["again"] == ids["first"]
    assert len({ids[n][0] for n in ("first", "upload", "command", "image")}) == 4, ids
    assert all(count == 1 for _, count in ids.values()), ids


def test_a_failed_install_is_not_cached(tmp_path: Path, run_label: str, cleanup_images) -> None:
    _tool(tmp_path, "tool-v1\n")
    failing = INSTALL.format(label=run_label) + "; test -e /installed-agent/ok || { echo no >&2; exit 3; }"
    with FakeModelServer([]) as srv:
        res = _run(tmp_path, _spec(tmp_path, srv.base_url, f"{run_label}-f", failing, k=2), "run")
    results = _results(tmp_path, f"{run_label}-f")
    assert len(results) == 2, res.stdout + res.stderr
    for r in results:  # both tried to install (the first failure cached nothing) and both failed
        assert [(i["severity"], i["code"]) for i in r["issues"]] == [("fatal", "install_failed")], r["issues"]
        assert "exited with 3" in r["issues"][0]["message"]
    assert _images(f"{run_label}-f") == []
    assert srv.requests == []


def test_install_cache_false_installs_in_every_attempt(tmp_path: Path, run_label: str) -> None:
    _tool(tmp_path, "tool-v1\n")
    # The uncached install runs in the attempt's sandbox, with the task id.
    install = INSTALL.format(label=run_label).replace("! printenv ACX_TASK_ID", 'test "$ACX_TASK_ID" = q0')
    with FakeModelServer([]) as srv:
        spec = _spec(tmp_path, srv.base_url, f"{run_label}-n", install, k=2, extra=', "install_cache": false')
        plans = _run(tmp_path, spec, "compile", "--plans")
        res = _run(tmp_path, spec, "run")
    assert "in every attempt (install_cache = false)" in plans.stdout, plans.stdout
    assert res.returncode == 0, res.stdout + res.stderr
    results = _results(tmp_path, f"{run_label}-n")
    assert len({_reported(r)[0] for r in results}) == 2  # two installs
    assert all(r["telemetry"]["install_cached"] is False for r in results)
    assert _images(f"{run_label}-n") == []
