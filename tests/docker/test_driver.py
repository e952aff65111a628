"""Docker-driver behaviour beyond the conformance suite, on a real engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from acx.drivers import probe_capabilities
from acx.drivers._base import OpenRequest
from acx.drivers.docker import docker_client, list_objects, sweep_orphans
from acx.errors import CapabilityError, EnvironmentSetupError
from acx.ir import EnvironmentSetup, NetworkPolicy, ResourceRequirements

BOOKWORM = "acx-test/bookworm:latest"
BUSYBOX = "acx-test/busybox:latest"

_IFACES = "python3 -c \"import socket;print(' '.join(sorted(i[1] for i in socket.if_nameindex())))\""


def _request(run_label: str, **kw: Any) -> OpenRequest:
    kw.setdefault("setup", EnvironmentSetup(image=BOOKWORM, workdir="/work"))
    kw["labels"] = {**kw.get("labels", {}), "acx.test": run_label}
    return OpenRequest(session_id=f"t-{run_label}-{os.urandom(3).hex()}", **kw)


def _run(fn: Any) -> Any:
    return trio.run(fn)


async def _wait_listening(session: Any, port: int) -> None:
    """Poll from inside ``session`` until a server listens on ``port`` (no fixed sleeps)."""
    check = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"
    with trio.fail_after(20):
        while not (await session.exec(["python3", "-c", check])).ok:
            await trio.sleep(0.1)


def test_labels_on_container_and_network(run_label: str, docker_driver: Any) -> None:
    # contract E1: everything the driver creates is labelled (session, pid, host, caller labels)
    async def main() -> None:
        req = _request(run_label, labels={"acx.test": run_label, "acx.run_id": "r1", "acx.task": "t1"})
        session = await docker_driver().open(req)
        try:
            objs = [r for r in list_objects(labels={"acx.test": run_label})]
            kinds = sorted(r.labels["docker.kind"] for r in objs)
            assert kinds == ["container", "network"], objs
            for r in objs:
                assert r.id == req.session_id
                assert r.labels["acx.run_id"] == "r1" and r.labels["acx.pid"] == str(os.getpid())
                assert r.labels["acx.host"]
        finally:
            await session.close()
        assert list_objects(labels={"acx.test": run_label}) == []

    _run(main)


def test_no_network_has_only_loopback_and_switches(run_label: str, docker_driver: Any) -> None:
    # contract P6, H4: no-network = no interface but loopback; dynamic switching both ways
    async def main() -> None:
        req = _request(run_label, network_policy=NetworkPolicy(network_mode="no-network"))
        session = await docker_driver().open(req)
        try:
            assert (await session.exec(_IFACES, shell=True)).stdout.split() == ["lo"]
            await session.set_network_policy(NetworkPolicy(network_mode="public"))
            ifaces = (await session.exec(_IFACES, shell=True)).stdout.split()
            assert "lo" in ifaces and len(ifaces) == 2, ifaces
            await session.set_network_policy(NetworkPolicy(network_mode="no-network"))
            assert (await session.exec(_IFACES, shell=True)).stdout.split() == ["lo"]
        finally:
            await session.close()
        assert list_objects(labels={"acx.test": run_label}) == []

    _run(main)


def test_public_sessions_are_isolated_from_each_other(run_label: str, docker_driver: Any) -> None:
    # contract P6: each public session has its own bridge network (only our own containers reached)
    async def main() -> None:
        driver = docker_driver()
        a = await driver.open(_request(run_label))
        b = await driver.open(_request(run_label))
        try:
            b_addr = (await b.endpoint(8000)).split(":")[0]
            probe = (
                "import socket,sys\ns=socket.socket();s.settimeout(1)\n"
                f"try:\n s.connect(('{b_addr}',8000));print('open')\n"
                "except ConnectionRefusedError:\n print('refused')\nexcept OSError:\n print('unreachable')\n"
            )
            # b listens; a (another network) must not reach it, b itself can.
            await b.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 &", shell=True)
            await _wait_listening(b, 8000)
            assert (await b.exec(["python3", "-c", probe])).stdout.strip() == "open"
            assert (await a.exec(["python3", "-c", probe], timeout=10)).stdout.strip() == "unreachable"
        finally:
            await a.close()
            await b.close()

    _run(main)


def test_unenforceable_requests_are_refused_not_downgraded(run_label: str, docker_driver: Any) -> None:
    # contract P7, H1: what the driver cannot enforce is an error, never a silent downgrade
    caps = probe_capabilities("docker")
    assert set(caps.network_modes) == {"public", "no-network", "allowlist", "denylist"}

    async def main() -> None:
        with pytest.raises(CapabilityError):
            await docker_driver().open(_request(run_label, resources=ResourceRequirements(gpu=1)))
        windows = EnvironmentSetup(image=BOOKWORM, os="windows")
        with pytest.raises(CapabilityError):
            await docker_driver().open(_request(run_label, setup=windows))

    _run(main)
    assert list_objects(labels={"acx.test": run_label}) == []


_PROXY_PROBE = """
import os, socket, sys, urllib.request
target, mode = sys.argv[1], sys.argv[2]
host, port = target.rsplit(":", 1)
if mode == "direct":
    try:
        socket.create_connection((host, int(port)), 2); print("open")
    except OSError:
        print("blocked")
