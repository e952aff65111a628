"""Host firewall rules that keep ``allowlist``/``denylist`` sandboxes off the Docker host (P6, P7).

An ``--internal`` Docker network stops *forwarding* to other networks, but its bridge interface on
the host carries the network's gateway address, and the sandbox gets a default route to it: every
packet to the gateway, to another bridge's gateway (``172.17.0.1``) or to the host's own addresses
is delivered locally by the host (the ``INPUT`` chain), so every port of the host was reachable
around the egress proxy. acx therefore names the bridge of every internal network it creates
``acxi<hex>`` and installs, once per host, rules matching the whole prefix (``acxi+``) for IPv4 and
IPv6::

    -I INPUT   -i acxi+ -j DROP            # nothing from an internal network reaches the host
    -I FORWARD -i acxi+ ! -o acxi+ -j DROP  # nor leaves its bridge (also raw frames, also IPv6)
    -I FORWARD ! -i acxi+ -o acxi+ -j DROP  # nor enters it from elsewhere

Traffic between the sandbox and its proxy stays on the bridge (``-i acxi… -o acxi…``) and the
proxy's uplink is an ordinary bridge network, so the proxy is the only way out. The rules need
``CAP_NET_ADMIN`` on the host: acx installs them itself when it runs as root next to the engine
(:func:`ensure_host_firewall`); ``scripts/setup-docker.sh`` installs them for everyone else.

Whoever installed them, every new internal network is *checked* before a sandbox relies on it
(:func:`host_reachable`): the proxy, which sits on the internal network too, knocks on the
network's gateway. Dropped (a timeout) means the rules hold; a refusal or an answer means the host
is reachable, and the open fails (E0452) — never a sandbox that only looks isolated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import uuid
from typing import Any

from acx.errors import CapabilityError

__all__ = ["BRIDGE_PREFIX", "RULES", "ensure_host_firewall", "host_reachable", "internal_bridge_name", "refusal"]

#: Interface-name prefix of the host bridges of acx internal networks (15 characters at most).
BRIDGE_PREFIX = "acxi"

#: (chain, match) of the rules, for ``iptables`` and ``ip6tables`` alike.
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("INPUT", ("-i", f"{BRIDGE_PREFIX}+")),
    ("FORWARD", ("-i", f"{BRIDGE_PREFIX}+", "!", "-o", f"{BRIDGE_PREFIX}+")),
    ("FORWARD", ("!", "-i", f"{BRIDGE_PREFIX}+", "-o", f"{BRIDGE_PREFIX}+")),
)

_DONE: set[str] = set()
_LOCK = threading.Lock()


def internal_bridge_name() -> str:
    """A fresh host interface name for an internal network's bridge (``acxi`` + 11 hex digits)."""
    return BRIDGE_PREFIX + uuid.uuid4().hex[:11]


def ensure_host_firewall(docker_host: str | None) -> None:
    """As root next to the engine, add the missing ``acxi+`` rules (blocking; once per process).

    Elsewhere nothing is installed here: the rules must come from ``scripts/setup-docker.sh``
    (or the engine host's administrator), and :func:`host_reachable` finds out if they did not.
    """
    key = docker_host or ""
    with _LOCK:
        if key in _DONE:
            return
        if _why_not_local(docker_host) is None:
            problem = _install()
            if problem is not None:
                raise CapabilityError(
                    f"the docker driver cannot keep allowlist/denylist sandboxes off the Docker host: {problem}",
                    code="E0452",
                    help=_HELP,
                )
        _DONE.add(key)


_HELP = (
    "install the host firewall rules (`sudo bash scripts/setup-docker.sh`, see docs/docker.md "
    '"Network policies"), or use network_mode no-network/public'
)

#: Run by the proxy (python3): knock on the internal network's gateway. A DROP rule gives no
#: answer (timeout); anything else — a refusal, an accept — came from the host.
_KNOCK = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[2]))
try:
    s.connect((sys.argv[1], 9))
    print("reachable")
except socket.timeout:
    print("dropped")
except ConnectionRefusedError:
    print("reachable")
except OSError as exc:
    print("dropped" if exc.errno in (101, 113) else "reachable")
"""


def host_reachable(api: Any, proxy: str, network: str, timeout: float = 0.3) -> str | None:
    """The internal ``network``'s gateway address when the host answers there (blocking), else None.

    A dropped probe can only mean the rules hold (the answer of a reachable host on a local
    bridge takes well under a millisecond), so a short timeout never hides a hole in practice
    and never refuses a sandbox that is isolated.
    """
    config = (api.inspect_network(network).get("IPAM") or {}).get("Config") or [{}]
    gateway = config[0].get("Gateway")
    if not gateway:
        return None  # no gateway address on the host side: nothing there to reach
    exec_id = api.exec_create(proxy, ["python3", "-c", _KNOCK, gateway, str(timeout)], stdout=True, stderr=True)["Id"]
    output = api.exec_start(exec_id)
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
    return None if text.strip() == "dropped" else str(gateway)


def refusal(session_id: str, gateway: str) -> CapabilityError:
    return CapabilityError(
        f"the Docker host answers on the internal network of session {session_id} (gateway {gateway}): "
        "the acxi+ host firewall rules are missing, so the sandbox could bypass the egress proxy",
        code="E0452",
        help=_HELP,
    )


def _why_not_local(docker_host: str | None) -> str | None:
    host = docker_host or os.environ.get("DOCKER_HOST") or ""
    if host and not host.startswith("unix://"):
        return f"the engine {host!r} is not on this machine"
    if os.geteuid() != 0:
        return "installing host firewall rules needs root"
    return None


def _install() -> str | None:
    """Install the missing rules; None on success, else why not."""
    ipv6 = os.path.exists("/proc/net/if_inet6")
    for tool in ("iptables", "ip6tables") if ipv6 else ("iptables",):
        binary = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")
        if binary is None:
            return f"`{tool}` is not installed (apt-get install iptables)"
        # Inserted in reverse so the final order is the order of RULES, each at the top.
        for chain, match in reversed(RULES):
            rule = [chain, *match, "-j", "DROP"]
            if _run([binary, "-w", "-C", *rule]) == 0:
                continue
            if _run([binary, "-w", "-I", *rule[:1], "1", *rule[1:]]) != 0:
                return f"`{tool} -I {' '.join(rule)}` failed"
    return None


def _run(argv: list[str]) -> int:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 1
