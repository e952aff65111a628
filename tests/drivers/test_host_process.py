"""host_process specifics: network namespace, refusals, host paths, process groups (E1, H5, P7)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from acx.drivers import probe_capabilities
from acx.drivers._base import OpenRequest
from acx.drivers._specs import HostProcessConfig
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
    async def go() -> tuple[set[str], set[str], set[str], set[str]]:
        s = await _driver(tmp_path).open(
            OpenRequest(session_id="n", network_policy=NetworkPolicy(network_mode="no-network"))
        )
        try:
            isolated = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            await s.set_network_policy(NetworkPolicy())  # switch between phases
            before = _interfaces(Path("/proc/net/dev").read_text())
            public = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            stable = before & _interfaces(Path("/proc/net/dev").read_text())
            await s.set_network_policy(NetworkPolicy(network_mode="no-network"))
            again = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            return isolated, public, again, stable
        finally:
            await s.close()

    isolated, public, again, stable = trio.run(go)
    assert isolated == {"lo"} and again == {"lo"}
    # The host's namespace: every interface the host had before and after the command (others,
    # e.g. veths of containers that parallel tests start and stop, may come and go meanwhile).
    assert stable - {"lo"} and stable <= public


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


def test_agents_get_a_minimal_environment_unless_the_spec_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 11 item 6: an agent on host_process does not inherit acx's environment (every API key
    # of the user); it gets PATH, HOME, LANG, TMPDIR and what the plan declares.
    monkeypatch.setenv("ACX_HOST_ONLY", "leak")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user-key")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("TMPDIR", str(tmp_path))

    async def go(**kw: object) -> dict[str, str]:
        s = await _driver(tmp_path, **kw).open(OpenRequest(session_id="e", startup_env={"DECLARED": "yes"}))
        try:
            out = (await s.exec(["env"], env={"RUN_SCOPE": "1"})).stdout
        finally:
            await s.close()
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    minimal = trio.run(go)
    assert set(minimal) == {"PATH", "HOME", "LANG", "TMPDIR", "DECLARED", "RUN_SCOPE", "ACX_SESSION_ID"}
    assert minimal["LANG"] == "C.UTF-8" and minimal["TMPDIR"] == str(tmp_path)
    assert trio.run(lambda: go(inherit_env=False)) == minimal
    full = trio.run(lambda: go(inherit_env=True))
    assert full["ACX_HOST_ONLY"] == "leak" and full["OPENAI_API_KEY"] == "sk-user-key"


def test_asking_for_the_full_environment_is_a_compile_warning(tmp_path: Path) -> None:
    from acx.compiler import compile_orchestration

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "version: 1\nname: n\nrequests:\n  - name: r\n    benchmark: {id: exact_match, dataset: d.jsonl}\n"
        "    harness: {id: command, command: 'true'}\n    environment: {id: host_process, inherit_env: true}\n"
    )
    compiled = compile_orchestration(str(spec))
    (warning,) = [w for w in compiled.warnings if w.code == "W0304"]
    assert "inherit_env" in warning.message and "every" in warning.message and warning.span is not None
    spec.write_text(spec.read_text().replace("inherit_env: true", "inherit_env: false"))
    assert not [w for w in compile_orchestration(str(spec)).warnings if w.code == "W0304"]


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


def _wait_for_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and (text := path.read_text().strip()):
            return text
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def _gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            return True
        time.sleep(0.05)
    return False


# Detaches from exec (new session, stdio closed), ignores SIGTERM, leaves the session directory.
_ESCAPEE = """
import os, signal, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
os.chdir("/")
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_close_session_reaps_a_crashed_session(tmp_path: Path) -> None:
    # After a crash (no close), close_session(id) finds the session's processes by their
    # ACX_SESSION_ID marker (or a cwd inside the session dir) and removes the directory.
    pidfile = tmp_path / "escapee.pid"

    async def start() -> str:
        s = await _driver(tmp_path).open(OpenRequest(session_id="crashed"))
        res = await s.exec([sys.executable, "-c", _ESCAPEE, str(pidfile)], timeout=30)
        assert res.returncode == 0, res
        return str(s.workdir)  # never closed: the "crash"

    workdir = trio.run(start)
    escapee = int(_wait_for_file(pidfile))
    assert os.readlink(f"/proc/{escapee}/cwd") == "/"  # out of the session dir: only the marker finds it
    # A survivor without the marker, but working inside the session dir (like an agent that
    # cleared its environment).
    in_dir = subprocess.Popen(["sleep", "300"], cwd=workdir, env={"PATH": os.defpath}, start_new_session=True)
    # Unrelated processes: similar but different marker entries, outside the session dir.
    unrelated = [
        subprocess.Popen(["sleep", "300"], cwd=tmp_path, env={**os.environ, "ACX_SESSION_ID": value})
        for value in ("crashed-2", "xcrashed", "crashe")
    ]
    unrelated.append(
        subprocess.Popen(["sleep", "300"], cwd=tmp_path, env={"PATH": os.defpath, "OTHER_ACX_SESSION_ID": "crashed"})
    )
    other = _driver(tmp_path)
    try:
        listed = trio.run(other.list_sessions)
        assert [(r.id, r.labels["path"]) for r in listed] == [("crashed", workdir)]  # the id close_session takes
        trio.run(other.close_session, listed[0].id)
        assert _gone(escapee), "the escaped process (SIGTERM ignored, cwd elsewhere) survived"
        in_dir.wait(timeout=5)
        assert not Path(workdir).exists()
        assert trio.run(other.list_sessions) == []
        assert all(p.poll() is None for p in unrelated), "a process of another session was killed"
    finally:
        for p in [in_dir, *unrelated]:
            p.kill()
            p.wait()
        if not _gone(escapee, 0):
            os.kill(escapee, signal.SIGKILL)


