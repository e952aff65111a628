"""The agent compatibility suite on Docker (issue 23 item 1): the REAL Codex CLI, Claude Code,
mini-swe-agent, OpenCode and aider, each with its shipped definition, in a locally built image, with
the task at ``no-network`` and the model only through the run's gateway (acx's scripted fake model
server), and OpenHands. Terminus (the built-in ``terminus`` harness: no package) is
tests/docker/test_terminus_harbor.py.

The packages come from their registries ON THE HOST (inside a docker build npm and PyPI are not
reachable): scripts/test.sh puts them under ``.pytest_cache/`` (npm prefixes for the CLIs; for
mini-swe-agent and aider their wheels and pip's, for the image's Python 3.11 on manylinux x86_64)
and for OpenHands the wheels ``pip wheel`` made with the host's Python 3.12 (some of its
dependencies are sdists only) and sets ``ACX_REQUIRE_AGENTS=1``, which turns a missing package into
a failure instead of a skip.
Each is uploaded and installed offline by the definition's harness (``upload`` + an offline
``install``), once per image thanks to the install cache — the QA tasks share one install, the
Harbor task (its own image) another. The image is
``acx-test/bookworm`` with the host's ``node`` (Codex's launcher is a Node script); for OpenHands
(Python >= 3.12; bookworm's is 3.11) ``acx-test/bookworm`` with the host's CPython 3.12 copied in.

Per agent, one ``acx run`` with three requests, and for each:
(a) every model call reached the fake server through the gateway (with the real key, which the
    agent never had; the tasks' no-network became an allowlist of the gateway alone);
(b) the Harbor example ``hello-workdir`` scores reward 1 and a QA task is scored correct when the
    script does the right thing;
(c) a clean failure when the script gives up (an error issue, no answer, never ``completed``
    with a score);
(d) usage and trajectory from the gateway, and the agent's own log/trajectory file, in the results.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from acx.components.harnesses._agents import AGENTS
from acx.testing.fake_models import FakeModelServer, Step, error, text, tool_call

# an install of a real agent into an image is minutes on a cold, busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "harbor" / "hello-workdir"
KEY = "sk-compat-suite-secret-7731"
BASE = "acx-test/bookworm:latest"

#: Pinned versions (the host_process tests pin the same: tests/agents/test_codex_real.py,
#: test_real_agents.py, test_opencode_real.py, test_aider_real.py); scripts/test.sh reads them here.
CODEX_VERSION = "0.171.0"
CLAUDE_VERSION = "2.1.197"
MINI_VERSION = "2.4.6"
OPENCODE_VERSION = "1.18.33"
AIDER_VERSION = "0.86.2"
OPENHANDS_VERSION = "1.16.0"
PACKAGES = {
    "codex": REPO / ".pytest_cache" / "acx-npm" / f"codex-{CODEX_VERSION}",
    "claude-code": REPO / ".pytest_cache" / "acx-npm" / f"claude-code-{CLAUDE_VERSION}",
    "mini-swe-agent": REPO / ".pytest_cache" / "acx-pypi" / f"mini-swe-agent-{MINI_VERSION}",
    "opencode": REPO / ".pytest_cache" / "acx-npm" / f"opencode-{OPENCODE_VERSION}",
    "aider": REPO / ".pytest_cache" / "acx-pypi" / f"aider-chat-{AIDER_VERSION}",
    "openhands": REPO / ".pytest_cache" / "acx-pypi" / f"openhands-{OPENHANDS_VERSION}",
}
#: pip, from its own wheel, installs a wheel directory offline (the image has no pip).
_PIP = (
    "python3 $(ls $W/pip-*.whl)/pip install -q --no-index --find-links $W --break-system-packages "
    "--root-user-action=ignore"
)
#: Offline installs of the uploaded packages ($ACX_AGENT_DIR/<the package directory's name>).
INSTALLS = {
    "codex": f"set -e; ln -sf $ACX_AGENT_DIR/codex-{CODEX_VERSION}/node_modules/.bin/codex /usr/local/bin/codex; "
    f"codex --version | grep -F {CODEX_VERSION}",
    "claude-code": f"set -e; ln -sf $ACX_AGENT_DIR/claude-code-{CLAUDE_VERSION}/node_modules/.bin/claude "
    f"/usr/local/bin/claude; claude --version | grep -F {CLAUDE_VERSION}",
    "mini-swe-agent": f"set -e; W=$ACX_AGENT_DIR/mini-swe-agent-{MINI_VERSION}; {_PIP} "
    f"mini-swe-agent=={MINI_VERSION}; mini --help >/dev/null",
    # The npm package's launcher is the native binary (opencode-linux-x64, an optional dependency).
    "opencode": f"set -e; ln -sf $ACX_AGENT_DIR/opencode-{OPENCODE_VERSION}/node_modules/.bin/opencode "
    f"/usr/local/bin/opencode; opencode --version | grep -F {OPENCODE_VERSION}",
    "aider": f"set -e; W=$ACX_AGENT_DIR/aider-chat-{AIDER_VERSION}; {_PIP} aider-chat=={AIDER_VERSION}; "
    f"aider --version | grep -F {AIDER_VERSION}",
    # Into a venv of the image's python3.12 (the wheels bring no pip: the venv's own does it).
    "openhands": f"set -e; python3.12 -m venv /opt/openhands; /opt/openhands/bin/pip install -q --no-index "
    f"--disable-pip-version-check --find-links $ACX_AGENT_DIR/openhands-{OPENHANDS_VERSION} "
    f"openhands=={OPENHANDS_VERSION}; ln -sf /opt/openhands/bin/openhands /usr/local/bin/openhands",
}
#: The model calls each agent makes on the Harbor task (aider: one reply whose file listing it applies).
HARBOR_CALLS = {"codex": 2, "claude-code": 2, "mini-swe-agent": 2, "opencode": 2, "aider": 1, "openhands": 2}
SOLVE_SH = "printf '%s, world!\\n' \"$GREETING\" > hello.txt"


def _require(reason: str) -> None:
    if os.environ.get("ACX_REQUIRE_AGENTS") == "1":
        pytest.fail(f"{reason} (ACX_REQUIRE_AGENTS=1)", pytrace=False)
    pytest.skip(f"!!! agent compatibility suite SKIPPED: {reason} (scripts/test.sh installs them) !!!")


def _package(agent: str) -> Path:
    path = PACKAGES[agent]
    probe = {
        "codex": path / "node_modules" / ".bin" / "codex",
        "claude-code": path / "node_modules" / ".bin" / "claude",
        "mini-swe-agent": next(path.glob(f"mini_swe_agent-{MINI_VERSION}-*.whl"), path / "missing"),
        "opencode": path / "node_modules" / ".bin" / "opencode",
        "aider": next(path.glob(f"aider_chat-{AIDER_VERSION}-*.whl"), path / "missing"),
        "openhands": next(path.glob(f"openhands-{OPENHANDS_VERSION}-*.whl"), path / "missing"),
    }[agent]
    if not probe.exists():
        _require(f"{agent}: {probe} is missing")
    return path


@pytest.fixture(scope="module")
def agents_image() -> str:
    if shutil.which("node") is None:
        _require("no node on the host (Codex's launcher is a Node script)")
    return build_agents_image()


def build_agents_image() -> str:
    """``acx-test/bookworm`` with the host's ``node``; tagged by the binary's hash, built once
    (also used by bench/agent_install.py)."""
    node = shutil.which("node")
    assert node is not None
    node_path = Path(node).resolve()
    digest = hashlib.sha256(node_path.read_bytes()).hexdigest()[:12]
    tag = f"acx-test/agents-node:{digest}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    context = REPO / ".pytest_cache" / "acx-agents-image"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copy2(node_path, context / "node")
    (context / "Dockerfile").write_text(f"FROM {BASE}\nCOPY node /usr/local/bin/node\nRUN node --version\n")
    build = subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], capture_output=True, text=True)
    shutil.rmtree(context, ignore_errors=True)
    assert build.returncode == 0, build.stderr
    return tag


def _python312() -> Path:
    """The prefix of the host's CPython 3.12 (``ACX_OPENHANDS_PYTHON``, default pyenv's 3.12.1)."""
    given = os.environ.get("ACX_OPENHANDS_PYTHON", "python3.12")
    env = {**os.environ, "PYENV_VERSION": "3.12.1"}  # pyenv's shim picks 3.12 (no effect elsewhere)
    try:
        out = subprocess.run(
            [given, "-c", "import sys; assert sys.version_info[:2] == (3, 12); print(sys.base_prefix)"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _require(f"openhands: no host CPython 3.12 ({given}: {exc})")
    if out.returncode != 0:
        _require(f"openhands: no host CPython 3.12 ({given}: {out.stderr[-500:]})")
    return Path(out.stdout.strip())


def build_python312_image() -> str:
    """``acx-test/bookworm`` with the host's CPython 3.12 at its own prefix (its libpython is found
    there) and ``python3.12`` on PATH; tagged by the libpython's hash, built once."""
    prefix = _python312()
    lib = next(prefix.glob("lib/libpython3.12*.so*"), prefix / "bin" / "python3.12")
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()[:12]
    tag = f"acx-test/agents-py312:{digest}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    context = REPO / ".pytest_cache" / f"acx-py312-image-{os.getpid()}"
    shutil.rmtree(context, ignore_errors=True)
    # Not its site-packages (the host's installs) nor its test suite: the runtime alone.
    ignore = shutil.ignore_patterns("site-packages", "test", "__pycache__")
    shutil.copytree(prefix, context / "py", symlinks=True, ignore=ignore)
    (context / "py" / "lib" / "python3.12" / "site-packages").mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {BASE}\nCOPY py {prefix}\n"
        f"RUN ln -s {prefix}/bin/python3.12 /usr/local/bin/python3.12 && python3.12 -m venv --help >/dev/null\n"
    )
    build = subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], capture_output=True, text=True)
    shutil.rmtree(context, ignore_errors=True)
    assert build.returncode == 0, build.stderr
    return tag


