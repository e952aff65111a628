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
(``scripts/setup-docker.sh`` installs them too). When it cannot, and the operator has not declared
them installed (``ACX_DOCKER_FIREWALL=preinstalled``), opening an ``allowlist``/``denylist``
sandbox is refused — never a sandbox that only looks isolated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import uuid

from acx.errors import CapabilityError

__all__ = ["BRIDGE_PREFIX", "RULES", "ensure_host_firewall", "internal_bridge_name"]

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
    """Make sure the ``acxi+`` rules are in place (blocking; once per process and engine)."""
    key = docker_host or ""
    with _LOCK:
        if key in _DONE:
            return
        if os.environ.get("ACX_DOCKER_FIREWALL") == "preinstalled":
            _DONE.add(key)
            return
        problem = _why_not_local(docker_host) or _install()
        if problem is not None:
            raise CapabilityError(
                f"the docker driver cannot keep allowlist/denylist sandboxes off the Docker host: {problem}",
                code="E0452",
                help="run acx as root on the engine's host (or `sudo bash scripts/setup-docker.sh` once, "
                "then set ACX_DOCKER_FIREWALL=preinstalled), or use network_mode no-network/public",
            )
        _DONE.add(key)


def _why_not_local(docker_host: str | None) -> str | None:
    host = docker_host or os.environ.get("DOCKER_HOST") or ""
    if host and not host.startswith("unix://"):
        return f"the engine {host!r} is not on this machine, so acx cannot install host firewall rules there"
    if os.geteuid() != 0:
        return "installing the host firewall rules needs root"
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
