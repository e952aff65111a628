"""Run the CSV multiple-choice example offline: a fake OpenAI-compatible server plays the model.

    python examples/datasets/mc-csv/run.py [--results-dir DIR]

The fake server (acx.testing.fake_models) answers every call with the next scripted reply, so the
run needs no network and no key. The choices are shuffled per attempt, so the same scripted letter
is right for some attempts and wrong for others: summary.md shows the mean with its standard error
and 95 % interval, pass@1 and the median over attempts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from acx.testing.fake_models import FakeModelServer, text

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", default=str(HERE / "results"))
    args = parser.parse_args()
    replies = [text(f"Let me think.\nANSWER: {letter}") for letter in "BCCBBCABCDBC"]
    with FakeModelServer(replies) as server:
        env = {**os.environ, "FAKE_MODEL_BASE_URL": server.base_url, "FAKE_MODEL_API_KEY": "not-a-real-key"}
        cmd = [sys.executable, "-m", "acx", "run", str(HERE / "mc.yaml"), "--results-dir", args.results_dir]
        return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
