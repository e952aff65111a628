"""Run the `react` example offline: a scripted model server plays the model.

    python examples/react/run.py [--results-dir DIR]

For `primes` the model writes and runs a Python program, reads its output and submits 168; for
`words` it runs `wc -l` with bash and submits. Each attempt's result.json has the trajectory
(the tool calls, their observations and timings), telemetry.react and telemetry.model_usage; the
run directory has report.html.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from acx.testing.fake_models import FakeModelServer, tool_call

HERE = Path(__file__).resolve().parent

PRIMES = "print(sum(all(n % d for d in range(2, int(n ** 0.5) + 1)) for n in range(2, 1000)))"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default=str(HERE / "results"))
    args = parser.parse_args()
    script = [
        tool_call("python", {"code": PRIMES}, call_id="p1", usage=(420, 40)),
        tool_call("submit", {"answer": "168"}, call_id="p2", usage=(480, 12)),
        tool_call("bash", {"command": "wc -l < /etc/hostname"}, call_id="w1", usage=(410, 20)),
        tool_call("submit", {"answer": "1"}, call_id="w2", usage=(450, 10)),
    ]
    with FakeModelServer(script, default=None) as srv:
        env = {**os.environ, "REACT_MODEL_BASE_URL": srv.base_url, "REACT_MODEL_API_KEY": "not-a-real-key"}
        cmd = [sys.executable, "-m", "acx", "run", str(HERE / "react.yaml"), "--results-dir", args.results_dir]
        return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
