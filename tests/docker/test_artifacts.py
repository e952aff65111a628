"""Artifact collection, manifests and restore on a real engine.  # contract A4 A5 A6 A7"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import trio

from acx.drivers._base import OpenRequest
from acx.interpreter import _artifacts
from acx.ir import (
    ArtifactCollectCommand,
    ArtifactLimits,
    ArtifactSpec,
    EnvironmentSetup,
    EnvironmentSpec,
    ExecutionPlan,
)

BOOKWORM = "acx-test/bookworm:latest"


def _plan(**kw: Any) -> ExecutionPlan:
    kw.setdefault("save_artifacts", True)
    return ExecutionPlan(task_id="t", attempt=1, environment=EnvironmentSpec(id="docker"), collect_artifacts=True, **kw)


async def _open(driver: Any, label: str) -> Any:
    return await driver.open(
        OpenRequest(
            session_id=f"art-{label}-{os.urandom(3).hex()}",
            labels={"acx.test": label},
            setup=EnvironmentSetup(image=BOOKWORM, workdir="/app"),
            startup_env={"PUBLIC_V": "pub"},
        )
    )


SEED = (
    "mkdir -p /app/sub/.hid /app/empty /logs/artifacts && printf 'A' > /app/sub/a.txt && "
    "printf 'H' > /app/sub/.hid/h && head -c 3000 /dev/urandom > /app/sub/bin.dat && "
    "printf 'tmp' > /app/sub/x.tmp && printf 'r' > /app/result.txt"
)


def test_collect_statuses_manifest_and_restore(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract A4, A5, A6, A7
    plan = _plan(
        artifacts=[
            ArtifactSpec(source="/logs/artifacts"),
            ArtifactSpec(source="/app/sub", destination="submission", exclude=["*.tmp"]),
            ArtifactSpec(source="/app/result.txt", destination="result.txt"),
            ArtifactSpec(source="/app/empty"),
            ArtifactSpec(source="/app/missing"),
        ],
        artifact_collect=[
            # public vars only: the stage variable must not be visible here (A5, V2)
            ArtifactCollectCommand(command='echo "$PUBLIC_V-${STAGE_V:-none}" > /logs/artifacts/env.txt'),
        ],
    )

    async def main() -> None:
        driver = docker_driver()
        agent = await _open(driver, run_label)
        try:
            await agent.exec(SEED, shell=True)
            with agent.env_scope({"STAGE_V": "stage"}):
                outcome = await _artifacts.collect(agent, plan, tmp_path)
        finally:
            await agent.close()
        assert outcome.complete and not outcome.issues, outcome.issues
        status = {d["source"]: d["status"] for d in outcome.declared_artifacts}
        assert status == {
            "/logs/artifacts": "collected",
            "/app/sub": "collected",
            "/app/result.txt": "collected",
            "/app/empty": "collected",
            "/app/missing": "missing",
        }
        art = tmp_path / "artifacts"
        assert (art / "logs/artifacts/env.txt").read_text() == "pub-none\n"
        assert (art / "submission/.hid/h").read_text() == "H" and not (art / "submission/x.tmp").exists()
        assert (art / "result.txt").read_text() == "r" and (art / "app/empty").is_dir()
        assert all(
            d["checksum"].startswith("sha256:") for d in outcome.declared_artifacts if d["status"] == "collected"
        )
        manifest = json.loads(outcome.manifest_path.read_text())
        assert outcome.manifest_path.name.startswith("submission-") and manifest["complete"] is True

        # A7: a fresh verifier gets the artifacts back at their sources; a directory restore
        # replaces the contents (stale hidden files go) but keeps the directory.
        verifier = await _open(driver, run_label)
        try:
            await verifier.exec("mkdir -p /app/sub && touch /app/sub/.stale /app/sub/old", shell=True)
            issues = await _artifacts.restore(verifier, plan, tmp_path)
            assert issues == []
            listing = (await verifier.exec("cd /app/sub && ls -A | sort", shell=True)).stdout.split()
            assert listing == [".hid", "a.txt", "bin.dat"], listing
            assert (await verifier.read_bytes("/app/sub/bin.dat")) == (art / "submission/bin.dat").read_bytes()
            assert (await verifier.read_text("/app/result.txt")) == "r"
            assert await verifier.is_dir("/app/empty")
        finally:
            await verifier.close()

    trio.run(main)


def test_corrupt_artifacts_refuse_restore(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract A7: the manifest and checksums are verified before anything is restored
    plan = _plan(artifacts=[ArtifactSpec(source="/app/result.txt", destination="result.txt")])

    async def main() -> None:
        driver = docker_driver()
        agent = await _open(driver, run_label)
        try:
            await agent.exec(SEED, shell=True)
            outcome = await _artifacts.collect(agent, plan, tmp_path)
        finally:
            await agent.close()
        assert outcome.complete
        (tmp_path / "artifacts/result.txt").write_text("forged")
        verifier = await _open(driver, run_label)
        try:
            issues = await _artifacts.restore(verifier, plan, tmp_path)
            assert [i.code for i in issues] == ["artifact_checksum_mismatch"]
            assert not await verifier.is_file("/app/result.txt")
        finally:
            await verifier.close()

    trio.run(main)


def test_escaping_link_is_a_collection_error_with_partial_manifest(
    run_label: str, tmp_path: Path, docker_driver: Any
) -> None:
    # contract A4, A6: an escaping symlink is refused and recorded; the manifest is complete=false
    plan = _plan(
        artifacts=[
            ArtifactSpec(source="/app/evil", destination="evil"),
            ArtifactSpec(source="/app/result.txt", destination="result.txt"),
        ]
    )

    async def main() -> None:
        agent = await _open(docker_driver(), run_label)
        try:
            await agent.exec(SEED + " && mkdir -p /app/evil && ln -s /etc/shadow /app/evil/link", shell=True)
            return await _artifacts.collect(agent, plan, tmp_path)
        finally:
            await agent.close()

    outcome = trio.run(main)
    assert not outcome.complete and outcome.blocks_evaluation
    assert [i.code for i in outcome.issues] == ["artifact_collection_failed"]
    assert "escapes" in outcome.issues[0].message or "absolute" in outcome.issues[0].message
    manifest = json.loads(outcome.manifest_path.read_text())
    assert manifest["complete"] is False
    assert [e["status"] for e in manifest["entries"]] == ["failed", "collected"]
    assert not (tmp_path / "artifacts/evil").exists()
    # a partial manifest is never restored (A7)
    assert [i.code for i in trio.run(_restore_nothing, plan, tmp_path)] == ["artifact_manifest_incomplete"]


async def _restore_nothing(plan: ExecutionPlan, attempt_dir: Path) -> Any:
    return await _artifacts.restore(object(), plan, attempt_dir)


def test_limits_and_failing_command(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract A5, A6, T4: a failing collection command and a limit breach are collection errors
    plan = _plan(
        artifacts=[
            ArtifactSpec(source="/app/sub", destination="sub"),
            ArtifactSpec(source="/app/result.txt"),
        ],
        artifact_collect=[
            ArtifactCollectCommand(command="exit 3"),
            ArtifactCollectCommand(command="touch /app/never"),
        ],
        artifact_limits=ArtifactLimits(max_mb=1, max_files=2),
    )

    async def main() -> Any:
        agent = await _open(docker_driver(), run_label)
        try:
            await agent.exec(SEED, shell=True)
            outcome = await _artifacts.collect(agent, plan, tmp_path)
            assert not await agent.is_file("/app/never")  # commands stop at the first failure
            return outcome
        finally:
            await agent.close()

    outcome = trio.run(main)
    codes = [i.code for i in outcome.issues]
    assert codes[0] == "artifact_collect_failed" and "exited with 3" in outcome.issues[0].message
    statuses = [d["status"] for d in outcome.declared_artifacts]
    assert statuses == ["failed", "not_collected"], statuses
    assert not outcome.complete


def test_collect_command_timeout_and_save_off(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract A2, A5: commands run with their own deadline even when saving is off
    plan = _plan(
        save_artifacts=False,
        artifacts=[ArtifactSpec(source="/app/result.txt")],
        artifact_collect=[ArtifactCollectCommand(command="sleep 30", timeout_seconds=0.5)],
    )

    async def main() -> Any:
        agent = await _open(docker_driver(), run_label)
        try:
            return await _artifacts.collect(agent, plan, tmp_path)
        finally:
            await agent.close()

    outcome = trio.run(main)
    assert [i.code for i in outcome.issues] == ["artifact_collect_timeout"]
    assert outcome.manifest_path is None and outcome.declared_artifacts == []


def test_dotdot_tar_is_a_collection_error(run_label: str, tmp_path: Path, docker_driver: Any, monkeypatch: Any) -> None:
    # contract A4, A6: an archive member with `../` (as a hostile engine/agent could produce) is
    # refused, recorded as a collection error, and nothing lands outside artifacts/
    import io
    import tarfile

    from acx.drivers.docker._files import DockerFiles

    def evil_fetch(self: Any, path: str, max_raw: Any, transfer: Any = None) -> Any:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in ("sub/ok.txt", "sub/../../../escaped.txt"):
                info = tarfile.TarInfo(name)
                info.size = 2
                tar.addfile(info, io.BytesIO(b"hi"))
        buf.seek(0)
        return buf

    plan = _plan(artifacts=[ArtifactSpec(source="/app/sub", destination="sub")])

    async def main() -> Any:
        agent = await _open(docker_driver(), run_label)
        try:
            await agent.exec(SEED, shell=True)
            monkeypatch.setattr(DockerFiles, "_fetch", evil_fetch)
            return await _artifacts.collect(agent, plan, tmp_path)
        finally:
            await agent.close()

    outcome = trio.run(main)
    assert [d["status"] for d in outcome.declared_artifacts] == ["failed"]
    assert [i.code for i in outcome.issues] == ["artifact_collection_failed"] and ".." in outcome.issues[0].message
    assert not list(tmp_path.rglob("escaped.txt")) and not outcome.complete


def test_exec_in_a_removed_container_is_a_driver_error(run_label: str, docker_driver: Any) -> None:
    # contract E2: a sandbox that disappeared is a DriverError, not a docker SDK exception
    import pytest

    from acx.drivers.docker import docker_client
    from acx.errors import DriverError

    async def main() -> None:
        agent = await _open(docker_driver(), run_label)
        try:
            docker_client().api.remove_container(agent.container_id, force=True)
            with pytest.raises(DriverError):
                await agent.exec(["true"])
        finally:
            await agent.close()  # idempotent and tolerant of the missing container

    trio.run(main)


def test_download_deadline_is_enforced_promptly(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract T4, A6: artifact_limits.timeout_seconds bounds the transfer itself — the collector
    # walks away from a slow download instead of waiting for it
    import time

    plan = _plan(
        artifacts=[ArtifactSpec(source="/app/big", destination="big")],
        artifact_limits=ArtifactLimits(timeout_seconds=0.3),
    )

    async def main() -> Any:
        agent = await _open(docker_driver(), run_label)
        try:
            await agent.exec("mkdir -p /app && head -c 400000000 /dev/zero > /app/big", shell=True, timeout=60)
            start = time.monotonic()
            outcome = await _artifacts.collect(agent, plan, tmp_path)
            return outcome, time.monotonic() - start
        finally:
            await agent.close()

    outcome, elapsed = trio.run(main)
    assert elapsed < 5, elapsed
    assert [i.code for i in outcome.issues] == ["artifact_download_timeout"]
    assert [d["status"] for d in outcome.declared_artifacts] == ["failed"] and not outcome.complete


def test_a_container_killed_from_outside_is_reported_as_gone(run_label: str, docker_driver: Any) -> None:
    # Not "the agent exited with 137" plus a raw HTTP 409: the sandbox itself stopped.
    import pytest

    from acx.drivers.docker import docker_client
    from acx.errors import DriverError

    async def main() -> None:
        agent = await _open(docker_driver(), run_label)
        try:

            async def kill_soon() -> None:
                await trio.sleep(1)
                await trio.to_thread.run_sync(docker_client().api.kill, agent.container_id)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_soon)
                with pytest.raises(DriverError, match="is gone: it was stopped from outside") as info:
                    await agent.exec(["sleep", "30"])
            assert info.value.code == "sandbox_stopped"
            with pytest.raises(DriverError, match="is gone"):
                await agent.exec(["true"])
        finally:
            await agent.close()

    trio.run(main)
