"""On host_process an agent runs as the user: the real model key must not sit in
``/proc/<acx pid>/environ`` for it to read (issue 24 item 11; contract M4: the real key stays
with acx). A live run on loopback with an agent that searches every ancestor's environment."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

from acx.testing.fake_models import FakeModelServer, text

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: The agent: walks up its ancestors (its shell, acx's spawn helper, acx itself) and looks for the
#: key in each one's environment — what any process of the same user can read.
AGENT = r"""
import os, sys
key = open(sys.argv[1], "rb").read()  # not from the environment: it would be found in our own
found, pid = [], os.getpid()
while pid > 1 and pid != int(sys.argv[2]):
    try:
        if key in open(f"/proc/{pid}/environ", "rb").read():
            found.append(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode())
        stat = open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()
    except OSError:
        break
    pid = int(stat[1])  # up to the test process (argv[2]), which started acx with the key
print("FOUND " + ",".join(found) if found else "CLEAN")
"""


def _spec(tmp: Path, base_url: str, key: str) -> Path:
    (tmp / "qa.jsonl").write_text('{"id": "q1", "question": "look", "answer": "CLEAN"}\n')
    (tmp / "agent.py").write_text(AGENT)
    (tmp / "key.txt").write_text(key)
    spec = tmp / "run.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            version: 1
            name: keys
            runtime: {{results_dir: {tmp / "results"}}}
            requests:
              - name: keys
                benchmark: {{id: exact_match, dataset: qa.jsonl}}
                harness: {{id: command, command: "{sys.executable} {tmp / "agent.py"} {tmp / "key.txt"} {os.getpid()}"}}
                model: {{id: m, base_url: "{base_url}", api_key: "${{ACX_TEST_MODEL_KEY}}"}}
                environment:
                  id: host_process
                  evaluation_environment_mode: none
            """
        )
    )
    return spec


def test_a_host_process_agent_finds_no_key_in_acx_environment(tmp_path: Path) -> None:  # contract M4
    key = "sk-live-" + secrets.token_hex(16)
    with FakeModelServer([text("unused")]) as srv:
        spec = _spec(tmp_path, srv.base_url, key)
        env = {**os.environ, "PYTHONPATH": SRC, "ACX_TEST_MODEL_KEY": key}
        proc = subprocess.run(
            [sys.executable, "-m", "acx", "run", str(spec), "--format", "json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert proc.returncode == 0, proc.stderr
    # The warning says what holds and what does not (the key is never printed).
    assert "host_process with a real model key (ACX_TEST_MODEL_KEY)" in proc.stderr, proc.stderr
    assert "has removed ACX_TEST_MODEL_KEY from its own process environment" in proc.stderr
    assert "--env docker and --env bwrap" in proc.stderr and key not in proc.stderr
    result = next((tmp_path / "results").rglob("result.json"))
    answer = json.loads(result.read_text())["final_answer"]
    assert answer.strip() == "CLEAN", answer


def test_hiding_keeps_os_environ_and_restores_children(tmp_path: Path) -> None:  # contract M4
    # In a process of its own: the key leaves /proc/self/environ and inherited environments for
    # the run, os.environ keeps it (the gateway reads it), and children get it back afterwards.
    script = textwrap.dedent(
        """
        import os, subprocess
        from acx.interpreter._host_keys import hide_from_proc_environ
        key = os.environ["K"]
        def child():
            return subprocess.run(["sh", "-c", 'printf %s "$K"'], capture_output=True, text=True).stdout
        assert hide_from_proc_environ(["K"]) == ["K"]
        assert key.encode() not in open("/proc/self/environ", "rb").read()
        assert os.environ["K"] == key and child() == ""
        os.putenv("K", key)
        assert child() == key and key.encode() not in open("/proc/self/environ", "rb").read()
        print("ok")
        """
    )
    key = "sk-live-" + secrets.token_hex(16)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": SRC, "K": key},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.strip() == "ok", proc.stderr


def test_no_warning_without_a_key_or_on_another_driver() -> None:  # contract M4
    from types import SimpleNamespace

    from acx.interpreter._host_keys import exposed_key_names

    def prog(env_id: str, api_key: str | None) -> SimpleNamespace:
        model = SimpleNamespace(api_key=api_key, roles={})
        return SimpleNamespace(
            name=env_id, request=SimpleNamespace(environment=SimpleNamespace(id=env_id), model=model)
        )

    environ = {"K": "sk-live-0123456789abcdef"}
    assert exposed_key_names([prog("host_process", "${K}")], environ) == {"host_process": ["K"]}
    assert exposed_key_names([prog("docker", "${K}"), prog("bwrap", "${K}")], environ) == {}
    assert exposed_key_names([prog("host_process", "${UNSET}"), prog("host_process", None)], environ) == {}
