"""`acx env list/close` and `acx gc` through the Driver contract, on host_process (no engine).

# contract E1 (no debris)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from acx.cli import main

# A run that opens two sessions (one kept on purpose), starts a daemon in the other, then dies.
CRASHER = textwrap.dedent(
    """
    import sys, trio
    from acx.drivers._base import OpenRequest
    from acx.testing.driver_conformance import DETACH
    from acx.drivers._specs import HostProcessConfig
    from acx.drivers.host_process import HostProcessDriver

    async def main():
        d = HostProcessDriver(HostProcessConfig(workdir_root=sys.argv[1]))
        s = await d.open(OpenRequest(session_id=sys.argv[2] + "-a-0"))
        await d.open(OpenRequest(session_id=sys.argv[2] + "-k-0", labels={"acx.keep": "true"}))
        await s.exec(DETACH.format(cmd="sleep 300", out="daemon.pid"), shell=True)
        print(s.workdir, flush=True)
        await trio.sleep(600)

    trio.run(main)
    """
)


def _params(root: Path) -> list[str]:
    return ["--env", "host_process", "--env-params", json.dumps({"workdir_root": str(root)})]


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(root: Path, run: str) -> tuple[subprocess.Popen[str], Path, int]:
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(root), run], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    workdir = Path(proc.stdout.readline().strip())
    return proc, workdir, int((workdir / "daemon.pid").read_text())


@pytest.fixture()
def crashed(tmp_path: Path) -> tuple[Path, Path, int]:
    root = tmp_path / "sessions"
    proc, workdir, daemon = _start(root, "crashrun")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return root, workdir, daemon


def test_gc_removes_a_crashed_host_process_run(crashed, capsys) -> None:  # contract E1
    root, workdir, daemon = crashed
    assert _alive(daemon)

    live, live_dir, live_daemon = _start(root, "liverun")
    try:
        assert main(["env", "list", "--format", "json", *_params(root)]) == 0
        listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
        assert listed["crashrun-a-0"]["owner_alive"] is False
        assert listed["crashrun-k-0"]["kept"] is True
        assert listed["liverun-a-0"]["owner_alive"] is True  # its acx process still runs
        assert main(["gc", "--dry-run", *_params(root)]) == 0
        assert capsys.readouterr().out == "would remove host_process session crashrun-a-0\n"
        assert main(["gc", *_params(root)]) == 0
        assert capsys.readouterr().out == "removed host_process session crashrun-a-0\n"
        assert not workdir.exists() and live_dir.is_dir() and _alive(live_daemon)
    finally:
        live.kill()
        live.wait()
    assert not _alive(daemon), "gc kills the crashed session's processes"
    assert main(["gc", "--include-kept", *_params(root)]) == 0
    assert capsys.readouterr().out == (
        "removed host_process session crashrun-k-0\n"
        "removed host_process session liverun-a-0\n"
        "removed host_process session liverun-k-0\n"
    )
    assert not any(root.iterdir())
    assert not _alive(live_daemon)


def test_env_close_by_id_and_errors(crashed, capsys) -> None:  # contract E1
    root, workdir, _ = crashed
    assert main(["env", "list", *_params(root)]) == 0
    out = capsys.readouterr().out
    assert "crashrun-a-0" in out and "host_process" in out and "gone" in out
    assert main(["env", "close", "--id", "crashrun-a-0", *_params(root)]) == 0
    assert capsys.readouterr().out == "removed host_process session crashrun-a-0\n"
    assert not workdir.exists()
    assert main(["env", "close", "--id", "crashrun-a-0", *_params(root)]) == 2
    assert "E0702" in capsys.readouterr().err
    assert main(["env", "list", "--env", "hots_process"]) == 2
    assert "did you mean `host_process`" in capsys.readouterr().err
    assert main(["env", "list", "--env-params", "{}"]) == 2
    assert "needs exactly one --env" in capsys.readouterr().err
    assert main(["env", "list", "--env", "host_process", "--env-params", '{"workdir_rot": 1}']) == 2
    assert "workdir_rot" in capsys.readouterr().err


def test_gc_counts_a_session_another_sweep_removed_first_as_removed(crashed, capsys, monkeypatch) -> None:
    # contract E1 (issue 24 item 12): two `acx gc` racing — the other one removed the session
    # between this one's listing and its removal; that is a removed session, not an error.
    from acx.drivers.host_process import HostProcessDriver

    root, workdir, daemon = crashed
    real = HostProcessDriver.close_session

    async def raced(self: HostProcessDriver, session_id: str) -> None:
        await real(self, session_id)  # the other process's sweep got there first
        await real(self, session_id)  # ours: session_not_found

    monkeypatch.setattr(HostProcessDriver, "close_session", raced)
    assert main(["gc", *_params(root)]) == 0
    captured = capsys.readouterr()
    assert "removed host_process session crashrun-a-0" in captured.out
    assert "error" not in captured.err
    assert not workdir.exists() and not _alive(daemon)
