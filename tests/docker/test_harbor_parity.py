"""The Harbor parity corpus (issue 22): task directories written for acx, one or more per Harbor
feature and per shape of Harbor's own ``examples/tasks``, each with the oracle and do-nothing
rewards Harbor's semantics give, asserted on the real engine through ``acx run``.

Harbor's semantics, as read in harbor 0.26 (``trial/``, ``verifier/verifier.py``,
``agents/oracle.py``, ``environments/docker``):

* the oracle uploads ``solution/`` to ``/solution`` and runs ``solve.sh`` as ``[agent].user``;
* the verifier uploads ``tests/`` to ``/tests`` and runs ``test.sh`` as ``[verifier].user``; the
  reward is ``reward.json`` (first) or ``reward.txt``; the test's exit code is ignored;
* the agent phase runs under ``[agent]``'s network policy, else the environment baseline;
* the image's ENTRYPOINT runs with ``sleep infinity`` as its command, ``[environment.env]`` in
  its environment;
* multi-step tasks (``trial/multi_step.py``) run each step's instruction, agent and verifier in
  order in one environment: before a step's agent the previous shared verifier's ``/tests`` and
  ``/logs/verifier`` are emptied and ``steps/<name>/workdir/`` is uploaded (its ``setup.sh`` run);
  the step's tests are uploaded over the task's ``tests/`` and its ``test.sh`` wins; the oracle runs
  the step's ``solution/solve.sh``, else the task's; a step with no verifier result, or below its
  ``min_reward``, ends the task; a step's own agent/verifier network policy is its phase policy;
  after each step's agent the task's and the step's collect commands run and artifacts are
  collected; the trial reward (``Trial._select_multi_step_reward``) is the
  per-key mean over the steps that have a verifier result, a missing key counting 0 (``mean``,
  the default), or the last step's (``final``).

One deliberate difference, said in docs/harbor.md: an oracle run of a task with no ``solution/``
is a per-task error with no score in acx (Harbor records the FileNotFoundError and still grades).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parent / "harbor_parity"

#: task → (oracle reward, do-nothing reward) as Harbor defines them; None = no reward (an error).
EXPECTED: dict[str, tuple[float | None, float | None]] = {
    "agent-user": (1.0, 0.0),
    "verifier-user": (1.0, 0.0),
    "startup-env": (1.0, 1.0),  # the entrypoint's environment is all it checks
    "offline-mode": (1.0, 0.0),
    "offline-legacy": (1.0, 0.0),
    "online-control": (1.0, 0.0),
    "no-solution": (None, 1.0),
    "buildkit-syntax": (1.0, 0.0),  # `# syntax=`, RUN heredocs, RUN --mount, COPY --chmod
    "heredoc-only": (1.0, 0.0),  # heredocs lowered for the classic builder
    # multi-step: idle scores only the last step (its set-up ran): mean (0 + 0 + 1) / 3
    "steps-mean": (1.0, 1 / 3),
    # final: the oracle's last step gives 0.5; idle misses the first step's min_reward and stops
    "steps-final-gate": (0.5, 0.0),
    # idle: the second step's verifier writes no reward, so the mean is over the first step only
    "steps-user-env": (1.0, 1.0),
    "steps-network": (1.0, 0.0),
    # the second step's set-up fails: it has no reward and the third never runs
    "steps-setup-fails": (1.0, 0.0),
    # idle: the second step's healthcheck fails (its set-up found no /app/go), so it has no reward
    "steps-healthcheck": (1.0, 0.0),
    # never healthy: no agent, no verifier, no reward, whoever the agent
    "healthcheck-fails": (None, None),
}

#: multi-step task → run → (each step's rewards; None = no verifier result, the steps skipped).
STEP_REWARDS: dict[tuple[str, str], tuple[list[dict[str, float] | None], list[str]]] = {
    ("steps-mean", "oracle"): ([{"reward": 1, "style": 1}, {"reward": 1}, {"reward": 1, "notes": 1}], []),
    ("steps-mean", "idle"): ([{"reward": 0, "style": 1}, {"reward": 0}, {"reward": 1, "notes": 0}], []),
    ("steps-final-gate", "oracle"): ([{"reward": 1}, {"reward": 0.75, "quality": 1}, {"reward": 0.5}], []),
    ("steps-final-gate", "idle"): ([{"reward": 0}], ["middle", "last"]),
    ("steps-user-env", "oracle"): ([{"reward": 1}, {"reward": 1}], []),
    ("steps-user-env", "idle"): ([{"reward": 1}, None], []),
    ("steps-setup-fails", "oracle"): ([{"reward": 1}, None], ["never"]),
    ("steps-setup-fails", "idle"): ([{"reward": 0}, None], ["never"]),
    ("steps-healthcheck", "oracle"): ([{"reward": 1}, {"reward": 1}], []),
    ("steps-healthcheck", "idle"): ([{"reward": 0}, None], []),
}

#: task → whether its agent phase may connect to a listener on the engine's bridge gateway.
AGENT_NETWORK = {"offline-mode": False, "offline-legacy": False, "online-control": True, "steps-network": True}

#: multi-step task → whether each step's agent may connect (the step's own policy, else the task's).
STEP_NETWORK = {"steps-network": [False, True]}


def _bridge_gateway() -> str:
    """The host's address on the engine's default bridge (what the model gateway listens on)."""
    import trio

    from acx.drivers._specs import DockerConfig
    from acx.drivers.docker import DockerDriver

    address = trio.run(DockerDriver(DockerConfig()).model_gateway_address)
    assert address, "the docker bridge has no gateway address"
    return address


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[str, int]]:
    """A TCP listener on this machine's docker bridge gateway (the project's own network):
    what an agent phase with network reaches, and one without must not."""
    host = _bridge_gateway()
    server = socket.create_server((host, 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield host, server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def _probe(host: str, port: int) -> str:
    code = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(5)\n"
        "try:\n"
        f"    s.connect(({host!r}, {port})); print('connected')\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
    )
    return json.dumps(["python3", "-c", code])


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory: pytest.TempPathFactory, listener: tuple[str, int]) -> Path:
    """One `acx run` over the whole corpus: oracle, a do-nothing agent, a network probe."""
    tmp = tmp_path_factory.mktemp("parity")
    spec = tmp / "parity.acx"
    spec.write_text(
        "orchestration parity {\n  task_concurrency = 3\n"
        f'  defaults {{\n    benchmark harbor {{ path = "{CORPUS}" }}\n    environment docker\n  }}\n'
        "  run oracle { harness oracle }\n"
        '  run idle { harness command { command = ["true"] } }\n'
        "  run probe {\n"
        f'    benchmark harbor {{ path = "{CORPUS}"; task_names = {json.dumps(sorted(AGENT_NETWORK))} }}\n'
        f"    harness command {{ command = {_probe(*listener)} }}\n  }}\n"
        "}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(tmp / "results"), "--progress", "none"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=900,
    )
    # exit 1: the oracle of `no-solution` and `healthcheck-fails` are errors on purpose
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return tmp / "results"


def _results(results: Path, request: str) -> dict[str, dict]:
    out = {}
    for path in (results / request).glob("*/details/*/*/attempt-1/result.json"):
        data = json.loads(path.read_text())
        out[data["task_id"]] = data
    return out


def test_every_corpus_task_is_listed() -> None:
    assert {p.parent.name for p in CORPUS.glob("*/task.toml")} == set(EXPECTED)


@pytest.mark.parametrize("request_name", ["oracle", "idle"])
def test_rewards_equal_harbors(corpus_run: Path, request_name: str) -> None:
    # issue 22: every task's oracle and do-nothing rewards equal Harbor's
    results = _results(corpus_run, request_name)
    column = 0 if request_name == "oracle" else 1
    got = {task: results[task]["metrics"].get("score") for task in EXPECTED}
    want = {task: rewards[column] for task, rewards in EXPECTED.items()}
    got = {task: round(v, 9) if isinstance(v, float) else v for task, v in got.items()}
    want = {task: round(v, 9) if isinstance(v, float) else v for task, v in want.items()}
    detail = {t: [i["code"] for i in results[t]["issues"]] for t in EXPECTED if got[t] != want[t]}
    assert got == want, detail


@pytest.mark.parametrize(("task", "request_name"), sorted(STEP_REWARDS))
def test_multi_step_rewards_per_step(corpus_run: Path, task: str, request_name: str) -> None:
    # issue 22 item 4: a reward per step in result.json, the skipped steps named, and the task's
    # rewards aggregated per key as Harbor does (mean: steps_mean's `style` is 1/3 for both runs)
    result = _results(corpus_run, request_name)[task]
    want, skipped = STEP_REWARDS[(task, request_name)]
    steps = result["extra"]["steps"]
    assert [s["rewards"] for s in steps] == want, steps
    assert result["extra"].get("steps_skipped", []) == skipped
    if task == "steps-mean":
        assert result["extra"]["rewards"]["style"] == pytest.approx(1 / 3)
        assert result["extra"]["rewards"]["notes"] == pytest.approx(1 / 3 if request_name == "oracle" else 0)
    if task == "steps-setup-fails":  # the failed set-up ended its step, not the scored attempt
        broken = steps[1]["issues"]
        assert [(i["severity"], i["code"]) for i in broken] == [("fatal", "setup_failed")], broken
        assert "setup.sh exited 3: cannot stage the step" in broken[0]["message"]
        assert ("error", "setup_failed") in {(i["severity"], i["code"]) for i in result["issues"]}
    if (task, request_name) == ("steps-user-env", "idle"):  # the step's failure is said, as a warning
        assert [(i["severity"], i["code"]) for i in steps[1]["issues"]] == [("error", "reward_missing")]
        assert ("warning", "reward_missing") in {(i["severity"], i["code"]) for i in result["issues"]}
        assert result["status"] == "completed"


def test_a_failing_healthcheck_is_an_error_before_the_agent(corpus_run: Path) -> None:
    # Harbor's run_healthcheck: HealthcheckError before the agent is set up, never graded
    for request in ("oracle", "idle"):
        result = _results(corpus_run, request)["healthcheck-fails"]
        assert result["metrics"] == {} and "verifier_returncode" not in result.get("extra", {})
        fatal = [i for i in result["issues"] if i["severity"] == "fatal"]
        assert [i["code"] for i in fatal] == ["setup_failed"], result["issues"]
        assert "healthcheck failed after 2 consecutive retries: test -f /nonexistent" in fatal[0]["message"]
    idle = _results(corpus_run, "idle")["steps-healthcheck"]["extra"]["steps"][1]
    assert "healthcheck failed after 2 consecutive retries" in idle["issues"][0]["message"]


def test_oracle_without_solution_is_an_error_not_a_reward(corpus_run: Path) -> None:
    # issue 22 item 6: never verified, never rewarded; the reason is in result.json
    result = _results(corpus_run, "oracle")["no-solution"]
    assert result["metrics"] == {}
    codes = {(i["severity"], i["code"]) for i in result["issues"]}
    assert ("fatal", "input_missing") in codes, result["issues"]
    assert "verifier_returncode" not in result.get("extra", {})


def test_agent_phase_network_follows_the_environment(corpus_run: Path) -> None:
    # issue 22 item 1: the agent of a no-network / allow_internet = false task cannot connect
    results = _results(corpus_run, "probe")
    answers = {task: (results[task].get("final_answer") or "").split()[0] for task in AGENT_NETWORK}
    assert answers == {task: "connected" if ok else "blocked" for task, ok in AGENT_NETWORK.items()}


def test_each_steps_agent_has_its_own_network_policy(corpus_run: Path) -> None:
    # Harbor's _explicit_phase_policy per step: [steps.agent] network_mode, else the task's
    results = _results(corpus_run, "probe")
    for task, allowed in STEP_NETWORK.items():
        answers = [(s.get("final_answer") or "").split()[0] for s in results[task]["extra"]["steps"]]
        assert answers == ["connected" if ok else "blocked" for ok in allowed], results[task]["extra"]["steps"]


def test_unbuildable_dockerfile_is_refused_before_the_run(tmp_path: Path) -> None:
    # issue 22 item 5: never an engine parse error mid-run — a located refusal before any sandbox
    task = tmp_path / "tasks" / "copy-heredoc"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text("")
    (task / "instruction.md").write_text("Nothing.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "environment" / "Dockerfile").write_text(
        "FROM acx-test/bookworm:latest\nCOPY <<EOF /etc/motd\nhello\nEOF\n"
    )
    spec = tmp_path / "one.acx"
    spec.write_text(
        f'run one {{\n  benchmark harbor {{ path = "{task}" }}\n  harness oracle\n  environment docker\n}}\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", str(tmp_path / "r"), "--progress", "none"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "E0706" in proc.stderr and f"{task}/environment/Dockerfile:2" in proc.stderr, proc.stderr
    assert "COPY" in proc.stderr and "help:" in proc.stderr
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").rglob("result.json"))


def test_multi_step_artifacts_are_collected_after_every_step(tmp_path: Path) -> None:
    # Harbor's _collect_step_artifacts: after each step's agent (before its verifier), the task's
    # artifacts and collect commands with the step's; acx saves them into attempt-N/steps/<name>/
    spec = tmp_path / "arts.yaml"
    spec.write_text(
        "version: 1\nname: arts\ntask_concurrency: 2\nruntime: {results_dir: results, progress: none}\n"
        "requests:\n  - name: oracle\n"
        f'    benchmark: {{id: harbor, path: "{CORPUS}", task_names: [steps-mean, steps-final-gate]}}\n'
        "    harness: {id: oracle}\n    environment: {id: docker}\n    execution: {save_artifacts: true}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(tmp_path / "results", "oracle")
    # the last step's collect command ran before its verifier (its test needs the file): 0.5
    assert results["steps-final-gate"]["metrics"]["score"] == 0.5
    (attempt,) = (tmp_path / "results" / "oracle").glob("*/details/*/steps-mean*/attempt-1")
    notes = {
        s: (attempt / "steps" / s / "artifacts" / "app" / "notes.txt").read_text() for s in ("write", "extend", "check")
    }
    assert notes == {"write": "alpha\n", "extend": "alpha\nbeta\n", "check": "alpha\nbeta\ngamma\n"}
    manifests = [s["artifacts"]["manifest"] for s in results["steps-mean"]["extra"]["steps"]]
    assert all(
        (attempt / "steps" / s / m).is_file() for s, m in zip(("write", "extend", "check"), manifests, strict=True)
    )
