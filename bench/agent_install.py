"""Installed agents: an install in every attempt vs the install cache, in the same run (issue 23).

Per agent, one ``acx run`` with two requests on ``--env docker``, N attempts each, one attempt at
a time: ``per-attempt`` (``install_cache: false``) installs the real agent in every attempt, and
``cached`` installs it once into an image every later attempt starts from. The packages are the
agent compatibility suite's (tests/docker/test_agent_compat.py; scripts/test.sh fetches them on
the host into ``.pytest_cache/``), uploaded and installed offline the same way: mini-swe-agent's
and aider's wheels with pip, OpenCode's npm prefix (a native binary) linked onto PATH (on
``acx-test/bookworm``), the Claude Code and Codex npm prefixes linked onto PATH (on the suite's
``acx-test/agents-node`` image: bookworm with the host's node), OpenHands' wheels into a venv (on
``acx-test/agents-py312``: bookworm with the host's CPython 3.12). The install
command carries a fresh nonce, so the first cached attempt is a cold one; the images made are
removed at the end.

    bash scripts/setup-docker.sh && bash scripts/test.sh   # or fetch the packages as it does
    python bench/agent_install.py [--attempts 3] [--agent mini-swe-agent --agent codex ...]

Prints each attempt's ``telemetry.install_seconds`` for both requests, and the ratio cached /
per-attempt for every attempt that found the image (target: at most 5 %).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BASE = "acx-test/bookworm:latest"


def _suite() -> Any:
    """tests/docker/test_agent_compat.py: the pinned packages, their offline installs, the image."""
    sys.path.insert(0, str(REPO / "tests" / "docker"))
    spec = importlib.util.spec_from_file_location("agent_compat", REPO / "tests" / "docker" / "test_agent_compat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _image(suite: Any, agent: str) -> str:
    if agent in ("mini-swe-agent", "aider", "opencode"):  # Python wheels, or a native binary
        return BASE
    if agent == "openhands":  # bookworm with the host's CPython 3.12
        return str(suite.build_python312_image())
    # The suite's image (built once, tagged by node's hash).
    return str(suite.build_agents_image())


def _spec(work: Path, suite: Any, agent: str, attempts: int, nonce: str) -> Path:
    (work / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "noop", "answer": "ok"}) + "\n")
    package = suite.PACKAGES[agent]
    if not package.exists():
        raise SystemExit(f"{package} is missing: fetch it as scripts/test.sh does")
    harness = {
        "id": "installed_agent",
        "upload": [str(package)],
        "install": f": {nonce}; " + suite.INSTALLS[agent],
        "command": "echo ok",
        "install_timeout_seconds": 900,
    }
    image = _image(suite, agent)
    requests = "".join(
        f"""  - name: {name}
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps({**harness, "install_cache": cache})}
    model: {{id: m, base_url: "http://127.0.0.1:9/v1"}}
    environment: {{id: docker, setup: {{image: "{image}"}}}}
    execution: {{attempts: {{k: {attempts}}}}}
    output: {{run_id: "bench-{nonce}"}}
"""
        for name, cache in (("per-attempt", False), ("cached", True))
    )
    spec = work / "run.yaml"
    spec.write_text(
        f"""version: 1
name: bench
runtime: {{results_dir: results, progress: none}}
task_concurrency: 1
requests:
{requests}"""
    )
    return spec


def _install_seconds(work: Path, request: str) -> list[tuple[bool, float]]:
    results = sorted((work / "results" / request).rglob("attempt-*/result.json"), key=lambda p: p.parent.name)
    out = []
    for path in results:
        result = json.loads(path.read_text())
        if result["status"] != "completed":
            raise SystemExit(f"{request} {path.parent.name}: {result['status']}: {result['issues']}")
        t = result["telemetry"]
        out.append((bool(t["install_cached"]), float(t["install_seconds"])))
    return out


AGENTS = ("mini-swe-agent", "claude-code", "codex", "opencode", "aider", "openhands")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--agent", action="append", choices=AGENTS, help="default: all")
    args = parser.parse_args()
    suite = _suite()
    for agent in args.agent or AGENTS:
        _bench(suite, agent, args.attempts)


def _bench(suite: Any, agent: str, attempts: int) -> None:
    nonce = uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory(prefix="acx-bench-install-") as tmp:
        work = Path(tmp)
        spec = _spec(work, suite, agent, attempts, nonce)
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "acx", "run", str(spec)],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
            )
            if not (work / "results" / "cached").exists():
                raise SystemExit(f"acx run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
            per = _install_seconds(work, "per-attempt")
            cached = _install_seconds(work, "cached")
        finally:
            _remove_images(f"bench-{nonce}")
    version = {
        "mini-swe-agent": suite.MINI_VERSION,
        "claude-code": suite.CLAUDE_VERSION,
        "codex": suite.CODEX_VERSION,
        "opencode": suite.OPENCODE_VERSION,
        "aider": suite.AIDER_VERSION,
        "openhands": suite.OPENHANDS_VERSION,
    }
    print(f"{agent} {version[agent]}, {attempts} attempt(s) per request, one at a time")
    hits: list[float] = []
    for n, ((_, uncached_s), (was_cached, cached_s)) in enumerate(zip(per, cached, strict=True), start=1):
        note = "image found" if was_cached else "installed it (cold: install + commit)"
        ratio = cached_s / uncached_s if uncached_s else float("nan")
        print(
            f"  attempt {n}: per-attempt install {uncached_s:7.2f} s · cached {cached_s:7.2f} s ({note}) · "
            f"ratio {ratio * 100:6.2f} %"
        )
        if was_cached:
            hits.append(ratio)
    mean_uncached = statistics.mean(s for _, s in per)
    print(f"  per-attempt install mean {mean_uncached:.2f} s")
    if hits:
        print(f"  ratio: cached / per-attempt = {statistics.mean(hits) * 100:.2f} % (target: at most 5 %)")


def _remove_images(run_prefix: str) -> None:
    """The install images this bench made (acx.install_run names its run)."""
    out = subprocess.run(
        ["docker", "image", "ls", "-q", "--filter", "label=acx.install_run"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for image in dict.fromkeys(out):
        info = subprocess.run(
            ["docker", "image", "inspect", "--format", '{{index .Config.Labels "acx.install_run"}}', image],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if info.startswith(run_prefix):
            subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True, check=False)


if __name__ == "__main__":
    main()