def _bridge_address() -> str:
    import trio

    from acx.drivers._specs import DockerConfig
    from acx.drivers.docker import DockerDriver

    address = trio.run(DockerDriver(DockerConfig()).model_gateway_address)
    assert address, "the engine's default bridge has no IPv4 gateway"
    return address


#: agent → (its protocol, the Harbor script, the QA script, the give-up script).
def _scripts(agent: str) -> tuple[list[Step], list[Step], list[Step]]:
    if agent == "codex":
        return (
            [tool_call("exec_command", {"cmd": SOLVE_SH}, call_id="call_1", usage=(40, 12)), text("Done.")],
            [text("42", usage=(30, 2))],
            [error(400, "scripted refusal")],
        )
    if agent == "claude-code":
        return (
            [
                tool_call("Bash", {"command": SOLVE_SH, "description": "write"}, call_id="toolu_1", usage=(40, 12)),
                text("Done."),
            ],
            [text("42", usage=(30, 2))],
            [error(400, "scripted refusal")],
        )
    if agent == "opencode":
        return (
            [
                tool_call("bash", {"command": SOLVE_SH, "description": "write"}, call_id="c1", usage=(40, 12)),
                text("Done."),
            ],
            [text("42", usage=(30, 2))],
            [error(400, "scripted refusal")],
        )
    if agent == "aider":
        # aider's `whole` edit format: the file's name, then its whole content fenced; applied in
        # the task's workdir (aider runs no shell command, so the value is written literally).
        return (
            [text("hello.txt\n```\nHello, world!\n```", usage=(40, 12))],
            [text("42", usage=(30, 2))],
            [error(400, "scripted refusal")],  # aider exits 0: no reply in its chat history, no answer
        )
    if agent == "openhands":
        terminal = {"command": SOLVE_SH, "is_input": False, "security_risk": "LOW"}
        return (
            [
                tool_call("terminal", terminal, call_id="c1", usage=(40, 12)),
                tool_call("finish", {"message": "Done."}, call_id="c2"),
            ],
            [tool_call("finish", {"message": "42"}, call_id="c1", usage=(30, 2))],
            [error(400, "scripted refusal")],  # OpenHands exits 0: no finish, no answer
        )
    submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    return (
        [tool_call("bash", {"command": SOLVE_SH}, usage=(40, 12)), tool_call("bash", {"command": submit})],
        [tool_call("bash", {"command": f"{submit} && echo 42"}, usage=(30, 2))],
        [text("I give up.")] * 3,  # no tool call three times: mini stops (RepeatedFormatError)
    )


