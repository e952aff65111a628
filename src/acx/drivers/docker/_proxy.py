"""The egress proxy that enforces ``allowlist`` for the docker driver (contracts P6, P7).

Under ``allowlist`` the session container sits alone on an *internal* Docker network (no route
out); the only peer it can reach is this proxy, which also sits on the session's ordinary bridge
network. Clients reach the proxy through ``HTTP_PROXY``/``HTTPS_PROXY`` (set per command by the
driver); the proxy accepts ``CONNECT host:port`` and absolute-URI HTTP requests and relays them only
when the destination matches the allowlist. Everything else — other hosts, other ports, raw
sockets that ignore the proxy variables — fails. The allowlist lives in a file inside the proxy
container, re-read on every connection, so the driver can change it on the live session.

``PROXY_SOURCE`` is a self-contained stdlib script (it runs in the proxy container with
``python3``); :func:`entry_allows` is the same matching logic, importable for unit tests.
"""

from __future__ import annotations

import json

__all__ = [
    "ALLOW_FILE",
    "PROXY_ALIAS",
    "PROXY_PORT",
    "PROXY_SOURCE",
    "entry_allows",
    "entry_matches_addr",
    "policy_file_bytes",
]

PROXY_PORT = 3128
PROXY_ALIAS = "acx-egress-proxy"
ALLOW_FILE = "/tmp/acx-allow.json"

PROXY_SOURCE = r"""
import fnmatch, ipaddress, json, select, socket, sys, threading


def split_entry(entry):
    entry = entry.strip()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, port = entry.split(":")
        return host, int(port)
    return entry, None


def entry_allows(entry, host, port):
    # IP/CIDR entries admit IP-literal destinations; name entries admit names. A name is never
    # resolved before it is admitted, so a refused request cannot leak a DNS query.
    ehost, eport = split_entry(entry)
    if eport is not None and eport != port:
        return False
    ehost = ehost.lower().rstrip(".")
    host = host.lower().rstrip(".")
    try:
        net = ipaddress.ip_network(ehost, strict=False)
    except ValueError:
        net = None
    if net is not None:
        try:
            return ipaddress.ip_address(host) in net
        except ValueError:
            return False
    if ehost.startswith("*."):
        return fnmatch.fnmatchcase(host, ehost) and host != ehost[2:]
    return host == ehost


def entry_matches_addr(entry, addr, port):
    ehost, eport = split_entry(entry)
    if eport is not None and eport != port:
        return False
    try:
        return addr in ipaddress.ip_network(ehost, strict=False)
    except ValueError:
        return False


def decide(host, port):
    # -> (allowed, addresses to connect to); fails closed when the policy file is unreadable.
    try:
        with open(ALLOW_FILE) as fh:
            policy = json.load(fh)
        mode, entries = policy["mode"], list(policy["hosts"])
    except (OSError, ValueError, KeyError, TypeError):
        return False, []
    if mode == "allowlist":
        if not any(entry_allows(e, host, port) for e in entries):
            return False, []  # never resolved: a refused name causes no DNS query
        return True, resolve(host, port)
    if mode == "denylist":
        if any(entry_allows(e, host, port) for e in entries):
            return False, []
        addrs = resolve(host, port)
        # A name outside the list may still resolve into a denied address range.
        if any(entry_matches_addr(e, a, port) for e in entries for a in addrs):
            return False, []
        return True, addrs
    return False, []


def resolve(host, port):
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos]


def pipe(a, b):
    socks = [a, b]
    try:
        while True:
            readable, _, _ = select.select(socks, [], [], 300)
            if not readable:
                return
            for s in readable:
                data = s.recv(65536)
                if not data:
                    return
                (b if s is a else a).sendall(data)
    except OSError:
        return


def refuse(conn, code, reason):
    body = reason.encode()
    conn.sendall(b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                 % (code, reason.encode(), len(body), body))


def handle(conn):
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return
            head += chunk
            if len(head) > 65536:
                return refuse(conn, 431, "Request Header Fields Too Large")
        header, _, rest = head.partition(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        method, target, version = lines[0].decode("latin-1").split(" ", 2)
        if method.upper() == "CONNECT":
            host, _, port = target.rpartition(":")
            host, port = host.strip("[]"), int(port)
        else:
            if not target.lower().startswith("http://"):
                return refuse(conn, 400, "Bad Request")
            hostport, _, path = target[7:].partition("/")
            if hostport.startswith("["):
                host, _, port = hostport[1:].partition("]")
                port = port.lstrip(":")
            elif hostport.count(":") == 1:
                host, port = hostport.split(":")
            else:
                host, port = hostport, ""
            port = int(port or 80)
            lines[0] = ("%s /%s %s" % (method, path, version)).encode("latin-1")
        ok, addrs = decide(host, port)
        if not ok:
            return refuse(conn, 403, "Forbidden by acx network policy")
        if not addrs:
            return refuse(conn, 502, "Bad Gateway")
        try:
            # Connect to the address that was checked (no second lookup to race).
            upstream = socket.create_connection((str(addrs[0]), port), timeout=30)
        except OSError:
            return refuse(conn, 502, "Bad Gateway")
        upstream.settimeout(None)
        if method.upper() == "CONNECT":
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
        else:
            upstream.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + rest)
        pipe(conn, upstream)
        upstream.close()
    except Exception:
        pass
    finally:
        conn.close()


def main():
    global ALLOW_FILE
    ALLOW_FILE, port = sys.argv[1], int(sys.argv[2])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(256)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


main()
"""

_namespace: dict[str, object] = {}
# The matching helpers are defined once, in the script, and reused here for tests.
exec(compile(PROXY_SOURCE.split("\ndef pipe(")[0], "<acx-proxy>", "exec"), _namespace)


def entry_allows(entry: str, host: str, port: int) -> bool:
    """Whether one allowlist entry admits ``host:port`` (the proxy's own matching logic)."""
    fn = _namespace["entry_allows"]
    return bool(fn(entry, host, port))  # type: ignore[operator]


def entry_matches_addr(entry: str, addr: str, port: int) -> bool:
    """Whether an IP/CIDR entry covers a resolved address (denylist checks)."""
    import ipaddress

    fn = _namespace["entry_matches_addr"]
    return bool(fn(entry, ipaddress.ip_address(addr), port))  # type: ignore[operator]


def policy_file_bytes(mode: str, hosts: list[str]) -> bytes:
    """The proxy's policy file: ``{"mode": "allowlist"|"denylist", "hosts": [...]}``."""
    return json.dumps({"mode": mode, "hosts": list(hosts)}).encode()
