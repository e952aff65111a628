"""When acx cannot install the host firewall rules, allowlist/denylist are refused (issue 11.1)."""

from __future__ import annotations

import pytest

from acx.drivers.docker import _firewall
from acx.errors import CapabilityError

pytestmark = pytest.mark.no_engine


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_firewall, "_DONE", set())
    monkeypatch.delenv("ACX_DOCKER_FIREWALL", raising=False)


def test_a_remote_engine_is_refused_not_silently_unprotected() -> None:
    # contract P6: a sandbox that only looks isolated is never handed out
    with pytest.raises(CapabilityError) as err:
        _firewall.ensure_host_firewall("tcp://10.9.9.9:2376")
    assert err.value.code == "E0452" and "not on this machine" in str(err.value)


def test_without_root_the_rules_must_be_declared_preinstalled(monkeypatch: pytest.MonkeyPatch) -> None:
    # contract P6
    monkeypatch.setattr(_firewall.os, "geteuid", lambda: 1000)
    with pytest.raises(CapabilityError, match="needs root"):
        _firewall.ensure_host_firewall(None)
    monkeypatch.setenv("ACX_DOCKER_FIREWALL", "preinstalled")
    _firewall.ensure_host_firewall(None)  # the operator installed them (scripts/setup-docker.sh)


def test_a_failing_install_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # contract P6
    monkeypatch.setattr(_firewall.os, "geteuid", lambda: 0)
    monkeypatch.setattr(_firewall, "_run", lambda argv: 1)
    with pytest.raises(CapabilityError, match="failed"):
        _firewall.ensure_host_firewall(None)


def test_bridge_names_fit_the_kernel_limit_and_the_rule_prefix() -> None:
    name = _firewall.internal_bridge_name()
    assert len(name) <= 15 and name.startswith(_firewall.BRIDGE_PREFIX)
