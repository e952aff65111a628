"""host_process bookkeeping on the fast path: session directories, stdin, cwd and env (E1, E2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig
from acx.drivers.host_process import HostProcessDriver
from acx.errors import DriverError


def _driver(tmp_path: Path, **kw: bool) -> HostProcessDriver:
    return HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path), **kw))


def test_no_bookkeeping_file_beside_the_session_dir(tmp_path: Path) -> None:  # contract E1
    # Crash recovery needs nothing written per session or per exec: the session directory (found
    # by list_sessions) and the ACX_SESSION_ID marker of every command (found by close_session).
    async def go() -> None:
        driver = _driver(tmp_path)
        s = await driver.open(OpenRequest(session_id="g"))
        root = Path(str(s.workdir))
        assert [(r.id, r.labels["path"]) for r in await driver.list_sessions()] == [("g", str(root))]
        for _ in range(2):
            assert (await s.exec(["sh", "-c", "echo $ACX_SESSION_ID"])).stdout == "g\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == [root.name]
        await s.close()
        assert not root.exists() and not any(tmp_path.iterdir())
        assert await driver.list_sessions() == []

    trio.run(go)


@pytest.mark.parametrize("size", [0, 1, 4096, 4097, 65536, 65537, 300_000])
def test_stdin_of_any_size_arrives_whole(tmp_path: Path, size: int) -> None:  # contract E2
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]

    async def go() -> str:
        s = await _driver(tmp_path).open(OpenRequest(session_id="sz"))
        try:
            res = await s.exec(["wc", "-c"], stdin=payload, timeout=30)
            return res.stdout.strip()
        finally:
            await s.close()

    assert trio.run(go) == str(size)


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
    assert not any(tmp_path.iterdir())


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
        # inherit_env: the host's variables reach commands only when the spec asks (issue 11.6).
        req = OpenRequest(session_id="env", startup_env={"ACX_PUB": "pub"})
        s = await _driver(tmp_path, inherit_env=True).open(req)
        try:
            script = "echo ${ACX_FROM_HOST:-none} ${ACX_PUB:-none} ${ACX_CALL:-none}"
            plain = (await s.exec(["sh", "-c", script])).stdout.strip()
            extra = (await s.exec(["sh", "-c", script], env={"ACX_CALL": "call"})).stdout.strip()
            return [plain, extra]
        finally:
            await s.close()

    assert trio.run(go) == ["host pub none", "host pub call"]