def _spec(tmp_path: Path, agent: str, image: str, servers: dict[str, FakeModelServer], run_id: str) -> Path:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLE, tasks / EXAMPLE.name)
    dockerfile = tasks / EXAMPLE.name / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace(f"FROM {BASE}", f"FROM {image}"))
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": "q0", "question": "What is 6*7?", "answer": "42"}) + "\n")
    harness = json.dumps(
        {
            "id": "installed_agent",
            "agent": agent,
            "upload": [str(_package(agent))],
            "install": INSTALLS[agent],
            "install_timeout_seconds": 900,  # OpenHands: minutes cold on a busy 2-core machine
        }
    )
    protocol = AGENTS[agent].protocol
    qa_env = f'{{id: docker, setup: {{image: "{image}"}}, run_network_policy: {{network_mode: no-network}}}}'
    requests = ""
    for name, bench, env in (
        ("harbor", "{id: harbor, path: tasks}", "{id: docker}"),
        ("qa", "{id: exact_match, dataset: qa.jsonl}", qa_env),
        ("giveup", "{id: exact_match, dataset: qa.jsonl}", qa_env),
    ):
        requests += f"""  - name: {name}
    benchmark: {bench}
    harness: {harness}
    model: {{id: fake-model, base_url: "{servers[name].base_url}", api_key: "${{MKEY}}", api_protocol: {protocol}}}
    environment: {env}
    execution: {{run_timeout_seconds: 240, max_retries: 0}}
"""
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"""version: 1
name: compat
runtime: {{results_dir: results, progress: none}}
task_concurrency: 2
defaults:
  output: {{run_id: "{run_id}"}}
requests:
{requests}"""
    )
    return spec


