"""Artifacts on the host_process driver: the same module works on any driver's primitives.

No engine needed (absolute sources are host paths under a temp directory here).
# contract A4 A5 A6 A7
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver
from acx.interpreter import _artifacts
from acx.ir import ArtifactCollectCommand, ArtifactSpec, EnvironmentSpec, ExecutionPlan

pytestmark = pytest.mark.no_engine


def _plan(**kw: Any) -> ExecutionPlan:
    return ExecutionPlan(
        task_id="t",
        attempt=1,
        environment=EnvironmentSpec(id="host_process"),
        collect_artifacts=True,
        save_artifacts=True,
        **kw,
    )


async def _session(root: Path) -> Any:
    driver = HostProcessDriver(HostProcessConfig(workdir_root=str(root / "sessions")))
    return await driver.open(OpenRequest(session_id=f"h-{os.urandom(3).hex()}", startup_env={"PUB": "p"}))


def test_collect_and_restore_on_host_process(tmp_path: Path) -> None:
    # contract A5, A6, A7
    work = tmp_path / "work"
    plan = _plan(
        artifacts=[ArtifactSpec(source=str(work / "sub"), destination="sub", exclude=["*.tmp"])],
        artifact_collect=[
            ArtifactCollectCommand(
                command=f"mkdir -p {work}/sub/.h && echo $PUB > {work}/sub/a && echo x > {work}/sub/b.tmp "
                f"&& echo hidden > {work}/sub/.h/f"
            )
        ],
    )
    attempt = tmp_path / "attempt-1"

    async def main() -> None:
        session = await _session(tmp_path)
        async with session:
            outcome = await _artifacts.collect(session, plan, attempt)
        assert outcome.complete and not outcome.issues, outcome.issues
        assert (attempt / "artifacts/sub/a").read_text() == "p\n"
        assert not (attempt / "artifacts/sub/b.tmp").exists()
        # the workspace changes; restore puts the collected state back (hidden files included)
        (work / "sub/a").write_text("changed")
        (work / "sub/.stale").write_text("stale")
        session = await _session(tmp_path)
        async with session:
            assert await _artifacts.restore(session, plan, attempt) == []
        assert sorted(os.listdir(work / "sub")) == [".h", "a"]
        assert (work / "sub/a").read_text() == "p\n" and (work / "sub/.h/f").read_text() == "hidden\n"

    trio.run(main)


def test_escaping_symlink_refused_on_host_process(tmp_path: Path) -> None:
    # contract A4: the tree is validated after any driver's transfer, not only docker's
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok").write_text("ok")
    os.symlink("/etc/passwd", src / "evil")
    plan = _plan(artifacts=[ArtifactSpec(source=str(src), destination="src")])

    async def main() -> Any:
        session = await _session(tmp_path)
        async with session:
            return await _artifacts.collect(session, plan, tmp_path / "attempt")

    outcome = trio.run(main)
    assert not outcome.complete and [d["status"] for d in outcome.declared_artifacts] == ["failed"]
    manifest = json.loads(outcome.manifest_path.read_text())
    assert manifest["complete"] is False and manifest["failed_operation"] == "download"
    assert not (tmp_path / "attempt/artifacts/src").exists()
