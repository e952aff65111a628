"""host_process: acx creates directories only inside a session's own directory (QA run #7)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver
from acx.errors import DriverError


def test_writes_create_parents_only_inside_the_session(tmp_path: Path) -> None:
    async def main() -> None:
        driver = HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path / "sessions")))
        session = await driver.open(OpenRequest(session_id="s1"))
        try:
            await session.write_text("a/b/c.txt", "inside")
            assert (Path(session.root) / "a" / "b" / "c.txt").read_text() == "inside"
            outside = tmp_path / "nowhere" / "deeper" / "prompt.txt"
            with pytest.raises(DriverError, match="does not exist on the host"):
                await session.write_text(str(outside), "x")
            assert not (tmp_path / "nowhere").exists()
            (tmp_path / "exists").mkdir()
            await session.write_text(str(tmp_path / "exists" / "f.txt"), "ok")  # an existing host dir is fine
        finally:
            await session.close()

    trio.run(main)