def _result(tmp_path: Path, request: str) -> dict[str, Any]:
    (run_dir,) = (tmp_path / "results" / request).iterdir()
    return json.loads(next(run_dir.rglob("attempt-1/result.json")).read_text())


def _calls(tmp_path: Path, request: str) -> list[dict[str, Any]]:
    (run_dir,) = (tmp_path / "results" / request).iterdir()
    data = json.loads(next(run_dir.rglob("attempt-1/model_calls.json")).read_text())
    return data["calls"] if isinstance(data, dict) else data


@pytest.mark.parametrize("agent", ["codex", "claude-code", "mini-swe-agent", "opencode", "aider", "openhands"])
def test_real_agent_in_docker_through_the_gateway(
    agent: str, tmp_path: Path, run_label: str, agents_image: str
) -> None:
    _package(agent)
    image = build_python312_image() if agent == "openhands" else agents_image
    host = _bridge_address()
    harbor, qa, giveup = _scripts(agent)
    with ExitStack() as stack:
        servers = {
            name: stack.enter_context(FakeModelServer(script, default=None, host=host))
            for name, script in (("harbor", harbor), ("qa", qa), ("giveup", giveup))
        }
        spec = _spec(tmp_path, agent, image, servers, run_label)
        plans = subprocess.run(
            [sys.executable, "-m", "acx", "compile", "--plans", str(spec)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        res = subprocess.run(
            [sys.executable, "-m", "acx", "run", str(spec)],
            cwd=tmp_path,
            env={**os.environ, "MKEY": KEY},
            capture_output=True,
            text=True,
            timeout=1500,
        )
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out
    # (a) At no-network the run policy admits the gateway alone.
    assert plans.stdout.count("run allowlist[acx-model-gateway]") == 3, plans.stdout
    for name, srv in servers.items():
        assert srv.requests, (agent, name, out)
        # Every call the fake server saw came through the gateway: it carries the real key,
        # which only the gateway has (the agent got a per-attempt token), and it is one the
        # gateway recorded.
        assert all(KEY in (r.headers.get("authorization") or r.headers.get("x-api-key") or "") for r in srv.requests)
        assert len(_calls(tmp_path, name)) == len(srv.requests), (agent, name)
    # (b) The Harbor task scores reward 1, the QA task is correct.
    harbor_result = _result(tmp_path, "harbor")
    assert harbor_result["status"] == "completed", harbor_result["issues"]
    assert harbor_result["metrics"]["score"] == 1.0, (agent, harbor_result["issues"], out)
    qa_result = _result(tmp_path, "qa")
    assert qa_result["final_answer"] == "42", (agent, qa_result["issues"])
    assert qa_result["metrics"]["correct"] == 1.0
    # (c) Giving up is an error with no answer, and scores nothing.
    gave_up = _result(tmp_path, "giveup")
    assert not gave_up["final_answer"], gave_up["final_answer"]  # none, or an empty last message (codex)
    errors = {i["code"] for i in gave_up["issues"] if i["severity"] in ("error", "fatal")}
    assert errors & {"agent_exit_nonzero", "answer_not_found"}, gave_up["issues"]
    assert gave_up["metrics"].get("correct", 0.0) == 0.0
    # (d) Usage and trajectory from the gateway; the agent's own log in the results.
    for result, calls in ((harbor_result, HARBOR_CALLS[agent]), (qa_result, 1)):
        usage = result["telemetry"]["model_usage"]
        assert usage["model_calls"] >= calls and usage["prompt_tokens"] > 0, usage
        assert len(result["trajectory"]["steps"]) >= calls
        logs = result["telemetry"]["agent_logs"]
        own = AGENTS[agent].logs[0]
        assert logs.get(own), (agent, sorted(logs))
    # The install cache: the two QA requests share one install (at most one of them installed;
    # none did when an earlier run left the image).
    shared = [qa_result["telemetry"], gave_up["telemetry"]]
    assert shared[0]["install_cache_key"] == shared[1]["install_cache_key"]
    assert [t["install_cached"] for t in shared].count(False) <= 1, shared
    for p in (tmp_path / "results").rglob("*"):
        if p.is_file():
            assert KEY not in p.read_bytes().decode("utf-8", "replace"), p
