"""bwrap specifics beyond the conformance suite: network namespaces, refusals, filesystem isolation,
stray processes, resource limits, session discovery (contracts E1, P7, T3, H5)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers.bwrap import BwrapConfig, BwrapDriver, BwrapSession, probe_bwrap
from acx.errors import CapabilityError, DriverError
from acx.ir import EnvironmentSetup, NetworkPolicy, ResourceRequirements


def _driver(tmp_path: Path, **kw: object) -> BwrapDriver:
    return BwrapDriver(BwrapConfig(workdir_root=str(tmp_path / "s"), **{"allow_root": True, **kw}))  # type: ignore[arg-type]


def _interfaces(text: str) -> set[str]:
    return {line.split(":")[0].strip() for line in text.splitlines()[2:] if ":" in line}


async def _open(driver: BwrapDriver, sid: str = "t", **kw: object) -> BwrapSession:
    session = await driver.open(OpenRequest(session_id=sid, **kw))  # type: ignore[arg-type]
    assert isinstance(session, BwrapSession)
    return session


def test_no_network_is_an_empty_namespace_and_public_is_the_hosts(tmp_path: Path) -> None:
    # contract P7: no-network enforced by the kernel; the policy switches between phases
    async def go() -> tuple[set[str], set[str], set[str]]:
        s = await _open(_driver(tmp_path), network_policy=NetworkPolicy(network_mode="no-network"))
        try:
            isolated = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            await s.set_network_policy(NetworkPolicy())
            public = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            await s.set_network_policy(NetworkPolicy(network_mode="no-network"))
            again = _interfaces((await s.exec(["cat", "/proc/net/dev"])).stdout)
            return isolated, public, again
        finally:
            await s.close()

    isolated, public, again = trio.run(go)
    assert isolated == {"lo"} and again == {"lo"}
    assert public - {"lo"}, public  # the host's interfaces


def test_a_policy_switch_kills_what_the_old_policy_started(tmp_path: Path) -> None:
    # contract P7: a daemon started under `public` must not keep the network into a no-network phase
    async def go() -> bool:
        s = await _open(_driver(tmp_path))
        try:
            daemon = "setsid sh -c 'echo $$ > /app/bg.pid; exec sleep 300' >/dev/null 2>&1 &"
            await s.exec(daemon + " while [ ! -s /app/bg.pid ]; do sleep 0.01; done", shell=True, timeout=30)
            pid = (await s.read_text("/app/bg.pid")).strip()
            assert (await s.exec(["sh", "-c", f"kill -0 {pid}"])).ok, "the daemon must outlive its exec"
            await s.set_network_policy(NetworkPolicy(network_mode="no-network"))
            return (await s.exec(["sh", "-c", f"kill -0 {pid}"])).ok
        finally:
            await s.close()

    assert trio.run(go) is False


@pytest.mark.parametrize("mode", ["allowlist", "denylist"])
def test_host_filtering_policies_are_refused_not_downgraded(tmp_path: Path, mode: str) -> None:
    # contract P7
    assert mode not in probe_bwrap().network_modes
    assert "egress" in probe_bwrap().unsupported_reasons[mode]
    policy = NetworkPolicy(network_mode=mode, allowed_hosts=["example.com"], denied_hosts=["example.com"])  # type: ignore[arg-type]
    with pytest.raises(CapabilityError, match="cannot enforce"):
        trio.run(lambda: _driver(tmp_path).open(OpenRequest(session_id="a", network_policy=policy)))

    async def switch() -> None:
        s = await _open(_driver(tmp_path))
        try:
            await s.set_network_policy(policy)
        finally:
            await s.close()

    with pytest.raises(CapabilityError):
        trio.run(switch)


def test_sessions_are_isolated_from_each_other_and_from_the_host(tmp_path: Path, bookworm: str) -> None:
    # contract E1: /app, /logs, /tests belong to one session; the host's files are not visible
    marker = tmp_path / "host-only.txt"
    marker.write_text("host secret")

    async def go() -> None:
        driver = _driver(tmp_path, rootfs=bookworm)
        a, b = await _open(driver, "a"), await _open(driver, "b")
        try:
            for d in ("/app", "/logs", "/tests"):
                assert (await a.exec(["sh", "-c", f"mkdir -p {d} && echo a > {d}/f"])).ok
                assert not await b.is_file(f"{d}/f")
            assert (await a.exec(["cat", str(marker)])).returncode != 0
            assert (await a.exec(["sh", "-c", "echo x > /usr/local/new && cat /usr/local/new"])).stdout == "x\n"
            assert not Path(bookworm, "usr/local/new").exists(), "the root filesystem must stay untouched"
            assert not await b.is_file("/usr/local/new")
        finally:
            await a.close()
            await b.close()

    trio.run(go)


def test_file_transfers_resolve_symlinks_inside_the_sandbox(tmp_path: Path, bookworm: str) -> None:
    # contract E1: a link the agent made to an absolute path never reaches the host's file
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")

    async def go() -> None:
        s = await _open(_driver(tmp_path, rootfs=bookworm))
        try:
            await s.exec(["ln", "-s", str(outside), "/app/link"])
            with pytest.raises(FileNotFoundError):
                await s.read_bytes("/app/link")
            await s.exec(["sh", "-c", f"mkdir -p {outside.parent} && echo inside > {outside}"])
            assert await s.read_text("/app/link") == "inside\n"
            await s.write_text("/app/link", "written")
            assert outside.read_text() == "host file"
            await s.exec(["sh", "-c", "mkdir -p /app/out && ln -s /etc/passwd /app/out/pw"])
            with pytest.raises(DriverError, match="escapes"):
                await s.download_dir("/app/out", str(tmp_path / "dl"))
        finally:
            await s.close()

    trio.run(go)


def test_read_only_root_without_overlay_names_the_writable_directories(tmp_path: Path) -> None:
    # the host-system root is read-only: a write there is a located DriverError, not a silent no-op
    async def go() -> None:
        s = await _open(_driver(tmp_path))
        try:
            with pytest.raises(DriverError, match="read-only") as info:
                await s.write_text("/usr/acx-should-not-exist", "x")
            assert "/app" in str(info.value)
            assert not Path("/usr/acx-should-not-exist").exists()
        finally:
            await s.close()

    trio.run(go)


def test_kill_stray_processes_reaches_setsid_daemons(tmp_path: Path) -> None:
    # contract T3: what left its process group is still in the sandbox's pid namespace
    async def go() -> tuple[bool, bool]:
        s = await _open(_driver(tmp_path))
        try:
            # The exec waits for the daemon's pid: by then it has left the command's process group
            # (which exec() kills on return), as a real escaped daemon has.
            daemon = "setsid sh -c 'echo $$ > /app/d.pid; while :; do sleep 1; done' >/dev/null 2>&1 &"
            await s.exec(daemon + " while [ ! -s /app/d.pid ]; do sleep 0.01; done", shell=True, timeout=30)
            alive = ["sh", "-c", f"kill -0 {int((await s.read_text('/app/d.pid')).strip())}"]
            before = (await s.exec(alive)).ok
            await s.kill_stray_processes()
            return before, (await s.exec(alive)).ok
        finally:
            await s.close()

    assert trio.run(go) == (True, False)


def test_close_kills_everything_and_removes_the_session_directory(tmp_path: Path) -> None:
    async def go() -> tuple[str, int]:
        s = await _open(_driver(tmp_path))
        await s.exec("setsid sleep 300 >/dev/null 2>&1 &", shell=True)
        pid1, directory = s._state.pid1, s.directory
        await s.close()
        return directory, pid1

    directory, pid1 = trio.run(go)
    assert not os.path.exists(directory)
    assert _gone(pid1)


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its (host) parent has yet to reap."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True


def test_leftover_session_directories_are_listed_and_closed(tmp_path: Path) -> None:
    async def go() -> tuple[list[str], list[str]]:
        driver = _driver(tmp_path, keep_workdir=True)
        s = await _open(driver, "run1-task-1")
        (live,) = await driver.list_sessions()
        assert live.owner_alive is True and not live.kept  # acx env / gc: an open session is live
        await s.close()  # kept: its directory stays
        (kept,) = await driver.list_sessions()
        assert kept.owner_alive is False and kept.kept and kept.state == "kept"
        listed = [r.id for r in await driver.list_sessions({"acx.run_id": "run1"})]
        await driver.close_session("run1-task-1")
        with pytest.raises(DriverError) as info:
            await driver.close_session("run1-task-1")
        assert info.value.code == "session_not_found"
        return listed, [r.id for r in await driver.list_sessions()]

    listed, after = trio.run(go)
    assert listed == ["run1-task-1"] and after == []


CGROUPS = set(probe_bwrap().resources) >= {"cpu", "memory_mb"}


@pytest.mark.skipif(not CGROUPS, reason="no writable cgroup hierarchy here: resources are refused instead")
def test_memory_limit_is_enforced(tmp_path: Path, bookworm: str) -> None:
    # contract P7: a requested limit is enforced, not noted
    hog = "b = bytearray(300 * 1024 * 1024); print('allocated')"

    async def go() -> tuple[int, int]:
        driver = _driver(tmp_path, rootfs=bookworm)
        limited = await _open(driver, "m", resources=ResourceRequirements(memory_mb=64, cpu=0.5))
        free = await _open(driver, "f")
        try:
            small = await limited.exec(["python3", "-c", "print('ok')"])
            assert small.ok, small
            return (await limited.exec(["python3", "-c", hog])).returncode, (
                await free.exec(["python3", "-c", hog])
            ).returncode
        finally:
            await limited.close()
            await free.close()

    limited_rc, free_rc = trio.run(go)
    assert free_rc == 0
    assert limited_rc in (-9, 137), limited_rc  # SIGKILL by the OOM killer


@pytest.mark.skipif(CGROUPS, reason="this machine enforces limits; the refusal path is not reachable")
def test_limits_without_cgroups_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CapabilityError):
        trio.run(lambda: _open(_driver(tmp_path), resources=ResourceRequirements(memory_mb=64)))


def test_unenforceable_resources_are_refused(tmp_path: Path) -> None:
    # contract P7: storage and GPUs are never silently dropped
    for res in (ResourceRequirements(storage_mb=100), ResourceRequirements(gpu=1)):
        with pytest.raises(CapabilityError):
            trio.run(lambda res=res: _open(_driver(tmp_path), resources=res))  # type: ignore[misc]


def test_a_workdir_on_a_system_directory_is_refused_on_a_read_only_root(tmp_path: Path) -> None:
    with pytest.raises(DriverError, match="read-only"):
        trio.run(lambda: _open(_driver(tmp_path), setup=EnvironmentSetup(workdir="/usr/work")))


def test_a_workdir_outside_the_writable_list_gets_its_own_directory(tmp_path: Path) -> None:
    async def go() -> str:
        s = await _open(_driver(tmp_path), setup=EnvironmentSetup(workdir="/srv/job"))
        try:
            assert (await s.exec(["touch", "f"])).ok
            return (await s.exec(["pwd"])).stdout.strip()
        finally:
            await s.close()

    assert trio.run(go) == "/srv/job"


def test_planning_refuses_what_bwrap_cannot_enforce_and_imports_no_trio(tmp_path: Path) -> None:
    # contract P7 (refuse at planning, never downgrade), P8 (compile imports no run-time library)
    import subprocess
    import sys

    examples = Path(__file__).resolve().parents[2] / "examples" / "harbor"
    spec = tmp_path / "spec.acx"
    spec.write_text(
        f'run r {{\n  benchmark harbor {{ path = "{examples}" }}\n  harness oracle\n'
        "  environment bwrap {\n"
        '    run_network_policy = { network_mode = "allowlist", allowed_hosts = ["example.com"] }\n  }\n}\n'
    )
    (tmp_path / ".git").mkdir()
    probe = (
        "import sys, acx\n"
        "try:\n    acx.compile(sys.argv[1])\nexcept Exception as exc:\n    print(getattr(exc, 'code', exc))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'trio', 'docker', 'httpx'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(spec)], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout.split() == ["E0451", "[]"], out.stdout + out.stderr
    ok = spec.read_text().replace(
        'network_mode = "allowlist", allowed_hosts = ["example.com"]', 'network_mode = "no-network"'
    )
    spec.write_text(ok)
    out = subprocess.run(
        [sys.executable, "-c", probe, str(spec)], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout.split() == ["[]"], out.stdout + out.stderr  # Harbor tasks plan on bwrap


def test_a_crashed_owner_leaves_an_orphan_and_no_processes(tmp_path: Path) -> None:
    # acx gc's input: the sandbox died with its acx process; its directory is an orphan (owner gone)
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, trio\n"
        "from acx.drivers._base import OpenRequest\n"
        "from acx.drivers.bwrap import BwrapConfig, BwrapDriver\n"
        "async def go():\n"
        "    driver = BwrapDriver(BwrapConfig(workdir_root=sys.argv[1], allow_root=True))\n"
        "    s = await driver.open(OpenRequest(session_id='crash-1'))\n"
        "    await s.exec('setsid sleep 300 >/dev/null 2>&1 &', shell=True)\n"
        "    print(s._state.pid1, flush=True)\n"
        "    await trio.sleep(300)\n"
        "trio.run(go)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "s")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pid1 = int(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 20
    while not _gone(pid1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid1), "the sandbox must die with the acx process that opened it"
    (record,) = trio.run(_driver(tmp_path).list_sessions)
    assert record.id == "crash-1" and record.owner_alive is False and not record.kept


#: How many CA certificates OpenSSL's default paths hold (loaded: cert_store_stats counts them).
_CA_COUNT = "import ssl; c = ssl.create_default_context(); print(c.cert_store_stats()['x509_ca'])"


def test_the_hosts_etc_is_not_visible_on_the_host_root(tmp_path: Path) -> None:
    # contract E1 (issue 24 item 7): a sandbox on the host's system directories gets a synthetic
    # /etc — no shadow, no docker key, no host accounts — that still runs programs, resolves
    # localhost and verifies TLS
    probe = "/etc/acx-host-only-probe"
    made = not os.path.exists(probe) and os.access("/etc", os.W_OK)
    if made:
        Path(probe).write_text("host secret\n")

    async def go() -> dict[str, object]:
        s = await _open(_driver(tmp_path))
        try:
            run = s.exec
            return {
                "shadow": (await run(["cat", "/etc/shadow"])).ok,
                "docker": (await run(["sh", "-c", "ls /etc/docker"])).ok,
                "probe": (await run(["cat", probe])).ok,
                "passwd": (await run(["cat", "/etc/passwd"])).stdout,
                "whoami": (await run(["id", "-un"])).stdout.strip(),
                "localhost": (await run(["getent", "ahostsv4", "localhost"])).stdout,
                "awk": (await run(["sh", "-c", "echo 1 2 | awk '{print $2}'"])).stdout.strip(),
                "certs": (await run(["python3", "-c", _CA_COUNT])).stdout.strip(),
                "ro": (await run(["sh", "-c", "echo x > /etc/passwd"])).ok,
            }
        finally:
            await s.close()

    try:
        got = trio.run(go)
    finally:
        if made:
            os.unlink(probe)
    assert got["shadow"] is False and got["docker"] is False
    if made:
        assert got["probe"] is False
    assert {line.split(":")[0] for line in str(got["passwd"]).splitlines()} == {"root", "nobody"}
    assert got["whoami"] == "root" and "127.0.0.1" in str(got["localhost"]) and got["awk"] == "2"
    if os.path.isdir("/etc/ssl/certs"):
        assert int(str(got["certs"]) or 0) > 0
    assert got["ro"] is False


def test_root_without_allow_root_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 24 item 7: under root the sandbox's one mapped uid is the host's uid 0 — an explicit
    # opt-in, never a default; an unprivileged acx needs none
    from acx.errors import EnvironmentSetupError

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    driver = BwrapDriver(BwrapConfig(workdir_root=str(tmp_path / "s")))
    for call in (driver.prepare, lambda: driver.open(OpenRequest(session_id="r"))):
        with pytest.raises(EnvironmentSetupError) as info:
            trio.run(call)
        assert "acx runs as root" in str(info.value) and "allow_root = true" in info.value.fields["help"]
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").iterdir())  # no session directory
    assert trio.run(_driver(tmp_path).prepare) == []  # opted in
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert trio.run(BwrapDriver(BwrapConfig(workdir_root=str(tmp_path / "s"))).prepare) == []


def test_acx_run_as_root_on_bwrap_is_exit_2_with_the_opt_in(tmp_path: Path) -> None:
    # issue 24 item 7, end to end through the CLI (E0701: the run is refused up front)
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("acx runs as an unprivileged user here: nothing to refuse")
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart.acx"
    results = tmp_path / "r"
    out = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(quickstart), "--env", "bwrap", "--results-dir", str(results)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "E0701" in out.stderr and "acx runs as root" in out.stderr and "allow_root" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not list(results.rglob("run_info.json"))