elif mode == "get":
    try:
        print(urllib.request.urlopen(f"http://{target}/", timeout=10).status)
    except urllib.error.HTTPError as e:
        print(e.code)
    except OSError as e:
        print("error", e)
else:
    proxy = os.environ["HTTP_PROXY"].split("//")[1]
    ph, pp = proxy.rsplit(":", 1)
    s = socket.create_connection((ph, int(pp)), 10)
    s.sendall(f"CONNECT {target} HTTP/1.1\\r\\n\\r\\n".encode())
    status = s.recv(200).split()[1].decode()
    if status == "200":
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
        status += "/" + s.recv(200).split()[1].decode()
    print(status)
"""


def test_allowlist_and_denylist_enforced_through_egress_proxy(run_label: str, docker_driver: Any) -> None:
    # contract P6, P7, H4: allowlist = egress only to listed host:port through the enforcing proxy;
    # switching on the live session (allowlist ↔ public ↔ no-network). Only our own containers.
    async def main() -> None:
        driver = docker_driver()
        server = await driver.open(_request(run_label))
        agent = await driver.open(
            _request(run_label, network_policy=NetworkPolicy(network_mode="allowlist", allowed_hosts=[]))
        )
        try:
            await server.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 &", shell=True)
            api = docker_client().api
            api.connect_container_to_network(server.container_id, agent.network)
            info = api.inspect_container(server.container_id)
            ip = info["NetworkSettings"]["Networks"][agent.network]["IPAddress"]
            await _wait_listening(server, 8000)

            async def probe(target: str, mode: str) -> str:
                res = await agent.exec(["python3", "-c", _PROXY_PROBE, target, mode], timeout=30)
                return res.stdout.strip() or res.stderr

            assert await probe(f"{ip}:8000", "get") == "403"  # empty allowlist: nothing allowed
            await agent.set_network_policy(NetworkPolicy(network_mode="allowlist", allowed_hosts=[f"{ip}:8000"]))
            assert await probe(f"{ip}:8000", "get") == "200"
            assert await probe(f"{ip}:8000", "connect") == "200/200"
            assert await probe(f"{ip}:8001", "connect") == "403"  # port not listed
            assert await probe(f"{ip}:8000", "direct") == "blocked"  # no route around the proxy
            # denylist: everything through the proxy except the listed destinations (fail closed
            # for traffic that ignores the proxy)
            await server.exec("nohup python3 -m http.server 8001 >/dev/null 2>&1 &", shell=True)
            await _wait_listening(server, 8001)
            await agent.set_network_policy(NetworkPolicy(network_mode="denylist", denied_hosts=[f"{ip}:8000"]))
            assert await probe(f"{ip}:8000", "get") == "403"
            assert await probe(f"{ip}:8001", "get") == "200"
            assert await probe(f"{ip}:8001", "direct") == "blocked"
            await agent.set_network_policy(NetworkPolicy(network_mode="denylist", denied_hosts=["10.0.0.0/8"]))
            assert await probe(f"{ip}:8000", "get") == "200"
            await agent.set_network_policy(NetworkPolicy(network_mode="public"))
            assert await probe(f"{ip}:8000", "direct") == "open"
            await agent.set_network_policy(NetworkPolicy(network_mode="no-network"))
            assert await probe(f"{ip}:8000", "direct") == "blocked"
            assert (await agent.exec(_IFACES, shell=True)).stdout.split() == ["lo"]
        finally:
            await agent.close()
            await server.close()

    _run(main)
    assert list_objects(labels={"acx.test": run_label}) == []


def test_timed_out_command_leaves_no_process(run_label: str, docker_driver: Any) -> None:
    # contract T3: the deadline kills the whole tree, even children that left the process group
    script = "trap '' TERM; (trap '' TERM; sleep 300) & setsid sleep 301 & nohup sleep 302 >/dev/null & sleep 303"
    lister = "for d in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null); [ -n \"$c\" ] && echo \"$c\"; done"

    async def main() -> None:
        session = await docker_driver(BUSYBOX).open(_request(run_label, setup=EnvironmentSetup(image=BUSYBOX)))
        try:
            start = time.monotonic()
            res = await session.exec(script, shell=True, timeout=1)
            assert res.timed_out and time.monotonic() - start < 10
            left = (await session.exec(lister, shell=True)).stdout
            assert "sleep 30" not in left, left
        finally:
            await session.close()

    _run(main)


def test_resources_and_startup_env(run_label: str, docker_driver: Any) -> None:
    # contract V2: public vars reach container start-up, stage vars never do; resources enforced
    async def main() -> None:
        req = _request(
            run_label,
            resources=ResourceRequirements(cpu=0.5, memory_mb=256),
            startup_env={"PUBLIC_ONE": "p1"},
        )
        session = await docker_driver().open(req)
        try:
            with session.env_scope({"STAGE_ONLY": "s"}):
                res = await session.exec(["sh", "-c", "echo $PUBLIC_ONE-$STAGE_ONLY"])
                assert res.stdout == "p1-s\n"
            info = docker_client().api.inspect_container(session.container_id)
            env = info["Config"]["Env"]
            assert "PUBLIC_ONE=p1" in env and not any(e.startswith("STAGE_ONLY") for e in env)
            assert info["HostConfig"]["NanoCpus"] == 500_000_000
            assert info["HostConfig"]["Memory"] == 256 * 1024 * 1024
        finally:
            await session.close()

    _run(main)


def test_missing_image_is_a_clear_error_and_never_pulled(run_label: str, docker_driver: Any) -> None:
    # contract H3: the image lives in setup.image; acx never pulls unless asked
    async def main() -> None:
        req = _request(run_label, setup=EnvironmentSetup(image="acx-test/does-not-exist:1"))
        with pytest.raises(EnvironmentSetupError) as info:
            await docker_driver().open(req)
        assert info.value.code == "image_not_found"

    _run(main)
    assert list_objects(labels={"acx.test": run_label}) == []


def test_builds_task_dockerfile(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract H1: a Harbor task's environment/Dockerfile is built when no image is given
    ctx = tmp_path / "environment"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {BOOKWORM}\nWORKDIR /app\nRUN echo built-{run_label} > /app/marker\n"
        # an entrypoint that exits at once: `entrypoint: idle` replaces it
        'ENTRYPOINT ["python3", "-c", "raise SystemExit(3)"]\n'
    )

    async def main() -> None:
        req = OpenRequest(
            session_id=f"build-{run_label}",
            labels={"acx.test": run_label},
            setup=EnvironmentSetup(build_timeout_seconds=120),
            build_context=str(ctx),
        )
        session = await docker_driver(entrypoint="idle").open(req)
        try:
            assert session.workdir == "/app"  # the image WORKDIR is the default (H5)
            assert (await session.exec(["cat", "marker"])).stdout == f"built-{run_label}\n"
        finally:
            await session.close()
        # kept (the default, as Harbor does): it exits, and the open says why, with what to do
        with pytest.raises(EnvironmentSetupError) as info:
            await docker_driver().open(msgspec.structs.replace(req, session_id=f"build2-{run_label}"))
        assert info.value.code == "entrypoint_exited"
        assert "exec" in info.value.fields["help"]

    _run(main)
    assert list_objects(labels={"acx.test": run_label}) == []


def test_image_entrypoint_sees_public_startup_env(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract V2 (issue 22 item 2): the image's ENTRYPOINT runs, with the public start-up
    # variables, and execs the idle command it is given; stage variables never reach it
    ctx = tmp_path / "environment"
    ctx.mkdir()
    (ctx / "entry.sh").write_text('#!/bin/sh\nprintf %s "${GREETING-unset}" > /tmp/startup-env\nexec "$@"\n')
    (ctx / "Dockerfile").write_text(
        f'FROM {BUSYBOX}\nCOPY entry.sh /entry.sh\nRUN chmod +x /entry.sh\nENTRYPOINT ["/entry.sh"]\n'
    )

    async def main() -> None:
        req = OpenRequest(
            session_id=f"entry-{run_label}",
            labels={"acx.test": run_label},
            setup=EnvironmentSetup(build_timeout_seconds=120),
            build_context=str(ctx),
            startup_env={"GREETING": "injected"},
        )
        session = await docker_driver().open(req)
        try:
            with session.env_scope({"GREETING": "stage"}):
                assert (await session.exec(["cat", "/tmp/startup-env"])).stdout == "injected"
        finally:
            await session.close()

    _run(main)
    assert list_objects(labels={"acx.test": run_label}) == []


def test_escaping_symlink_download_is_refused(run_label: str, tmp_path: Path, docker_driver: Any) -> None:
    # contract A4: an archive with an escaping link is refused, nothing is written outside
    async def main() -> None:
        session = await docker_driver().open(_request(run_label))
        try:
            await session.exec("mkdir -p out && echo ok > out/f && ln -s /etc/passwd out/evil", shell=True)
            from acx.drivers.transfer import UnsafeArchiveError

            with pytest.raises(UnsafeArchiveError):
                await session.download_dir("out", str(tmp_path / "dl"))
        finally:
            await session.close()

    _run(main)


_HOLDER = textwrap.dedent(
    """
    import sys, trio
    sys.path.insert(0, {tests!r})
    from conftest import make_driver
    from acx.drivers._base import OpenRequest
    from acx.ir import EnvironmentSetup

    async def main():
        d = make_driver({image!r})
        for i in range(2):
            await d.open(OpenRequest(session_id=f"orphan-{label}-{{i}}", labels={{"acx.test": {label!r}}},
                                     setup=EnvironmentSetup(image={image!r})))
        print("ready", flush=True)
        await trio.sleep(600)

    trio.run(main)
    """
)


def test_sigkill_then_gc_leaves_nothing(run_label: str) -> None:
    # contract E1 (no debris): SIGKILL the creating process, then `acx gc` removes its objects
    code = _HOLDER.format(tests=str(Path(__file__).parent), image=BUSYBOX, label=run_label)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert len(list_objects(labels={"acx.test": run_label})) == 4  # 2 containers + 2 networks
        # a live run's objects are not orphans
        assert not [n for n in sweep_orphans() if run_label in n]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    from acx.cli import main as acx_main

    assert acx_main(["gc"]) == 0
    assert list_objects(labels={"acx.test": run_label}) == []
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=acx.test={run_label}", "-q"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == ""
    nets = subprocess.run(
        ["docker", "network", "ls", "--filter", f"label=acx.test={run_label}", "-q"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert nets.stdout.strip() == ""


def test_env_list_and_close_cli(run_label: str, docker_driver: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # contract E1: acx env list / close --id
    from acx.cli import main as acx_main

    async def main() -> str:
        session = await docker_driver(BUSYBOX).open(_request(run_label, setup=EnvironmentSetup(image=BUSYBOX)))
        return session.id

    sid = _run(main)
    assert acx_main(["env", "list", "--format", "json"]) == 0
    import json

    listed = json.loads(capsys.readouterr().out)
    assert any(r["id"] == sid for r in listed)
    assert acx_main(["env", "close", "--id", sid]) == 0
    assert list_objects(labels={"acx.test": run_label}) == []
    assert acx_main(["env", "close", "--id", sid]) == 2  # unknown id: a clear error, exit 2
