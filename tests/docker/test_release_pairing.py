"""Every object a Docker open creates is released on every path (issue 11.13).

Faults are injected at the engine's edge of a real engine: a create call whose answer is lost
after the engine made the object, cancellation at any moment of an open, a removal that fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import trio

from acx.drivers._base import OpenRequest
from acx.drivers.docker import close_objects, docker_client, list_objects
from acx.errors import DriverError
from acx.ir import EnvironmentSetup, NetworkPolicy
from conftest import BOOKWORM

ROOT = Path(__file__).resolve().parents[2]


def _request(label: str, mode: str) -> OpenRequest:
    hosts = ["example.invalid"] if mode == "allowlist" else []
    return OpenRequest(
        session_id=f"rel-{label}-{os.urandom(3).hex()}",
        setup=EnvironmentSetup(image=BOOKWORM, workdir="/work"),
        network_policy=NetworkPolicy(network_mode=mode, allowed_hosts=hosts),
        labels={"acx.test": label},
    )


@pytest.mark.parametrize(
    ("mode", "method", "nth"),
    [
        ("public", "create_network", 1),  # the session's bridge
        ("public", "create_container", 1),  # the session container
        ("allowlist", "create_network", 2),  # the internal network
        ("allowlist", "create_container", 2),  # the egress proxy
    ],
)
def test_a_create_whose_answer_is_lost_is_still_released(
    run_label: str, docker_driver: Any, monkeypatch: pytest.MonkeyPatch, mode: str, method: str, nth: int
) -> None:
    # contract E1 (issue 11.13): the engine made the object, acx never saw its id
    api = docker_client().api
    real = getattr(api, method)
    calls = {"n": 0}

    def lossy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == nth:
            raise requests.exceptions.ReadTimeout("injected: the engine's answer was lost")
        return out

    monkeypatch.setattr(api, method, lossy)

    async def main() -> None:
        with pytest.raises(requests.exceptions.ReadTimeout):
            await docker_driver().open(_request(run_label, mode))

    trio.run(main)
    assert calls["n"] >= nth
    assert list_objects(labels={"acx.test": run_label}) == []


def test_cancelling_an_open_at_any_moment_leaves_nothing(run_label: str, docker_driver: Any) -> None:
    # contract E1 (issue 11.13): a SIGTERM cancels the attempt wherever its open is — before,
    # during or after each create; the shielded discard removes whatever exists by then.
    async def main() -> None:
        driver = docker_driver()
        for delay in (0.0, 0.05, 0.15, 0.3, 0.5, 0.8, 1.2, 1.8, 2.5):
            session = None
            with trio.move_on_after(delay):
                session = await driver.open(_request(run_label, "allowlist"))
            if session is not None:
                await session.close()  # opened before the deadline: an ordinary release
            assert list_objects(labels={"acx.test": run_label}) == [], delay

    trio.run(main)


def test_a_discard_that_fails_says_release_failed(
    run_label: str, docker_driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # contract E1 (issue 11.13): what cannot be removed is named in a release_failed error (the
    # interpreter records it), never swallowed
    import acx.drivers.docker._create as create_mod
    from acx.drivers.docker import _gc

    def stuck(client: Any, name: str) -> None:
        raise RuntimeError("injected: the engine refused the removal")

    monkeypatch.setattr(create_mod, "_remove_network", stuck)
    monkeypatch.setattr(_gc, "_remove_network", stuck)
    api = docker_client().api

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise requests.exceptions.ConnectionError("injected: create failed")

    monkeypatch.setattr(api, "create_container", failing)

    async def main() -> None:
        with pytest.raises(DriverError) as err:
            await docker_driver().open(_request(run_label, "public"))
        assert err.value.code == "release_failed" and "network" in str(err.value)

    trio.run(main)
    monkeypatch.undo()
    leftovers = list_objects(labels={"acx.test": run_label})
    assert [r.labels["docker.kind"] for r in leftovers] == ["network"]  # removed by the fixture


def test_sigterm_at_any_moment_leaves_nothing_unrecorded(tmp_path: Path) -> None:
    # contract E1 (issue 11.13): SIGTERM during opens, commands or releases — every object of the
    # run is removed, or its session has a release_failed record in the run directory.
    spec = tmp_path / "slow.acx"
    spec.write_text(
        f'run slow {{\n  benchmark harbor {{ path = "{ROOT / "examples/harbor"}" }}\n'
        '  harness command { command = ["sleep", "120"] }\n  environment docker\n}\n'
    )
    for i, delay in enumerate((0.8, 1.5, 2.2, 3.0, 4.0)):
        results = tmp_path / f"r{i}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(results), "--progress", "none"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        # -15: killed before acx installed its handler (nothing was created yet)
        assert proc.wait(timeout=90) in (0, 1, 130, -15), delay
        left = [r for r in list_objects() if r.labels.get("acx.pid") == str(proc.pid)]
        recorded = {
            p.stem
            for p in results.glob("**/.env-resources/*.json")
            if json.loads(p.read_text()).get("state") == "release_failed"
        }
        assert [r for r in left if r.id not in recorded] == [], (delay, left)
        if left:  # recorded, so --resume / acx gc take them; not this test's to keep
            close_objects(predicate=lambda lab, pid=str(proc.pid): lab.get("acx.pid") == pid)


def test_a_stuck_container_does_not_keep_the_rest_alive_at_close(
    run_label: str, docker_driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # contract E1 (issue 11.13): close attempts every removal and names what is left
    import acx.drivers.docker._session as session_mod

    async def main() -> None:
        session = await docker_driver().open(_request(run_label, "allowlist"))
        real = session_mod._remove_container

        def stuck_main_container(client: Any, cid: str) -> None:
            if cid == session.container_id:
                raise RuntimeError("injected: removal refused")
            real(client, cid)

        monkeypatch.setattr(session_mod, "_remove_container", stuck_main_container)
        with pytest.raises(DriverError) as err:
            await session.close()
        assert err.value.code == "release_failed" and session.container_id[:24] in str(err.value)
        left = list_objects(labels={"acx.test": run_label})
        # the proxy and both networks are gone (the stuck container was detached from them by
        # force); only the container whose removal failed is left, for the release_failed record
        assert [r.labels.get("acx.kind") for r in left] == ["session"], left

    trio.run(main)
