"""An in-sandbox `command` agent on docker with the task at `no-network` reaches the run's model
gateway and nothing else; its calls are in its trajectory and usage; the real key is in no result
file, no log and not in `docker inspect` of the sandbox or its environment. Contracts M4, P6.

The "real" model server listens on the address containers reach the host at (the default bridge's
gateway) so that reaching it would be possible were the policy not enforced.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from acx.testing.fake_models import FakeModelServer, text
from conftest import BOOKWORM

KEY = "sk-docker-gateway-secret-7731"

AGENT = r"""
import json, os, socket, sys, urllib.request
from urllib.parse import urlsplit
leaks = []
real_host, real_port = os.environ["REAL_HOST"], int(os.environ["REAL_PORT"])
# 1. the real model server, through the egress proxy (the agent's HTTP client honours http_proxy)
try:
    urllib.request.urlopen(f"http://{real_host}:{real_port}/v1/models", timeout=10)
    leaks.append("proxy")
except Exception:
    pass
# 2. the real model server, directly (a raw socket ignores the proxy variables)
try:
    socket.create_connection((real_host, real_port), timeout=3).close()
    leaks.append("direct")
except OSError:
    pass
# 3. the gateway, as the agent was told
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
body = json.dumps({"model": "anything", "messages": [{"role": "user", "content": sys.stdin.read()}]}).encode()
req = urllib.request.Request(base + "/chat/completions", data=body,
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
answer = json.loads(urllib.request.urlopen(req, timeout=30).read())["choices"][0]["message"]["content"]
print("LEAK:" + ",".join(leaks) if leaks else answer)
"""


def _bridge_address() -> str:
    from acx.drivers._specs import DockerConfig
    from acx.drivers.docker import DockerDriver

    address = trio.run(DockerDriver(DockerConfig()).model_gateway_address)
    assert address, "the engine's default bridge has no IPv4 gateway"
    return address


def test_in_sandbox_agent_reaches_only_the_gateway(tmp_path: Path, run_label: str) -> None:  # contracts M4, P6
    from acx.drivers.docker import close_objects, docker_client

    host = _bridge_address()
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q0", "question": "say 0", "answer": "0"}) + "\n")
    with FakeModelServer([text("0", usage=(11, 1))], host=host) as srv:
        spec = tmp_path / "run.yaml"
        spec.write_text(
            f"""version: 1
name: g
runtime: {{results_dir: results, progress: none}}
requests:
  - name: g
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: {json.dumps(["python3", "-c", AGENT])}}}
    model: {{id: real-model, base_url: "{srv.base_url}", api_key: "${{MKEY}}"}}
    environment:
      id: docker
      setup: {{image: "{BOOKWORM}"}}
      run_network_policy: no-network
      run_env_variables: {{REAL_HOST: "{host}", REAL_PORT: "{srv.port}"}}
    execution: {{keep_environment: true}}
    output: {{run_id: "{run_label}"}}
"""
        )
        res = subprocess.run(
            [sys.executable, "-m", "acx", "run", str(spec)],
            cwd=tmp_path,
            env={**os.environ, "MKEY": KEY},
            capture_output=True,
            text=True,
            timeout=300,
        )
    client = docker_client()
    try:
        kept = client.containers.list(all=True, filters={"label": f"acx.run_id={run_label}"})
        inspected = [json.dumps(c.attrs) for c in kept]
        envs = [c.exec_run(["env"]).output.decode() for c in kept if c.status == "running"]
    finally:
        close_objects(predicate=lambda lab: lab.get("acx.run_id") == run_label)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "correct.avg@1 = 1.000" in res.stdout, res.stdout  # the answer came through the gateway, no LEAK
    # exactly one upstream call: the gateway's, with the real key and the run's model
    assert len(srv.requests) == 1 and srv.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert srv.requests[0].body["model"] == "real-model"
    (run_dir,) = (tmp_path / "results" / "g").iterdir()
    result = json.loads(next(run_dir.rglob("attempt-1/result.json")).read_text())
    assert result["trajectory"]["steps"][0]["assistant_content"]["content"] == "0"
    assert result["telemetry"]["model_usage"]["model_calls"] == 1
    assert result["telemetry"]["model_usage"]["prompt_tokens"] == 11
    assert kept and inspected and envs
    for blob in [*inspected, *envs, res.stdout, res.stderr]:
        assert KEY not in blob
    for p in (tmp_path / "results").rglob("*"):
        if p.is_file():
            assert KEY not in p.read_bytes().decode("utf-8", "replace"), p
