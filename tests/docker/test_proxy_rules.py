"""Allowlist matching of the egress proxy (pure; no engine).  # contract P6"""

from __future__ import annotations

import pytest

from acx.drivers.docker._proxy import entry_allows, entry_matches_addr

pytestmark = pytest.mark.no_engine


@pytest.mark.parametrize(
    ("entry", "host", "port", "ok"),
    [
        ("example.org", "example.org", 443, True),
        ("example.org", "EXAMPLE.org.", 80, True),
        ("example.org", "evil-example.org", 443, False),
        ("example.org:443", "example.org", 80, False),
        ("*.example.org", "a.b.example.org", 1, True),
        ("*.example.org", "example.org", 1, False),
        ("10.0.0.0/8", "10.1.2.3", 80, True),
        ("10.0.0.0/8", "11.1.2.3", 80, False),
        ("10.0.0.0/8", "internal.corp", 80, False),  # names are never resolved to match CIDRs
        ("172.18.0.2:8000", "172.18.0.2", 8000, True),
        ("172.18.0.2:8000", "172.18.0.2", 8001, False),
        ("[::1]:80", "::1", 80, True),
        ("fd00::/8", "fd00::5", 22, True),
    ],
)
def test_entry_allows(entry: str, host: str, port: int, ok: bool) -> None:
    # contract P6: hostname, *.wildcard, IP, CIDR, optional :port
    assert entry_allows(entry, host, port) is ok


def test_entry_matches_resolved_address() -> None:
    # contract P6: denylist CIDR/IP entries also catch names that resolve into them
    assert entry_matches_addr("10.0.0.0/8", "10.9.9.9", 80)
    assert not entry_matches_addr("10.0.0.0/8:443", "10.9.9.9", 80)
    assert not entry_matches_addr("example.org", "10.9.9.9", 80)
