"""Under allowlist/denylist the egress proxy is the only thing a sandbox reaches (issue 11.1, 11.2).

Servers run on the host (the test process), on an ephemeral port per address family; probes run
inside the sandbox, directly and through the proxy. Every address probed is the host's own or a
gateway of a network this test's sandbox created: loopback-equivalent targets only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers.docker import docker_client, list_objects
from acx.ir import EnvironmentSetup, NetworkPolicy
from conftest import BOOKWORM

# Each target on its own thread: a dropped SYN costs the whole timeout.
_PROBE = r"""
import socket, sys, threading
mode, targets = sys.argv[1], sys.argv[2:]
out = {}
def one(t):
    host, port = t.rsplit(":", 1)
    host, port = host.strip("[]"), int(port)
    try:
        if mode == "direct":
            fam = socket.AF_INET6 if ":" in host else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(3)
            if "%" in host:
                h, scope = host.split("%")
                s.connect((h, port, 0, socket.if_nametoindex(scope)))
            else:
                s.connect((host, port))
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            out[t] = "open:" + s.recv(100).split()[1].decode()
        else:
            ph, pp = mode.rsplit(":", 1)
            s = socket.create_connection((ph, int(pp)), 10)
            s.settimeout(20)
            s.sendall(("CONNECT %s HTTP/1.1\r\n\r\n" % t).encode())
            status = s.recv(200).split()[1].decode()
            if status == "200":
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                status += "/" + s.recv(200).split()[1].decode()
            out[t] = status
    except OSError as e:
        out[t] = "blocked"
threads = [threading.Thread(target=one, args=(t,)) for t in targets]
for th in threads: th.start()
for th in threads: th.join()
for t in targets: print(t, out.get(t, "blocked"))
"""


class _HostServer:
    """A tiny HTTP answerer on the host (the test process), any address of one family."""

    def __init__(self, family: socket.AddressFamily) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            with contextlib.suppress(OSError), conn:
                conn.settimeout(5)
                conn.recv(1000)
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def host_servers() -> Iterator[dict[str, _HostServer]]:
    servers = {"v4": _HostServer(socket.AF_INET)}
    if _has_ipv6():
        servers["v6"] = _HostServer(socket.AF_INET6)
    yield servers
    for server in servers.values():
        server.close()


def _has_ipv6() -> bool:
    try:
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()
    except OSError:
        return False
    return os.path.exists("/proc/net/if_inet6")


def _host_ipv4() -> dict[str, str]:
    """Interface → IPv4 address of the host (SIOCGIFADDR), loopback excluded."""
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            addr = socket.inet_ntoa(raw[20:24])
            if not addr.startswith("127."):
                out[name] = addr
    return out


def _host_ipv6() -> list[str]:
    """The host's IPv6 addresses (global and link-local; loopback excluded)."""
    out = []
    if not os.path.exists("/proc/net/if_inet6"):
        return out
    with open("/proc/net/if_inet6") as fh:
        for line in fh:
            hexaddr = line.split()[0]
            addr = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(hexaddr))
            if addr != "::1":
                out.append(addr)
    return out


def _request(label: str, policy: NetworkPolicy) -> OpenRequest:
    return OpenRequest(
        session_id=f"iso-{label}-{os.urandom(3).hex()}",
        setup=EnvironmentSetup(image=BOOKWORM, workdir="/work"),
        network_policy=policy,
        labels={"acx.test": label},
    )


def _gateway(api: Any, network: str) -> str:
    return str(api.inspect_network(network)["IPAM"]["Config"][0]["Gateway"])


async def _probe(session: Any, mode: str, targets: list[str]) -> dict[str, str]:
    res = await session.exec(["python3", "-c", _PROBE, mode, *targets], timeout=120)
    assert res.returncode == 0, res.stderr
    return dict(line.rsplit(" ", 1) for line in res.stdout.splitlines())


