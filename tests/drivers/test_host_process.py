"""host_process specifics: network namespace, refusals, host paths, process groups (E1, H5, P7)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig, probe_capabilities
from acx.drivers.host_process import HostProcessDriver
from acx.errors import CapabilityError, EnvironmentSetupError
from acx.ir import EnvironmentSetup, NetworkPolicy

NETNS = "no-network" in probe_capabilities("host_process").network_modes


def _driver(tmp_path: Path, **kw: object) -> HostProcessDriver:
    return HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path / "s"), **kw))  # type: ignore[arg-type]


def _interfaces(text: str) -> set[str]:
    return {line.split(":")[0].strip() for line in text.splitlines()[2:] if ":" in line}


@pytest.mark.skipif(not NETNS, reason="this machine cannot create network namespaces")
def test_no_network_runs_in_an_empty_network_namespace(tmp_path: Path) -> None:
    async def go() -> tuple[set[str], set[str], set[str]]:
        s = await _driver(tmp_path).open(
            OpenRequest(session_id="n", network_policy=NetworkPolicy(network_mode="no-network"))
        )
        try:
            isolated = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            await s.set_network_policy(NetworkPolicy())  # switch between phases
            public = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            await s.set_network_policy(NetworkPolicy(network_mode="no-network"))
            again = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            return isolated, public, again
        finally:
            await s.close()

    isolated, public, again = trio.run(go)
    assert isolated == {"lo"} and again == {"lo"}
    assert public == _interfaces(Path("/proc/net/dev").read_text())


@pytest.mark.parametrize("mode", ["allowlist", "denylist"])
def test_host_filtering_policies_are_refused(tmp_path: Path, mode: str) -> None:
    # contract P7: refuse, never downgrade.
    policy = NetworkPolicy(network_mode=mode, allowed_hosts=["example.com"], denied_hosts=["example.com"])  # type: ignore[arg-type]
    with pytest.raises(CapabilityError) as info:
        trio.run(lambda: _driver(tmp_path).open(OpenRequest(session_id="a", network_policy=policy)))
    assert "docker" in (info.value.help or "") + str(info.value)


def test_setup_workdir_is_a_host_path_that_must_exist(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentSetupError, match="host path"):
        trio.run(
            lambda: _driver(tmp_path).open(
                OpenRequest(session_id="w", setup=EnvironmentSetup(workdir="/nonexistent-acx"))
            )
        )
    existing = tmp_path / "work"
    existing.mkdir()

    async def go() -> str:
        s = await _driver(tmp_path).open(OpenRequest(session_id="w", setup=EnvironmentSetup(workdir=str(existing))))
        try:
            return (await s.exec(["pwd"])).stdout.strip()
        finally:
            await s.close()

    assert trio.run(go) == str(existing)
    assert existing.is_dir()  # a user directory is never removed


def test_absolute_paths_are_host_paths_and_session_dir_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "host-file.txt"

    async def go() -> str:
        s = await _driver(tmp_path).open(OpenRequest(session_id="p"))
        await s.write_text(str(target), "on the host")
        wd = str(s.workdir)
        await s.close()
        return wd

    wd = trio.run(go)
    assert target.read_text() == "on the host"
    assert not os.path.exists(wd)


def test_keep_workdir(tmp_path: Path) -> None:
    async def go() -> str:
        s = await _driver(tmp_path, keep_workdir=True).open(OpenRequest(session_id="k"))
        await s.write_text("x.txt", "kept")
        await s.close()
        return str(s.workdir)

    assert (Path(trio.run(go)) / "x.txt").read_text() == "kept"


def test_inherit_env_false(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACX_HOST_ONLY", "leak")

    async def go(inherit: bool) -> str:
        s = await _driver(tmp_path, inherit_env=inherit).open(OpenRequest(session_id="e"))
        try:
            return (await s.exec(["sh", "-c", "echo ${ACX_HOST_ONLY:-none}"])).stdout.strip()
        finally:
            await s.close()

    assert trio.run(go, True) == "leak" and trio.run(go, False) == "none"


def test_background_child_holding_stdout_does_not_hang_exec(tmp_path: Path) -> None:
    async def go() -> tuple[float, str]:
        s = await _driver(tmp_path).open(OpenRequest(session_id="b"))
        try:
            start = trio.current_time()
            res = await s.exec(["sh", "-c", "sleep 60 & echo started"])
            return trio.current_time() - start, res.stdout
        finally:
            await s.close()

    elapsed, out = trio.run(go)
    assert out == "started\n" and elapsed < 10


def test_close_session_reaps_a_crashed_session(tmp_path: Path) -> None:
    # After a crash (no close), the session's process groups and directory can be released by id.
    import subprocess
    import time

    async def start() -> tuple[str, int]:
        d = _driver(tmp_path)
        s = await d.open(OpenRequest(session_id="crashed"))
        await s.exec(["true"])  # records the session's first process group
        # A detached survivor inside the session dir, like an agent orphaned by SIGKILL.
        proc = subprocess.Popen(["sleep", "300"], cwd=s.workdir, start_new_session=True)
        with open(tmp_path / "s" / (Path(str(s.workdir)).name + ".groups"), "a") as fh:
            fh.write(f"{proc.pid}\n")
        return str(s.workdir), proc.pid

    workdir, pid = trio.run(start)
    unrelated = subprocess.Popen(["sleep", "300"], cwd=tmp_path, start_new_session=True)
    try:
        listed = trio.run(_driver(tmp_path).list_sessions)
        assert [r.id for r in listed] == [Path(workdir).name]
        trio.run(_driver(tmp_path).close_session, "crashed")
        for _ in range(50):
            if subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0 or _zombie(pid):
                break
            time.sleep(0.05)
        assert _zombie(pid) or subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0
        assert not Path(workdir).exists()
        assert unrelated.poll() is None  # a process outside the session is never touched
    finally:
        unrelated.kill()
        unrelated.wait()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
