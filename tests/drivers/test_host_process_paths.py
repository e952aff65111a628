"""host_process bookkeeping on the fast path: the process-group record and stdin (E1, E2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver
from acx.errors import DriverError


def _driver(tmp_path: Path) -> HostProcessDriver:
    return HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path)))


def test_groups_record_exists_from_open_and_lists_every_exec(tmp_path: Path) -> None:  # contract E1
    async def go() -> None:
        driver = _driver(tmp_path)
        s = await driver.open(OpenRequest(session_id="g"))
        root = Path(str(s.workdir))
        groups = root.with_name(root.name + ".groups")
        # Recorded before any command runs: a crash right after the first spawn is still reapable.
        assert groups.is_file()
        assert [r.id for r in await driver.list_sessions()] == [root.name]
        pids = []
        for _ in range(2):
            res = await s.exec(["sh", "-c", "echo $$"])
            pids.append(res.stdout.strip())
        assert groups.read_text().split() == pids
        await s.close()
        assert not groups.exists() and not root.exists()
        assert await driver.list_sessions() == []

    trio.run(go)


def test_stdin_larger_than_the_pipe_buffer_arrives_whole(tmp_path: Path) -> None:  # contract E2
    payload = bytes(range(256)) * 4096  # 1 MiB: more than a pipe holds, fed as the command reads

    async def go() -> tuple[int, str]:
        s = await _driver(tmp_path).open(OpenRequest(session_id="in"))
        try:
            small = await s.exec(["wc", "-c"], stdin=b"abc")
            assert small.stdout.strip() == "3"
            big = await s.exec(["wc", "-c"], stdin=payload)
            return big.returncode, big.stdout.strip()
        finally:
            await s.close()

    assert trio.run(go) == (0, str(len(payload)))


def test_stdin_to_a_command_that_never_reads_does_not_hang(tmp_path: Path) -> None:  # contract E2
    async def go() -> int:
        s = await _driver(tmp_path).open(OpenRequest(session_id="nr"))
        try:
            with trio.fail_after(10):
                res = await s.exec(["true"], stdin=b"x" * (1 << 20))
            return res.returncode
        finally:
            await s.close()

    assert trio.run(go) == 0


def test_empty_and_populated_session_dirs_are_both_removed(tmp_path: Path) -> None:  # contract E1
    async def go() -> list[Path]:
        driver = _driver(tmp_path)
        empty = await driver.open(OpenRequest(session_id="empty"))
        full = await driver.open(OpenRequest(session_id="full"))
        await full.exec(["sh", "-c", "mkdir -p a/b && echo x > a/b/f && echo y > top"])
        roots = [Path(str(empty.workdir)), Path(str(full.workdir))]
        await empty.close()
        await full.close()
        return roots

    for root in trio.run(go):
        assert not root.exists()
        assert not root.with_name(root.name + ".groups").exists()


def test_missing_working_directory_is_a_driver_error_not_127(tmp_path: Path) -> None:  # contract E2
    async def go() -> None:
        s = await _driver(tmp_path).open(OpenRequest(session_id="cwd"))
        try:
            with pytest.raises(DriverError, match="does not exist"):
                await s.exec(["true"], cwd="no/such/dir")
            (Path(str(s.workdir)) / "afile").write_text("")
            with pytest.raises(DriverError, match="does not exist"):
                await s.exec(["true"], cwd="afile")
            # A missing program in an existing directory is still the shell's 127.
            res = await s.exec(["acx-no-such-program-xyz"])
            assert res.returncode == 127
        finally:
            await s.close()

    trio.run(go)


def test_commands_see_host_env_plus_session_and_call_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # contract E2
    monkeypatch.setenv("ACX_FROM_HOST", "host")

    async def go() -> list[str]:
        s = await _driver(tmp_path).open(OpenRequest(session_id="env", startup_env={"ACX_PUB": "pub"}))
        try:
            script = "echo ${ACX_FROM_HOST:-none} ${ACX_PUB:-none} ${ACX_CALL:-none}"
            plain = (await s.exec(["sh", "-c", script])).stdout.strip()
            extra = (await s.exec(["sh", "-c", script], env={"ACX_CALL": "call"})).stdout.strip()
            return [plain, extra]
        finally:
            await s.close()

    assert trio.run(go) == ["host pub none", "host pub call"]