def test_only_the_proxy_is_reachable_under_allowlist_and_denylist(
    run_label: str, docker_driver: Any, host_servers: dict[str, _HostServer]
) -> None:
    # contract P6, P7 (issue 11.1): no route around the proxy to the host — not the session
    # bridge's gateway, not the internal network's gateway, not 172.17.0.1, not the host's own
    # addresses, in either address family, on any port; and through the proxy only what the
    # policy admits.
    v4 = host_servers["v4"].port
    v6 = host_servers["v6"].port if "v6" in host_servers else None

    async def main() -> None:
        driver = docker_driver()
        session = await driver.open(_request(run_label, NetworkPolicy(network_mode="allowlist", allowed_hosts=[])))
        try:
            api = docker_client().api
            bridge_gw, internal_gw = _gateway(api, session.network), _gateway(api, session.internal_network)
            host_v4 = _host_ipv4()
            # docker0 (172.17.0.1 by default) when the engine has it, else another host address.
            docker0_gw = host_v4.get("docker0") or next(
                a for a in host_v4.values() if a not in (bridge_gw, internal_gw)
            )
            v4_addrs = sorted({bridge_gw, internal_gw, docker0_gw, *host_v4.values()})
            direct = [f"{a}:{v4}" for a in v4_addrs]
            if v6 is not None:
                # Link-local addresses are tried through the sandbox's own interface.
                direct += [f"[{a}%eth0]:{v6}" if a.startswith("fe80") else f"[{a}]:{v6}" for a in _host_ipv6()]
            proxy = session._proxy_env["HTTP_PROXY"].split("//")[1]
            v6_global = [a for a in _host_ipv6() if not a.startswith("fe80")]

            # Before the servers are trusted, prove that probes can see them: public mode
            # reaches the host through the bridge gateway.
            await session.set_network_policy(NetworkPolicy(network_mode="public"))
            seen = await _probe(session, "direct", [f"{bridge_gw}:{v4}"])
            assert seen == {f"{bridge_gw}:{v4}": "open:200"}

            for policy in (
                NetworkPolicy(network_mode="allowlist", allowed_hosts=[]),
                NetworkPolicy(network_mode="denylist", denied_hosts=["192.0.2.123"]),
            ):
                await session.set_network_policy(policy)
                got = await _probe(session, "direct", direct)
                assert got == dict.fromkeys(direct, "blocked"), (policy.network_mode, got)
                # The proxy's other ports and the proxy alias on another port: nothing either.
                other = await _probe(session, "direct", ["acx-egress-proxy:22", "acx-egress-proxy:8080"])
                assert set(other.values()) == {"blocked"}, other

            # Through the proxy: an empty allowlist admits nothing, in either family.
            await session.set_network_policy(NetworkPolicy(network_mode="allowlist", allowed_hosts=[]))
            via = [f"{bridge_gw}:{v4}", f"{docker0_gw}:{v4}"] + ([f"[{v6_global[0]}]:{v6}"] if v6 and v6_global else [])
            got = await _probe(session, proxy, via)
            assert got == dict.fromkeys(via, "403"), got
            # Listed: reachable through the proxy (and only through it).
            await session.set_network_policy(
                NetworkPolicy(network_mode="allowlist", allowed_hosts=[f"{bridge_gw}:{v4}"])
            )
            got = await _probe(session, proxy, [f"{bridge_gw}:{v4}", f"{bridge_gw}:{v4 + 1}"])
            assert got == {f"{bridge_gw}:{v4}": "200/200", f"{bridge_gw}:{v4 + 1}": "403"}, got
            assert await _probe(session, "direct", [f"{bridge_gw}:{v4}"]) == {f"{bridge_gw}:{v4}": "blocked"}
            # Denylist: the denied host is refused through the proxy, the rest is admitted.
            await session.set_network_policy(NetworkPolicy(network_mode="denylist", denied_hosts=[bridge_gw]))
            got = await _probe(session, proxy, [f"{bridge_gw}:{v4}", f"{docker0_gw}:{v4}"])
            assert got == {f"{bridge_gw}:{v4}": "403", f"{docker0_gw}:{v4}": "200/200"}, got
            # ... in every spelling (issue 11.2): mapped IPv6, decimal, hex, octal, userinfo, dot.
            octets = [int(o) for o in bridge_gw.split(".")]
            number = int.from_bytes(bytes(octets), "big")
            spellings = [
                f"[::ffff:{bridge_gw}]",
                f"[::ffff:{number >> 16:x}:{number & 0xFFFF:x}]",
                str(number),
                hex(number),
                ".".join("0" + oct(o)[2:] for o in octets),
                f"u:p@{bridge_gw}",
                f"{bridge_gw}.",
            ]
            got = await _probe(session, proxy, [f"{s}:{v4}" for s in spellings])
            assert set(got.values()) == {"403"}, got
            if v6 and v6_global:
                # IPv6 through the proxy: a denied address is refused (403); one not denied is
                # admitted (the proxy's uplink has no IPv6 route, so it answers 502, not 403).
                target = f"[{v6_global[0]}]:{v6}"
                await session.set_network_policy(NetworkPolicy(network_mode="denylist", denied_hosts=[v6_global[0]]))
                assert await _probe(session, proxy, [target]) == {target: "403"}
                await session.set_network_policy(NetworkPolicy(network_mode="denylist", denied_hosts=[bridge_gw]))
                assert (await _probe(session, proxy, [target]))[target] != "403"
        finally:
            await session.close()

    trio.run(main)
    assert list_objects(labels={"acx.test": run_label}) == []