def test_every_command_carries_the_session_marker(tmp_path: Path) -> None:
    async def go(inherit: bool) -> list[str]:
        s = await _driver(tmp_path, inherit_env=inherit).open(OpenRequest(session_id="marked"))
        try:
            plain = await s.exec(["printenv", "ACX_SESSION_ID"])
            forged = await s.exec(["printenv", "ACX_SESSION_ID"], env={"ACX_SESSION_ID": "other"})
            with s.env_scope({"ACX_SESSION_ID": "scoped"}):
                scoped = await s.exec(["printenv", "ACX_SESSION_ID"])
            return [r.stdout.strip() for r in (plain, forged, scoped)]
        finally:
            await s.close()

    assert trio.run(go, True) == ["marked"] * 3
    assert trio.run(go, False) == ["marked"] * 3


def test_sessions_whose_ids_share_a_prefix_are_kept_apart(tmp_path: Path) -> None:
    # "x" must not match the directory of "x-y"; ids changed for the file system get a hash.
    long_a, long_b = "r" * 50 + "a", "r" * 50 + "b"
    ids = ["x", "x-y", long_a, long_b, "we/ird:id", "we_ird_id"]

    async def go() -> tuple[dict[str, str], list[str]]:
        d = _driver(tmp_path)
        sessions = {i: await d.open(OpenRequest(session_id=i)) for i in ids}
        dirs = {i: str(s.workdir) for i, s in sessions.items()}
        await d.close_session("x")
        await d.close_session(long_a)
        await d.close_session("we/ird:id")
        left = sorted(r.id for r in await d.list_sessions())
        for s in sessions.values():
            await s.close()
        return dirs, left

    dirs, left = trio.run(go)
    assert len(set(dirs.values())) == len(ids)
    # listed by the id close_session takes: the id itself, or for a changed one its hashed form
    assert left == sorted(["x-y", Path(dirs[long_b]).name[len("acx-") : -9], "we_ird_id"])


def test_list_sessions_finds_leftover_and_kept_directories_only(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "acx-not-a-dir").write_text("")
    (tmp_path / "s" / "other-dir").mkdir()
    for name in ("acx-clean", "acx-bench-zq_k2x9p", "acx-x-1234567"):  # not session directory names
        (tmp_path / "s" / name).mkdir()

    async def go() -> tuple[list[str], list[str]]:
        d = _driver(tmp_path)
        closed = await d.open(OpenRequest(session_id="closed"))
        await closed.close()
        kept = await _driver(tmp_path, keep_workdir=True).open(OpenRequest(session_id="kept"))
        await kept.close()
        crashed = await d.open(OpenRequest(session_id="crashed"))
        other_run = await d.open(OpenRequest(session_id="run2-a1"))
        names = sorted((r.id, r.labels["path"]) for r in await d.list_sessions())
        of_run2 = [r.id for r in await d.list_sessions({"acx.run_id": "run2"})]
        assert of_run2 == ["run2-a1"]  # one run's sessions (ids are <run id>-<suffix>)
        return names, sorted((s.id, str(s.workdir)) for s in (kept, crashed, other_run))

    names, expected = trio.run(go)
    assert names == expected


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
