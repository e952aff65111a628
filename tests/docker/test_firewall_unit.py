"""The host firewall rules behind allowlist/denylist: installed as root, checked always (issue 11.1)."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
import trio

from acx.drivers._base import OpenRequest
from acx.drivers.docker import _firewall, list_objects
from acx.errors import CapabilityError
from acx.ir import EnvironmentSetup, NetworkPolicy
from conftest import BOOKWORM


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_firewall, "_DONE", set())


@pytest.mark.no_engine
def test_not_root_or_a_remote_engine_installs_nothing(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # contract P6: acx changes the host firewall only as root next to the engine; elsewhere the
    # check on every internal network decides (test below)
    calls: list[list[str]] = []
    monkeypatch.setattr(_firewall, "_run", lambda argv: calls.append(argv) or 0)
    _firewall.ensure_host_firewall("tcp://10.9.9.9:2376")
    monkeypatch.setattr(_firewall.os, "geteuid", lambda: 1000)
    _firewall.ensure_host_firewall(None)
    assert calls == []


@pytest.mark.no_engine
def test_a_failing_install_as_root_is_refused(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # contract P6
    monkeypatch.setattr(_firewall.os, "geteuid", lambda: 0)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(_firewall, "_run", lambda argv: 1)
    with pytest.raises(CapabilityError) as err:
        _firewall.ensure_host_firewall(None)
    assert err.value.code == "E0452"


@pytest.mark.no_engine
def test_bridge_names_fit_the_kernel_limit_and_the_rule_prefix() -> None:
    name = _firewall.internal_bridge_name()
    assert len(name) <= 15 and name.startswith(_firewall.BRIDGE_PREFIX)


def test_an_internal_network_the_rules_do_not_cover_is_refused(
    run_label: str, docker_driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # contract P6 (issue 11.1): the knock from the proxy finds a host that answers — here an
    # internal bridge outside the acxi+ rules, as on an engine whose host lacks them — and the
    # open fails closed, leaving nothing behind
    import acx.drivers.docker._engine as engine

    monkeypatch.setattr(engine, "internal_bridge_name", lambda: "acxt" + uuid.uuid4().hex[:11])

    async def main() -> None:
        request = OpenRequest(
            session_id=f"fw-{run_label}-{os.urandom(3).hex()}",
            setup=EnvironmentSetup(image=BOOKWORM, workdir="/work"),
            network_policy=NetworkPolicy(network_mode="allowlist", allowed_hosts=[]),
            labels={"acx.test": run_label},
        )
        with pytest.raises(CapabilityError) as err:
            await docker_driver().open(request)
        assert err.value.code == "E0452" and "firewall rules are missing" in str(err.value)

    trio.run(main)
    assert list_objects(labels={"acx.test": run_label}) == []
