"""`acx run` findings of the run-time QA pass: output streams, locking, resume safety, corrupt files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "examples" / "quickstart.acx")
ACX = (sys.executable, "-m", "acx")


def _status(results: Path) -> str:
    (run_dir,) = (results / "quickstart").iterdir()
    return str(json.loads((run_dir / "run_info.json").read_text())["status"])


def test_a_reader_that_goes_away_does_not_fail_the_run(tmp_path: Path) -> None:
    # contract R13
    # `acx run ... 2>&1 | head -1`: the progress display and the final report hit a closed pipe.
    results = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "acx", "run", QUICKSTART, "--results-dir", str(results), "--progress", "plain"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert _status(results) == "completed"
    (run_dir,) = (results / "quickstart").iterdir()
    assert len(list((run_dir / "details").glob("*/*/task.json"))) == 10
    assert "Traceback" not in (run_dir / "run.log").read_text()


def test_a_closed_stderr_does_not_fail_the_run(tmp_path: Path) -> None:
    # contract R13
    # `acx run ... 2>&-`: no stderr at all (sys.stderr is None; descriptor 2 is free).
    results = tmp_path / "r"
    cmd = f"'{sys.executable}' -m acx run '{QUICKSTART}' --results-dir '{results}' --progress plain 2>&-"
    res = subprocess.run(["sh", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout
    assert "quickstart: completed" in res.stdout
    assert _status(results) == "completed"


def _acx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acx", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _quickstart_copy(tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(REPO / "examples", tmp_path / "ex")
    return tmp_path / "ex" / "quickstart.acx"


def test_resume_of_a_run_still_in_progress_is_refused(tmp_path: Path) -> None:
    # contract R13
    # Two processes on one run directory would run tasks twice and kill each other's agents.
    from acx.interpreter._store import RunStore

    spec = _quickstart_copy(tmp_path)
    res = _acx("run", str(spec), "--results-dir", "r", "--run-id", "one", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    live = RunStore.open_existing(tmp_path / "r" / "quickstart" / "one")
    live.lock()  # stands for the run's own process, still going
    try:
        res = _acx("run", "--resume", "r/quickstart/one", "--progress", "none", cwd=tmp_path)
        assert res.returncode == 2 and "E0617" in res.stderr and "in use by another acx process" in res.stderr
        assert "Traceback" not in res.stderr
        info = tmp_path / "r" / "quickstart" / "one" / "run_info.json"
        info.write_text(info.read_text().replace('"status": "completed"', '"status": "running"'))
        shown = _acx("results", "show", "r/quickstart/one", cwd=tmp_path)
        assert f"in progress (process {os.getpid()})" in shown.stdout and "--resume" not in shown.stdout
    finally:
        live.close()
    res = _acx("run", "--resume", "r/quickstart/one", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr  # the lock went with its holder


def test_resume_refuses_a_changed_dataset(tmp_path: Path) -> None:
    # contract R13
    spec = _quickstart_copy(tmp_path)
    res = _acx("run", str(spec), "--results-dir", "r", "--run-id", "one", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (data,) = (tmp_path / "ex" / "data").glob("quickstart*.jsonl")
    lines = data.read_text().splitlines()
    data.write_text("\n".join(lines[1:]) + "\n")  # a task removed from the dataset
    res = _acx("run", "--resume", "r/quickstart/one", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 2 and "E0619" in res.stderr and "tasks of request" in res.stderr


def test_a_damaged_run_info_is_a_clear_error_everywhere(tmp_path: Path) -> None:
    # contract R13
    spec = _quickstart_copy(tmp_path)
    res = _acx("run", str(spec), "--results-dir", "r", "--run-id", "one", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    info = tmp_path / "r" / "quickstart" / "one" / "run_info.json"
    info.write_text(info.read_text()[:100])
    for args in (
        ("results", "show", "r/quickstart/one"),
        ("run", "--resume", "r/quickstart/one", "--progress", "none"),
        ("run", str(spec), "--results-dir", "r", "--reuse", "one", "--progress", "none"),
    ):
        res = _acx(*args, cwd=tmp_path)
        assert res.returncode == 2, (args, res.stderr)
        assert "E0618" in res.stderr and "run_info.json is damaged" in res.stderr, res.stderr


def test_a_secret_reference_in_component_params_is_resolved_at_run_time_and_never_stored(tmp_path: Path) -> None:
    # contract V1
    # A `${VAR}` whose name looks like a secret stays a reference in the compiled request (never
    # printed or stored); the run resolves it for the components, and its value stays out of results.
    import shutil

    shutil.copytree(REPO / "examples", tmp_path / "ex")
    spec = tmp_path / "ex" / "secret.yaml"
    spec.write_text(
        (tmp_path / "ex" / "quickstart.yaml")
        .read_text()
        .replace('command: python3 "$ACX_SPEC_DIR/agents/arith_agent.py"', 'command: "${AGENT_CMD_TOKEN}"')
    )
    secret = 'python3 "$ACX_SPEC_DIR/agents/arith_agent.py" # tok-7f3a9c'
    env = {**os.environ, "AGENT_CMD_TOKEN": secret}
    res = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", "r", "--progress", "none"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "correct.avg@1 = 0.900" in res.stdout
    (run_dir,) = (tmp_path / "r" / "quickstart").iterdir()
    for p in run_dir.rglob("*"):
        if p.is_file():
            assert "tok-7f3a9c" not in p.read_text(errors="replace"), p
    assert "${AGENT_CMD_TOKEN}" in (run_dir / "run_info.json").read_text()
    missing = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec), "--results-dir", "r2", "--progress", "none"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "AGENT_CMD_TOKEN" in missing.stderr and "E0310" in missing.stderr
    assert not (tmp_path / "r2").exists()


def test_an_unreachable_docker_engine_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # contract E1
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    res = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(REPO / "examples" / "docker-smoke.acx"), "--results-dir", "r"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "error[E0701]: cannot reach the Docker engine" in res.stderr
    assert not (tmp_path / "r").exists() and "Traceback" not in res.stderr


def test_acx_docker_sweep_0_leaves_crashed_runs_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # contract E1
    # docs/docker.md: `ACX_DOCKER_SWEEP=0` skips the clean-up of crashed runs' containers at start.
    import uuid
    from types import SimpleNamespace

    import trio

    import acx.drivers.docker._create as create
    from acx.drivers._specs import DockerConfig

    swept: list[object] = []
    monkeypatch.setattr(create, "docker_client", lambda host: SimpleNamespace(ping=lambda: True))
    monkeypatch.setattr(create, "sweep_orphans", lambda host: swept.append(host) or ["c1"])
    host = f"unix:///x-{uuid.uuid4().hex}.sock"  # the sweep runs once per process and engine
    driver = create.DockerDriver(DockerConfig(docker_host=host))
    monkeypatch.setenv("ACX_DOCKER_SWEEP", "0")
    assert trio.run(driver.prepare) == []
    assert swept == []
    monkeypatch.delenv("ACX_DOCKER_SWEEP")
    assert trio.run(driver.prepare) == ["removed 1 object(s) left by crashed runs"]
    assert trio.run(driver.prepare) == []
    assert swept == [host]


def test_a_refused_run_leaves_no_run_directory_behind(tmp_path: Path) -> None:
    # contract R13
    # exit 2 means nothing ran — and nothing half-made is left for a later --reuse to pick up.
    spec = _quickstart_copy(tmp_path)
    res = _acx("run", str(spec), "--results-dir", "r", "--run-id", "src", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for extra in (("--reuse", "typo"), ("--reuse", "src", "--k", "2")):
        res = _acx("run", str(spec), "--results-dir", "r", *extra, "--progress", "none", cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert sorted(p.name for p in (tmp_path / "r" / "quickstart").iterdir()) == ["src"], extra
    res = _acx("run", str(spec), "--results-dir", "r", "--reuse", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0 and "correct.avg@1 = 0.900" in res.stdout


def test_an_unwritable_results_dir_is_a_clear_error(tmp_path: Path) -> None:
    # contract R13
    spec = _quickstart_copy(tmp_path)
    (tmp_path / "afile").write_text("x")
    res = _acx("run", str(spec), "--results-dir", "afile", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 2 and "E0620" in res.stderr and "Traceback" not in res.stderr


def test_every_missing_variable_is_reported_at_once(tmp_path: Path) -> None:
    # contract V1
    # Secrets (kept references, a dataset path among them) and env maps, across requests.
    spec = _quickstart_copy(tmp_path)
    (spec.parent / "miss.yaml").write_text(
        "version: 1\nname: miss\nrequests:\n"
        "  - name: one\n"
        "    benchmark: {id: exact_match, dataset: data/quickstart.jsonl}\n"
        '    harness: {id: command, command: "${CMD_ONE_SECRET}"}\n'
        '    environment: {id: host_process, evaluation_environment_mode: none, run_env_variables: {X: "${ENV_ONE}"}}\n'
        "  - name: two\n"
        '    benchmark: {id: exact_match, dataset: "${DATASET_SECRET}"}\n'
        '    harness: {id: command, command: "${CMD_TWO_SECRET}"}\n'
        '    environment: {id: host_process, evaluation_environment_mode: none, run_env_variables: {X: "${ENV_TWO}"}}\n'
    )
    res = _acx("run", str(spec.parent / "miss.yaml"), "--results-dir", "r", cwd=tmp_path)
    assert res.returncode == 2 and "E0310" in res.stderr
    assert "CMD_ONE_SECRET, CMD_TWO_SECRET, DATASET_SECRET, ENV_ONE, ENV_TWO" in res.stderr
    assert not (tmp_path / "r").exists()


def test_secret_references_outside_component_params_are_resolved_at_run_time(tmp_path: Path) -> None:
    # contract V1
    # The model id, environment params and execution lists get the value; the request on disk
    # keeps the reference. A results path cannot be a secret (it would be a directory name).
    spec = _quickstart_copy(tmp_path)
    text = (spec.parent / "quickstart.yaml").read_text()
    text = text.replace(
        "    environment: {id: host_process, evaluation_environment_mode: none}",
        '    model: {id: "${MODEL_SECRET}"}\n'
        "    environment: {id: host_process, evaluation_environment_mode: none,"
        ' workdir_root: "${WORKDIR_SECRET}"}',
    )
    (spec.parent / "sec.yaml").write_text(text)
    env = {**os.environ, "MODEL_SECRET": "model-7e1d", "WORKDIR_SECRET": str(tmp_path / "wd")}
    res = subprocess.run(
        [sys.executable, "-m", "acx", "run", str(spec.parent / "sec.yaml"), "--results-dir", "r", "--progress", "none"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "wd").is_dir() and not list(spec.parent.glob("*WORKDIR*"))
    (run_dir,) = (tmp_path / "r" / "quickstart").iterdir()
    assert "model-7e1d" not in (run_dir / "run_info.json").read_text()
    (spec.parent / "out.yaml").write_text(
        text.replace("  - name: quickstart\n", '  - name: quickstart\n    output: {run_name: "${RUN_TOKEN}"}\n')
    )
    res = subprocess.run(
        [sys.executable, "-m", "acx", "compile", "--dry-run", str(spec.parent / "out.yaml")],
        cwd=tmp_path,
        env={**env, "RUN_TOKEN": "x"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "cannot be the secret reference" in res.stderr


def test_an_answer_file_that_is_not_a_file_is_a_task_error_not_a_fatal_one(tmp_path: Path) -> None:
    # contract S2
    spec = _quickstart_copy(tmp_path)
    text = (spec.parent / "quickstart.yaml").read_text()
    for name, command in (("fifo", "mkfifo ans.txt"), ("dir", "mkdir ans.txt")):
        (spec.parent / f"{name}.yaml").write_text(
            text.replace(
                'command: python3 "$ACX_SPEC_DIR/agents/arith_agent.py"',
                f'command: "{command}"\n      answer_file: ans.txt',
            )
        )
        res = subprocess.run(
            [*ACX, "run", str(spec.parent / f"{name}.yaml"), "--results-dir", name, "--tasks", "add-1"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0 and "correct.avg@1 = 0.000" in res.stdout, (name, res.stdout, res.stderr)
        (run_dir,) = (tmp_path / name / "quickstart").iterdir()
        (result,) = run_dir.glob("details/error/*/attempt-1/result.json")
        assert "output_missing" in result.read_text()


def test_resume_of_a_run_it_cannot_write_is_refused_up_front(tmp_path: Path) -> None:
    # contract R13
    import shutil

    spec = _quickstart_copy(tmp_path)
    res = _acx("run", str(spec), "--results-dir", "r", "--run-id", "one", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    running = tmp_path / "r" / "quickstart" / "one" / "details" / "running"
    shutil.rmtree(running)
    running.write_text("in the way")  # a directory resume must write into cannot be
    res = _acx("run", "--resume", "r/quickstart/one", "--progress", "none", cwd=tmp_path)
    assert res.returncode == 2 and "E0620" in res.stderr and "Traceback" not in res.stderr


def test_request_and_task_level_missing_variables_come_in_one_e0310(tmp_path: Path) -> None:
    # contract V1
    from acx.api._build import refuse_missing_env
    from acx.compiler import compile_orchestration

    def _refuse_missing_env(requests: list) -> None:
        refuse_missing_env(requests, os.environ)

    spec = _quickstart_copy(tmp_path)
    text = (spec.parent / "quickstart.yaml").read_text()
    text = text.replace(
        "    environment: {id: host_process, evaluation_environment_mode: none}",
        '    environment: {id: host_process, evaluation_environment_mode: none, run_env_variables: {X: "${RUN_ONLY}"}}',
    )
    (spec.parent / "env.yaml").write_text(text)
    requests = [r.request for r in compile_orchestration(str(spec.parent / "env.yaml")).orchestration.requests]
    _refuse_missing_env(requests)  # not needed to load the tasks: left to the preflight (one E0310)
    ds = text.replace("dataset: data/quickstart.jsonl", 'dataset: "${DATASET_SECRET}"')
    (spec.parent / "ds.yaml").write_text(ds)
    requests = [r.request for r in compile_orchestration(str(spec.parent / "ds.yaml")).orchestration.requests]
    with pytest.raises(Exception, match="DATASET_SECRET, RUN_ONLY"):
        _refuse_missing_env(requests)
