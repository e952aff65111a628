"""Run the model-graded example offline: one fake server plays the agent, another the grader.

    python examples/datasets/model-graded/run.py [--results-dir DIR]

The agent answers q1 and q3 correctly and q2 wrongly; the grader says GRADE: C, GRADE: I and then
something without a grade, so q3 shows `judge_invalid_output` (unscored, not 0). Each attempt's
result.json keeps the judge transcript under extra.scores.correct.judge and the judge's token
usage under telemetry.judge_usage, apart from the agent's usage.
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
    agent = [text("Jane Austen wrote it."), text("It boils at 90 degrees."), text("Mars")]
    grader = [
        text("The submission names the expert's author.\nGRADE: C", usage=(180, 12)),
        text("90 is not 100.\nGRADE: I", usage=(175, 9)),
        text("Looks fine to me.", usage=(170, 5)),
    ]
    with FakeModelServer(agent) as agent_srv, FakeModelServer(grader) as grader_srv:
        env = {
            **os.environ,
            "FAKE_AGENT_BASE_URL": agent_srv.base_url,
            "FAKE_AGENT_API_KEY": "not-a-real-key",
            "FAKE_GRADER_BASE_URL": grader_srv.base_url,
            "FAKE_GRADER_API_KEY": "not-a-real-grader-key",
        }
        cmd = [sys.executable, "-m", "acx", "run", str(HERE / "graded.yaml"), "--results-dir", args.results_dir]
        return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
