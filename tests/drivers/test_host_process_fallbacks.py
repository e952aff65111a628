"""host_process without epoll or pidfd (other platforms, old kernels) or without its C spawn helper
(no compiler at install time): same contract.  # contract E2 T3"""

from __future__ import annotations

from pathlib import Path

import pytest

import acx.drivers.host_process as hp
from acx.drivers import _procs
from acx.drivers._specs import HostProcessConfig
from acx.testing import driver_conformance as dc

CHECKS = [
    c
    for c in dc.CHECKS
    if c.name
    in {
        "argv_exec",
        "shell_exec",
        "exit_codes",
        "stdin",
        "output_cap",
        "timeout_returns",
        "timeout_kills_process_group",
        "cancellation_kills",
        "missing_cwd",
    }
]
MODES = {
    "no-pidfd": {"_PIDFD": False},
    "no-epoll": {"_EPOLL": False},
    "neither": {"_PIDFD": False, "_EPOLL": False},
    # Installed without a C compiler: subprocess, and the /bin/sh wrapper joins cgroups.
    "no-cspawn": {"_cspawn": None, "FAST_SPAWN": False},
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("check", CHECKS, ids=dc.check_id)
def test_conformance_without_epoll_or_pidfd(
    check: dc.Check, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in MODES[mode].items():
        monkeypatch.setattr(_procs, name, value)
    root = tmp_path / "sessions"
    dc.run_check(check, lambda: hp.HostProcessDriver(HostProcessConfig(workdir_root=str(root))), scratch=tmp_path)
    assert not any(root.iterdir())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_large_stdin_and_background_child_without_epoll_or_pidfd(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trio

    from acx.drivers._base import OpenRequest

    for name, value in MODES[mode].items():
        monkeypatch.setattr(_procs, name, value)
    payload = b"x" * (1 << 20)

    async def go() -> tuple[str, str, float]:
        s = await hp.HostProcessDriver(HostProcessConfig(workdir_root=str(tmp_path))).open(OpenRequest(session_id="f"))
        try:
            big = await s.exec(["wc", "-c"], stdin=payload, timeout=30)
            start = trio.current_time()
            bg = await s.exec(["sh", "-c", "sleep 60 & echo started"], timeout=30)
            return big.stdout.strip(), bg.stdout, trio.current_time() - start
        finally:
            await s.close()

    size, out, elapsed = trio.run(go)
    assert size == str(len(payload)) and out == "started\n" and elapsed < 10
