"""What the real-agent tests on ``host_process`` share (issue 23): installing a pinned CLI once into
``.pytest_cache/`` (an npm prefix or a venv), and one ``acx run`` of a shipped definition against
acx's scripted fake model server through the run's gateway.

A failed install skips the tests loudly; with the agent's ``ACX_REQUIRE_*`` flag set (scripts/test.sh
and .ci/run set them when they fetched the package) it fails them instead. The definitions keep the
agent's logs under /logs/agent (a sandbox path): here that is a directory of the test's own, and HOME
is the test's, because host_process runs on the host.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import msgspec
import pytest

from acx.cli import main
from acx.components.harnesses._agents import AGENTS, LOG_DIR
from acx.testing.fake_models import FakeModelServer

REPO = Path(__file__).resolve().parents[2]
NPM_CACHE = REPO / ".pytest_cache" / "acx-npm"
PIP_CACHE = REPO / ".pytest_cache" / "acx-pip"


def require(flag: str | None, label: str, reason: str) -> NoReturn:
    """Skip loudly — or fail, when ``flag`` is set to 1 (the package was meant to be there)."""
    if flag and os.environ.get(flag) == "1":
        pytest.fail(f"{reason} ({flag}=1)", pytrace=False)
    pytest.skip(f"!!! real {label} tests SKIPPED: {reason} !!!")


@contextlib.contextmanager
def _install_lock(target: Path) -> Iterator[None]:
    """One installer per target across pytest's workers (each has its own session fixtures): a
    second worker waits, then finds the install done, instead of building the same venv or npm
    prefix at the same time. scripts/test.sh installs them all before pytest; this is the fallback."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_version(binary: Path, version: str, flag: str | None, label: str) -> Path:
    try:
        res = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        require(flag, label, f"{binary} --version failed: {exc}")
    if res.returncode != 0 or version not in res.stdout:
        # e.g. an npm platform binary (an optional dependency) did not come down
        require(flag, label, f"{binary} --version: {res.stdout} {res.stderr[-1000:]}")
    return binary


def npm_cli(
    name: str, package: str, version: str, binary: str, *, flag: str | None, label: str, given: str = ""
) -> Path:
    """``package@version`` installed once into ``.pytest_cache/acx-npm/<name>-<version>`` (the
    directory scripts/test.sh fills); ``given`` (an env var's value) names an installed CLI instead."""
    if given:
        return Path(given)
    prefix = NPM_CACHE / f"{name}-{version}"
    path = prefix / "node_modules" / ".bin" / binary
    with _install_lock(prefix):
        _npm_install(prefix, path, f"{package}@{version}", flag, label)
    return _check_version(path, version, flag, label)


def _npm_install(prefix: Path, path: Path, package: str, flag: str | None, label: str) -> None:
    if not path.exists():
        npm = shutil.which("npm")
        if npm is None:
            require(flag, label, "npm is not installed")
        prefix.mkdir(parents=True, exist_ok=True)
        cmd = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", package]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            require(flag, label, f"npm install {package} timed out after 600 s")
        if res.returncode != 0 or not path.exists():
            require(flag, label, f"npm install {package} failed: {res.stderr[-2000:]}")


def venv_cli(
    name: str,
    package: str,
    version: str,
    binary: str,
    *,
    flag: str | None,
    label: str,
    python: str = sys.executable,
    timeout: float = 1200,
    check_version: bool = True,
) -> Path:
    """``package==version`` installed once into the venv ``.pytest_cache/acx-pip/<name>-<version>``."""
    venv = PIP_CACHE / f"{name}-{version}"
    path = venv / "bin" / binary
    with _install_lock(venv):
        _venv_install(venv, path, f"{package}=={version}", python, timeout, flag, label)
    if not path.exists():
        require(flag, label, f"{path} is missing after the install")
    return _check_version(path, version, flag, label) if check_version else path


def _venv_install(
    venv: Path, path: Path, requirement: str, python: str, timeout: float, flag: str | None, label: str
) -> None:
    if not path.exists():
        interpreter = shutil.which(python)
        if interpreter is None:
            require(flag, label, f"no {python} interpreter")
        try:
            subprocess.run([interpreter, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
            pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
            subprocess.run([*pip, requirement], check=True, capture_output=True, timeout=timeout)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(venv, ignore_errors=True)  # a half-made venv is not an install
            require(flag, label, f"could not install {requirement}: {exc}")


def moved(value: Any, logs: Path) -> Any:
    """The definition's value with /logs/agent moved to ``logs``."""
    return json.loads(json.dumps(value).replace(LOG_DIR, str(logs)))


def shipped_harness(agent: str, tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """The ``installed_agent`` harness of the shipped definition (its env and aliases as shipped),
    with its logs moved under ``tmp_path``; the CLI is installed already (by a fixture)."""
    logs = tmp_path / "agent-logs"
    d = AGENTS[agent]
    return {
        "id": "installed_agent",
        "agent": agent,
        "install": "true",
        "agent_dir": str(tmp_path / "agent-dir"),
        "command": moved(d.command, logs),
        "logs": moved(d.logs, logs),
        "answer": moved(msgspec.to_builtins(d.answer), logs),
        **overrides,
    }


def run_qa(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    srv: FakeModelServer,
    harness: dict[str, Any],
    *,
    protocol: str,
    question: str = "What is 6*7?",
    answer: str = "42",
    key: str | None = None,
    env: dict[str, str] | None = None,
    timeout: int = 180,
    retries: int | None = 0,
) -> dict[str, Any]:
    """One ``acx run`` of one QA item on host_process; returns attempt 1's result.json."""
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": question, "answer": answer}) + "\n")
    model = f'{{id: fake-model, base_url: "{srv.base_url}", api_protocol: {protocol}'
    model += f', api_key: "{key}"}}' if key else "}"
    environment = "{id: host_process"
    environment += f", run_env_variables: {json.dumps(env)}}}" if env else "}"
    execution = f"{{run_timeout_seconds: {timeout}" + (f", max_retries: {retries}}}" if retries is not None else "}")
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: real
runtime: {{results_dir: results, progress: none}}
requests:
  - name: real
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {json.dumps(harness)}
    model: {model}
    environment: {environment}
    execution: {execution}
"""
    )
    monkeypatch.chdir(tmp_path)
    main(["run", str(spec)])
    return json.loads(next((tmp_path / "results").rglob("attempt-1/result.json")).read_text())


def home_env(tmp_path: Path, bin_dir: Path, **extra: str) -> dict[str, str]:
    """The run's environment: the CLI on PATH and a HOME of the test's own (agents keep their
    session stores and caches under it)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(home), **extra}


def model_calls(tmp_path: Path) -> list[dict[str, Any]]:
    """The gateway's records of attempt 1's model calls."""
    data = json.loads(next((tmp_path / "results").rglob("attempt-1/model_calls.json")).read_text())
    return data["calls"] if isinstance(data, dict) else data
