"""Allowlist matching of the egress proxy (pure; no engine).  # contract P6"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.drivers.docker._proxy import admits, canonical_host, entry_allows, entry_matches_addr, parse_target

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


# ---- every spelling of an address is the address (issue 11.2) ------------------------------------


def _part(value: int, style: str) -> str:
    return {"dec": str(value), "oct": "0" + oct(value)[2:], "hex": hex(value)}[style]


@st.composite
def _ipv4_spellings(draw: st.DrawFn) -> tuple[str, str]:
    """(dotted quad, another spelling of the same address that getaddrinfo would accept)."""
    octets = draw(st.lists(st.integers(0, 255), min_size=4, max_size=4))
    number = int.from_bytes(bytes(octets), "big")
    dotted = ".".join(map(str, octets))
    shape = draw(st.sampled_from(["4", "3", "2", "1", "mapped", "mapped-hex", "compat-host"]))
    styles = st.sampled_from(["dec", "oct", "hex"])
    if shape == "4":
        text = ".".join(_part(o, draw(styles)) for o in octets)
    elif shape == "3":
        text = ".".join(
            [_part(octets[0], draw(styles)), _part(octets[1], draw(styles)), _part(number & 0xFFFF, draw(styles))]
        )
    elif shape == "2":
        text = f"{_part(octets[0], draw(styles))}.{_part(number & 0xFFFFFF, draw(styles))}"
    elif shape == "1":
        text = _part(number, draw(styles))
    elif shape == "mapped":
        text = f"::ffff:{dotted}"
    elif shape == "mapped-hex":
        text = f"::ffff:{number >> 16:x}:{number & 0xFFFF:x}"
    else:
        text = f"0:0:0:0:0:FFFF:{dotted}"
    if ":" in text:
        text = f"[{text}]" if draw(st.booleans()) else text
    if draw(st.booleans()):
        text = draw(st.sampled_from(["user@", "user:pw@", "a@b@"])) + text
    if ":" not in text and draw(st.booleans()):
        text += "." * draw(st.integers(1, 2))
    return dotted, text


@given(_ipv4_spellings())
@settings(max_examples=400, deadline=None)
def test_every_spelling_of_an_ipv4_address_is_that_address(pair: tuple[str, str]) -> None:
    # contract P6, P7: decimal, octal, hex, short, IPv4-mapped, userinfo and trailing-dot forms
    dotted, text = pair
    assert canonical_host(text) == dotted


@given(_ipv4_spellings(), st.integers(1, 65535), st.integers(8, 32))
@settings(max_examples=400, deadline=None)
def test_denylist_refuses_every_spelling(pair: tuple[str, str], port: int, prefix: int) -> None:
    # contract P7 (issue 11.2): a denied address or network is refused whatever its spelling,
    # and an allowlisted one is admitted the same way.
    dotted, text = pair
    net = str(ipaddress.ip_network(f"{dotted}/{prefix}", strict=False))
    for entry in (dotted, net, f"{dotted}:{port}", f"[::ffff:{dotted}]", f"::ffff:{net.split('/')[0]}/{prefix + 96}"):
        assert not admits("denylist", [entry], text, port), (entry, text)
        assert admits("allowlist", [entry], text, port), (entry, text)


@pytest.mark.parametrize(
    ("target", "connect"),
    [
        ("[::ffff:127.0.0.1]:8000", True),
        ("[::ffff:7f00:1]:8000", True),
        ("2130706433:8000", True),
        ("0x7f.0.0.1:8000", True),
        ("0177.0.0.1:8000", True),
        ("127.1:8000", True),
        ("127.0.0.1.:8000", True),
        ("u:p@127.0.0.1:8000", True),
        ("[64:ff9b::7f00:1]:8000", True),
        ("[2002:7f00:1::]:8000", True),
        ("[::127.0.0.1]:8000", True),
        ("0.0.0.0:8000", True),
        ("http://[::ffff:127.0.0.1]:8000/", False),
        ("http://user:pw@127.0.0.1:8000/x", False),
        ("http://2130706433:8000/", False),
        ("http://0x7F000001:8000/?q", False),
    ],
)
def test_denied_loopback_stays_denied_in_every_form(target: str, connect: bool) -> None:
    # contract P7 (issue 11.2): the observed bypass (CONNECT [::ffff:A.B.C.D]:port) and its kin
    parsed = parse_target(target, connect)
    assert parsed is not None
    host, port, _path = parsed
    assert not admits("denylist", ["127.0.0.0/8"], host, port)
    assert not admits("denylist", ["127.0.0.1:8000"], host, port)


@pytest.mark.parametrize(
    "target", ["1.2.3.256:80", "999999999999:80", "[::1:80", "::1:80", "host:0", "host:99999", "a b:80", "h"]
)
def test_malformed_targets_are_refused(target: str) -> None:
    # contract P7: text that is neither an address nor a name is never guessed at
    parsed = parse_target(target, True)
    assert parsed is None or canonical_host(parsed[0]) is None
