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
    "admits",
    "canonical_host",
    "entry_allows",
    "entry_matches_addr",
    "parse_target",
    "policy_file_bytes",
]

PROXY_PORT = 3128
PROXY_ALIAS = "acx-egress-proxy"
ALLOW_FILE = "/tmp/acx-allow.json"

PROXY_SOURCE = r"""
import fnmatch, ipaddress, json, re, select, socket, sys, threading


NUMERIC_PART = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
NAME = re.compile(r"^[a-z0-9_*]([a-z0-9_.*-]*[a-z0-9_*])?$")


def parse_ipv4_legacy(host):
    # The forms inet_aton (and so getaddrinfo) accepts: 1-4 dot-separated parts, each decimal,
    # octal (leading 0) or hex (0x); the last part fills the remaining bytes. None when the text
    # is not all numeric parts; ValueError when it is but does not fit (never a name then).
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(NUMERIC_PART.match(p) for p in parts):
        return None
    values = []
    for p in parts:
        if p.startswith("0x"):
            values.append(int(p[2:] or "0", 16))
        elif len(p) > 1 and p.startswith("0"):
            values.append(int(p, 8))
        else:
            values.append(int(p))
    last_bits = 8 * (5 - len(values))
    if any(v > 255 for v in values[:-1]) or values[-1] >= (1 << last_bits):
        raise ValueError(host)
    number = values[-1]
    for i, v in enumerate(values[:-1]):
        number |= v << (24 - 8 * i)
    return ipaddress.IPv4Address(number)


def canonical_host(host):
    # -> an ipaddress object, a lower-case name, or None for text that is neither (refused).
    # Every spelling of one address becomes one value: userinfo dropped, brackets, zone ids and
    # trailing dots removed, decimal/octal/hex/short IPv4 forms and IPv4-mapped IPv6 turned into
    # the IPv4 address the kernel would connect to.
    host = host.strip().rpartition("@")[2].lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.split("%", 1)[0] if ":" in host else host
    while host.endswith("."):
        host = host[:-1]
    if not host:
        return None
    if ":" in host:
        try:
            addr = ipaddress.IPv6Address(host)
        except ValueError:
            return None
        return addr.ipv4_mapped or addr
    try:
        legacy = parse_ipv4_legacy(host)
    except ValueError:
        return None
    if legacy is not None:
        return legacy
    return host if NAME.match(host) else None


def embedded_ipv4(addr):
    # Addresses a destination also stands for on some path (IPv6 with an embedded IPv4: mapped,
    # compatible, NAT64, 6to4; the unspecified address = loopback): a denylist entry for one
    # of these also refuses the destination.
    out = []
    if addr.is_unspecified:
        # 0.0.0.0 and :: connect to the local host: a denied loopback covers them.
        out += [ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1")]
    if isinstance(addr, ipaddress.IPv6Address):
        packed = addr.packed
        if addr.ipv4_mapped is not None:
            out.append(addr.ipv4_mapped)
        if packed[:12] == bytes(12) and packed[12:] not in (bytes(4), b"\0\0\0\1"):
            out.append(ipaddress.IPv4Address(packed[12:]))  # IPv4-compatible ::a.b.c.d
        if packed[:12] == bytes.fromhex("0064ff9b0000000000000000"):
            out.append(ipaddress.IPv4Address(packed[12:]))  # NAT64 well-known prefix
        if addr.sixtofour is not None:
            out.append(addr.sixtofour)
    return out


def split_entry(entry):
    entry = entry.strip()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, port = entry.split(":")
        return host, int(port)
    return entry, None


def entry_target(ehost):
    # -> an ip_network, a lower-case name pattern, or None (an entry that can match nothing).
    if "/" in ehost:
        text, _, prefix = ehost.partition("/")
        base = canonical_host(text)
        if not isinstance(base, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
            return None
        try:
            prefix = int(prefix)
        except ValueError:
            return None
        if isinstance(base, ipaddress.IPv4Address) and ":" in text:
            prefix -= 96  # ::ffff:a.b.c.d/104 is the IPv4 network a.b.c.d/8
            if prefix < 0:
                return None
        try:
            return ipaddress.ip_network("%s/%d" % (base, prefix), strict=False)
        except ValueError:
            return None
    value = canonical_host(ehost)
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return ipaddress.ip_network(value)
    return value


def addr_in(target, addr, also_embedded):
    if not isinstance(target, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return False
    candidates = [addr] + (embedded_ipv4(addr) if also_embedded else [])
    return any(a.version == target.version and a in target for a in candidates)


def entry_allows(entry, host, port, also_embedded=False):
    # IP/CIDR entries admit IP-literal destinations; name entries admit names. A name is never
    # resolved before it is admitted, so a refused request cannot leak a DNS query. Both sides
    # are compared in canonical form (see canonical_host).
    ehost, eport = split_entry(entry)
    if eport is not None and eport != port:
        return False
    target = entry_target(ehost)
    value = host if not isinstance(host, str) else canonical_host(host)
    if target is None or value is None:
        return False
    if not isinstance(value, str):
        return addr_in(target, value, also_embedded)
    if not isinstance(target, str):
        return False
    if target.startswith("*."):
        return fnmatch.fnmatchcase(value, target) and value != target[2:]
    return value == target


def entry_matches_addr(entry, addr, port):
    ehost, eport = split_entry(entry)
    if eport is not None and eport != port:
        return False
    return addr_in(entry_target(ehost), addr, True)


def decide(host, port):
    # -> (allowed, addresses to connect to); fails closed when the policy file is unreadable
    # and for a destination that is neither an address nor a well-formed name.
    try:
        with open(ALLOW_FILE) as fh:
            policy = json.load(fh)
        mode, entries = policy["mode"], list(policy["hosts"])
    except (OSError, ValueError, KeyError, TypeError):
        return False, []
    return policy_decision(mode, entries, host, port)


def policy_decision(mode, entries, host, port):
    value = canonical_host(host)
    if value is None:
        return False, []
    if mode == "allowlist":
        if not any(entry_allows(e, value, port) for e in entries):
            return False, []  # never resolved: a refused name causes no DNS query
        return True, resolve(value, port)
    if mode == "denylist":
        if any(entry_allows(e, value, port, also_embedded=True) for e in entries):
            return False, []
        addrs = resolve(value, port)
        # A name outside the list may still resolve into a denied address range.
        if any(entry_matches_addr(e, a, port) for e in entries for a in addrs):
            return False, []
        return True, addrs
    return False, []


def resolve(value, port):
    # Addresses come back canonical too (an AAAA record may hold an IPv4-mapped address).
    if not isinstance(value, str):
        return [value]
    try:
        infos = socket.getaddrinfo(value, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    out = []
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        out.append(getattr(addr, "ipv4_mapped", None) or addr)
    return out


def parse_target(target, connect):
    # -> (host, port, origin-form path) of a CONNECT authority or an absolute http:// URI;
    # userinfo ("user:pw@") is dropped; None when malformed.
    if connect:
        authority, path = target, ""
    else:
        if not target.lower().startswith("http://"):
            return None
        rest = target[7:]
        cut = min([i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0] or [len(rest)])
        authority, path = rest[:cut], rest[cut:].split("#", 1)[0]
        if not path.startswith("/"):
            path = "/" + path
    authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        host, _, port = authority[1:].partition("]")
        if port and not port.startswith(":"):
            return None
        port = port[1:]
    elif authority.count(":") == 1:
        host, port = authority.split(":")
    elif ":" in authority:
        return None  # an unbracketed IPv6 address is ambiguous with a port
    else:
        host, port = authority, ""
    if not port:
        if connect:
            return None
        port = "80"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port), path


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
        connect = method.upper() == "CONNECT"
        parsed = parse_target(target, connect)
        if parsed is None:
            return refuse(conn, 400, "Bad Request")
        host, port, path = parsed
        if not connect:
            lines[0] = ("%s %s %s" % (method, path, version)).encode("latin-1")
            # One request per connection: after this request the connection is only piped, so a
            # kept-alive client's next request would reach the upstream in absolute form (and
            # unchecked); with `Connection: close` the upstream ends it and the client reconnects.
            hop = (b"connection:", b"proxy-connection:", b"keep-alive:")
            lines = [lines[0]] + [h for h in lines[1:] if not h.lower().startswith(hop)] + [b"Connection: close"]
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


def canonical_host(host: str) -> str | None:
    """The proxy's canonical form of a destination host (an address as text, a name, or None)."""
    value = _namespace["canonical_host"](host)  # type: ignore[operator]
    return None if value is None else str(value)


def parse_target(target: str, connect: bool) -> tuple[str, int, str] | None:
    """``(host, port, path)`` of a request target as the proxy reads it; None when refused (400)."""
    out = _namespace["parse_target"](target, connect)  # type: ignore[operator]
    return None if out is None else (str(out[0]), int(out[1]), str(out[2]))


def admits(mode: str, entries: list[str], host: str, port: int) -> bool:
    """Whether the proxy relays a request for ``host:port`` under this policy."""
    ok, _addrs = _namespace["policy_decision"](mode, entries, host, port)  # type: ignore[operator]
    return bool(ok)


def policy_file_bytes(mode: str, hosts: list[str]) -> bytes:
    """The proxy's policy file: ``{"mode": "allowlist"|"denylist", "hosts": [...]}``."""
    return json.dumps({"mode": mode, "hosts": list(hosts)}).encode()