class _RecordingServer:
    """An HTTP/1.1 keep-alive answerer on the host that records each request line it reads."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(10)
            buf = b""
            while True:  # every request on the connection, until the client or a close ends it
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(4096)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                self.lines.append(lines[0])
                close = any(h.lower() == "connection: close" for h in lines[1:])
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                    + (b"Connection: close\r\n" if close else b"")
                    + b"\r\nok"
                )
                if close:
                    return

    def close(self) -> None:
        self.sock.close()


#: Two plain-HTTP requests on one kept-alive connection through the proxy, then a third on a new one.
_KEEPALIVE = r"""
import socket, sys
proxy, target = sys.argv[1], sys.argv[2]
ph, pp = proxy.rsplit(":", 1)
s = socket.create_connection((ph, int(pp)), 10)
s.settimeout(20)
head = "GET http://%s%s HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n\r\n"
req = lambda path: (head % (target, path, target)).encode()
s.sendall(req("/first"))
got = b""
while b"ok" not in got:
    got += s.recv(1000)
print("first", got.split()[1].decode(), "close" if b"connection: close" in got.lower() else "kept")
try:
    s.sendall(req("/second"))
    more = s.recv(1000)
    print("second", "served:" + more.split()[1].decode() if more else "closed")
except OSError:
    print("second closed")
s2 = socket.create_connection((ph, int(pp)), 10)
s2.sendall(req("/third"))
print("third", s2.recv(1000).split()[1].decode())
"""


def test_plain_http_through_the_proxy_is_one_checked_request_per_connection(run_label: str, docker_driver: Any) -> None:
    # contract P6 (issue 23): the proxy used to pipe a kept-alive connection after its first
    # request, so the next one reached the upstream in absolute form, unchecked (the gateway
    # answered 404; litellm and Claude Code reuse connections). Now each request is its own
    # connection: the first is answered with `Connection: close`, the client reconnects, and the
    # upstream only ever sees origin-form request lines.
    server = _RecordingServer()

    async def main() -> None:
        driver = docker_driver()
        session = await driver.open(_request(run_label, NetworkPolicy(network_mode="allowlist", allowed_hosts=[])))
        try:
            bridge_gw = _gateway(docker_client().api, session.network)
            target = f"{bridge_gw}:{server.port}"
            await session.set_network_policy(NetworkPolicy(network_mode="allowlist", allowed_hosts=[target]))
            proxy = session._proxy_env["HTTP_PROXY"].split("//")[1]
            res = await session.exec(["python3", "-c", _KEEPALIVE, proxy, target], timeout=60)
            assert res.returncode == 0, res.stderr
            assert res.stdout.splitlines() == ["first 200 close", "second closed", "third 200"], res.stdout
        finally:
            await session.close()

    try:
        trio.run(main)
    finally:
        server.close()
    assert server.lines == ["GET /first HTTP/1.1", "GET /third HTTP/1.1"], server.lines
