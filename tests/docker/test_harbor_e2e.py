"""Harbor examples end to end through the CLI on Docker (contracts H1–H5, A4–A7, V2, S2).

The oracle scores 1 on every task, a do-nothing agent 0, and an agent that writes
``/logs/verifier/reward.txt`` / ``reward.json`` itself still 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acx.drivers.docker import list_objects

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "harbor" / "harbor-docker.acx"


def _acx(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _scores(results: Path, request: str) -> dict[str, float]:
    scores: dict[str, float] = {}
    for path in (results / request).glob("*/details/*/*/attempt-1/result.json"):
        data = json.loads(path.read_text())
        scores[data["task_id"]] = data["metrics"].get("score")
    return scores


def test_oracle_idle_cheater(tmp_path: Path) -> None:
    # contract H1, H4, H5, A6, A7, V2: oracle 1, idle 0, a self-written reward still 0
    proc = _acx("run", str(SPEC), "--results-dir", str(tmp_path / "results"), "--progress", "plain", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = {"hello-workdir", "fizzbuzz-fresh-verifier", "csv-partial-credit", "log-levels-cli", "median-bugfix"}
    assert tasks == {p.parent.name for p in SPEC.parent.glob("*/task.toml")}  # every example task
    assert _scores(tmp_path / "results", "oracle") == dict.fromkeys(tasks, 1.0)
    assert _scores(tmp_path / "results", "idle") == dict.fromkeys(tasks, 0.0)
    assert _scores(tmp_path / "results", "cheater") == dict.fromkeys(tasks, 0.0)
    # the fresh verifier evaluated restored artifacts recorded with checksums
    fizz = next((tmp_path / "results/oracle").glob("*/details/*/fizzbuzz-fresh-verifier--*/attempt-1"))
    declared = json.loads((fizz / "result.json").read_text())["artifacts"]["declared_artifacts"]
    assert {d["source"]: d["status"] for d in declared}["/app/fizzbuzz.py"] == "collected"
    assert list(fizz.glob("submission-*.manifest.json"))
    assert [r for r in list_objects() if r.labels.get("acx.request") in ("oracle", "idle", "cheater")] == []


def _killed_run(tmp_path: Path) -> int:
    """Start `acx run` on sleeping agents, SIGKILL it once its sandboxes are up; its pid."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = tmp_path / "slow.acx"
    spec.write_text(
        f'run slow {{\n  benchmark harbor {{ path = "{ROOT / "examples/harbor"}" }}\n'
        '  harness command { command = ["sleep", "120"] }\n  environment docker\n}\n'
    )
    argv = [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(tmp_path / "r")]
    proc = subprocess.Popen(
        [*argv, "--progress", "none"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        mine: list = []
        while time.monotonic() < deadline:
            mine = [r for r in list_objects() if r.labels.get("acx.pid") == str(proc.pid)]
            if sum(r.labels.get("docker.kind") == "container" for r in mine) >= 3:
                break
            time.sleep(0.3)
        assert mine, "acx run never opened a sandbox"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.pid


def test_next_run_sweeps_orphans_of_a_crashed_run(tmp_path: Path) -> None:
    # no debris: a new `acx run` on docker removes what a SIGKILLed run left, before it starts
    pid = _killed_run(tmp_path / "a")
    spec = tmp_path / "one.acx"
    spec.write_text(
        f'run one {{\n  benchmark harbor {{ path = "{ROOT / "examples/harbor"}"; task_names = ["hello-workdir"] }}\n'
        "  harness oracle\n  environment docker\n}\n"
    )
    proc = _acx("run", str(spec), "--results-dir", str(tmp_path / "r2"), "--progress", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r for r in list_objects() if r.labels.get("acx.pid") == str(pid)] == []


def test_sigkill_mid_run_then_gc(tmp_path: Path) -> None:
    # no debris: SIGKILL `acx run` while sandboxes are open, then `acx gc` removes every object
    pid = _killed_run(tmp_path)
    gc = _acx("gc", cwd=tmp_path, timeout=120)
    assert gc.returncode == 0, gc.stderr
    assert [r for r in list_objects() if r.labels.get("acx.pid") == str(pid)] == []
    ps = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=acx.pid={pid}"], capture_output=True, text=True
    )
    nets = subprocess.run(
        ["docker", "network", "ls", "-q", "--filter", f"label=acx.pid={pid}"],
        capture_output=True,
        text=True,
    )
    assert ps.stdout.strip() == "" and nets.stdout.strip() == ""


@pytest.mark.parametrize("task", ["hello-workdir"])
def test_no_network_agent_phase(task: str, tmp_path: Path) -> None:
    # contract P6, H4: the hello task's agent runs with only loopback (its answer lists interfaces)
    spec = tmp_path / "net.acx"
    probe = "python3 -c \"import socket;print(' '.join(sorted(i[1] for i in socket.if_nameindex())))\""
    spec.write_text(
        f'run net {{\n  benchmark harbor {{ path = "{ROOT / "examples/harbor"}"; task_names = ["{task}"] }}\n'
        f"  harness command {{ command = {json.dumps(probe)} }}\n"
        "  environment docker\n}\n"
    )
    proc = _acx("run", str(spec), "--results-dir", str(tmp_path / "r"), "--progress", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = next((tmp_path / "r/net").glob(f"*/details/*/{task}--*/attempt-1/result.json"))
    assert json.loads(result.read_text())["final_answer"].split() == ["lo"]


def test_ctrl_c_leaves_nothing(tmp_path: Path) -> None:
    # no debris: SIGINT mid-run cancels cleanly (exit 130) and releases every sandbox
    spec = tmp_path / "slow.acx"
    spec.write_text(
        f'run slow {{\n  benchmark harbor {{ path = "{ROOT / "examples/harbor"}" }}\n'
        '  harness command { command = ["sleep", "120"] }\n  environment docker\n}\n'
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "acx",
            "run",
            str(spec),
            "--results-dir",
            str(tmp_path / "r"),
            "--progress",
            "none",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        mine = [r for r in list_objects() if r.labels.get("acx.pid") == str(proc.pid)]
        if sum(r.labels.get("docker.kind") == "container" for r in mine) >= 3:
            break
        time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert [r for r in list_objects() if r.labels.get("acx.pid") == str(proc.pid)] == []
