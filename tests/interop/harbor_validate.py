"""Run under an interpreter with the harbor package: validate every file of an acx export with
Harbor's own pydantic models and print what they read, as JSON (the tests compare it with the
acx run). Usage: harbor_validate.py DIR."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trajectories import Trajectory
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult


def trajectory(path: Path) -> dict[str, object]:
    t = Trajectory.model_validate_json(path.read_text())
    return {
        "path": str(path),
        "session_id": t.session_id,
        "agent": t.agent.name,
        "steps": [
            {
                "source": s.source,
                "message": s.message,
                "reasoning": s.reasoning_content,
                "tool_calls": [(c.tool_call_id, c.function_name, c.arguments) for c in s.tool_calls or []],
                "observations": [
                    (r.source_call_id, r.content) for r in (s.observation.results if s.observation else [])
                ],
                "prompt_tokens": s.metrics.prompt_tokens if s.metrics else None,
                "cached_tokens": s.metrics.cached_tokens if s.metrics else None,
            }
            for s in t.steps
        ],
        "total_prompt_tokens": t.final_metrics.total_prompt_tokens if t.final_metrics else None,
    }


def main(root: Path) -> None:
    out: dict[str, list[object]] = {"jobs": [], "trials": [], "trajectories": []}
    for path in sorted(root.rglob("*.json")):
        if path.name.endswith(".manifest.json"):
            continue
        if path.name.endswith("trajectory.json"):
            out["trajectories"].append(trajectory(path))
        elif path.name == "result.json" and (path.parent / "trial.log").is_file():
            r = TrialResult.model_validate_json(path.read_text())
            TrialConfig.model_validate_json((path.parent / "config.json").read_text())
            reward_txt = path.parent / "verifier" / "reward.txt"
            out["trials"].append(
                {
                    "dir": path.parent.name,
                    "task_name": r.task_name,
                    "rewards": r.verifier_result.rewards if r.verifier_result else None,
                    "reward_txt": reward_txt.read_text().strip() if reward_txt.is_file() else None,
                    "exception": r.exception_info.exception_type if r.exception_info else None,
                    "n_input_tokens": r.agent_result.n_input_tokens if r.agent_result else None,
                    "started": r.started_at is not None,
                }
            )
        elif path.name == "result.json":
            job = JobResult.model_validate_json(path.read_text())
            config = JobConfig.model_validate_json((path.parent / "config.json").read_text())
            out["jobs"].append(
                {
                    "n_total_trials": job.n_total_trials,
                    "n_errored": job.stats.n_errored_trials,
                    "n_attempts": config.n_attempts,
                }
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
