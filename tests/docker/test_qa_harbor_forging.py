"""QA regressions on a real engine: reward forging by leftover processes, verifier secrets in
result.json, and Dockerfile builds that would pull a missing base image.

* An agent's background process (``nohup … &``, or ``env -i setsid …`` which drops the
  ``ACX_EXEC_ID`` tag) kept rewriting ``/logs/verifier/reward.json`` during shared (reuse)
  verification and scored 1.0 for doing nothing.
* A ``verifier.env`` value resolved from ``${VAR}`` and printed by ``test.sh`` reached
  ``verifier_output_tail`` in result.json unmasked.
* With ``pull = never`` a build of ``FROM <absent image>`` tried to reach a registry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers.docker import list_objects
from acx.errors import EnvironmentSetupError
from acx.ir import EnvironmentSetup

BOOKWORM = "acx-test/bookworm:latest"
BUSYBOX = "acx-test/busybox:latest"
ROOT = Path(__file__).resolve().parents[2]
SECRET = "qa-grader-s3cr3t-XYZZY"

# Forgers: a loop that keeps writing a perfect reward.json, detached in two ways.
_NOHUP = (
    "echo '{\"reward\": 1}' > /tmp/forged.json; "
    "nohup sh -c 'while :; do mkdir -p /logs/verifier; cp /tmp/forged.json /logs/verifier/reward.json; "
    "sleep 0.02; done' >/dev/null 2>&1 &"
)
_ENV_I = (
    "echo '{\"reward\": 1}' > /tmp/forged.json; "
    "env -i /usr/bin/setsid /bin/sh -c 'while :; do /bin/mkdir -p /logs/verifier; "
    "/bin/cp /tmp/forged.json /logs/verifier/reward.json; /bin/sleep 0.02; done' >/dev/null 2>&1 &"
)


def _acx_str(text: str) -> str:
    return json.dumps(text)


@pytest.fixture(scope="module")
def forged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `acx run` with both forgers and a task whose verifier prints its secret."""
    base = tmp_path_factory.mktemp("forge")
    shutil.copytree(ROOT / "examples" / "harbor" / "hello-workdir", base / "hello-workdir")
    sec = base / "sec"
    (sec / "tests").mkdir(parents=True)
    (sec / "instruction.md").write_text("Do nothing.\n")
    (sec / "task.toml").write_text(
        textwrap.dedent(
            """\
            schema_version = "1.4"
            [verifier]
            network_mode = "no-network"
            [verifier.env]
            GRADER_KEY = "${QA_C_GRADER_SECRET}"
            [environment]
            docker_image = "acx-test/bookworm:latest"
            """
        )
    )
    (sec / "tests" / "test.sh").write_text(
        '#!/bin/bash\nset -x\necho "using key $GRADER_KEY"\necho 1 > /logs/verifier/reward.txt\n'
    )
    spec = base / "forge.acx"
    spec.write_text(
        "orchestration forge {\n"
        "  defaults { environment docker }\n"
        '  run nohup { benchmark harbor { path = "hello-workdir" }\n'
        f"    harness command {{ command = {_acx_str(_NOHUP)} }} }}\n"
        '  run envi { benchmark harbor { path = "hello-workdir" }\n'
        f"    harness command {{ command = {_acx_str(_ENV_I)} }} }}\n"
        '  run secret { benchmark harbor { path = "sec" }\n'
        '    harness command { command = "true" } }\n'
        "}\n"
    )
    env = {**os.environ, "QA_C_GRADER_SECRET": SECRET}
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(base / "r"), "--progress", "plain"],
        cwd=base,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    return base / "r"


def _result(results: Path, request: str) -> dict[str, Any]:
    (path,) = results.glob(f"{request}/*/details/*/*/attempt-1/result.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.parametrize("request_name", ["nohup", "envi"])
def test_background_forger_does_not_set_the_reward(forged_run: Path, request_name: str) -> None:
    # contract B1
    res = _result(forged_run, request_name)
    # Shared verification: the verifier wrote reward.txt = 0; the forged reward.json is gone.
    assert res["metrics"] == {"score": 0.0, "correct": False}, res
    assert res["extra"]["rewards"] == {"reward": 0.0}
    assert [r for r in list_objects() if r.labels.get("acx.request") == request_name] == []


def test_verifier_secret_is_masked_in_result_json(forged_run: Path) -> None:
    # contract B1
    res = _result(forged_run, "secret")
    tail = res["extra"]["verifier_output_tail"]
    assert "using key ********" in tail, tail
    for path in forged_run.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def _request(label: str, **kw: Any) -> OpenRequest:
    kw.setdefault("setup", EnvironmentSetup(image=BOOKWORM, workdir="/work"))
    return OpenRequest(session_id=f"qa-{label}-{os.urandom(3).hex()}", labels={"acx.test": label}, **kw)


_LISTER = "for d in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null); [ -n \"$c\" ] && echo \"$c\"; done"


@pytest.mark.parametrize("image", [BUSYBOX, BOOKWORM])
def test_kill_stray_processes_kills_everything_the_commands_left(
    run_label: str, image: str, docker_driver: Any
) -> None:
    # contract B1
    started = (
        "sh -c 'trap \"\" HUP; sleep 301' >/dev/null 2>&1 & "
        "env -i setsid sleep 302 >/dev/null 2>&1 & "
        "(trap '' TERM; setsid sh -c 'trap \"\" TERM; sleep 303' &) ; "
        "echo started"
    )

    async def main() -> None:
        session = await docker_driver(image).open(_request(run_label, setup=EnvironmentSetup(image=image)))
        try:
            res = await session.exec(started, shell=True)
            assert res.ok and res.stdout == "started\n"
            await trio.sleep(0.3)
            before = (await session.exec(_LISTER, shell=True)).stdout
            assert "sleep 301" in before and "sleep 302" in before and "sleep 303" in before, before
            await session.kill_stray_processes()
            after = (await session.exec(_LISTER, shell=True)).stdout
            assert "sleep 30" not in after, after
            # The container's own processes survive: the session still works.
            assert (await session.exec(["echo", "alive"])).stdout == "alive\n"
            await session.kill_stray_processes()  # idempotent: nothing left to kill
        finally:
            await session.close()

    trio.run(main)
    assert list_objects(labels={"acx.test": run_label}) == []


def test_build_with_missing_base_image_is_refused_not_pulled(
    run_label: str, tmp_path: Path, docker_driver: Any
) -> None:
    # contract B1
    ctx = tmp_path / "environment"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM acx-test/qa-absent-{run_label}:1\nRUN true\n")

    async def main() -> None:
        req = OpenRequest(
            session_id=f"qa-build-{run_label}",
            labels={"acx.test": run_label},
            setup=EnvironmentSetup(build_timeout_seconds=120),
            build_context=str(ctx),
        )
        start = time.monotonic()
        with pytest.raises(EnvironmentSetupError) as info:
            await docker_driver().open(req)
        assert time.monotonic() - start < 30
        assert info.value.code == "image_not_found"
        assert f"acx-test/qa-absent-{run_label}:1" in str(info.value)
        assert "pull: missing" in info.value.fields["help"]

    trio.run(main)
    assert list_objects(labels={"acx.test": run_label}) == []
