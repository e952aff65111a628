"""Run under an interpreter with the harbor package: write a small Harbor job directory the way
`harbor run` does — every file serialised by Harbor's own models (`model_dump_json(indent=4)`):
two tasks, two trials each (rewards 1, 0, 0.5 and an errored trial), token counts and an ATIF
trajectory with a tool call. Prints the trials it wrote as JSON. Usage: harbor_make_job.py DIR."""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harbor.models.agent.context import AgentContext
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.task.id import LocalTaskId
from harbor.models.trajectories import (
    Agent,
    Metrics,
    Observation,
    ObservationResult,
    Step,
    ToolCall,
    Trajectory,
)
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import AgentInfo, ExceptionInfo, ModelInfo, TrialResult
from harbor.models.verifier.result import VerifierResult

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TRIALS = [  # task, trial suffix, reward (None: the trial raised), input tokens
    ("hello-world", "aaaaaaa", 1.0, 120),
    ("hello-world", "bbbbbbb", 0.0, 90),
    ("fix-bug", "ccccccc", 0.5, 300),
    ("fix-bug", "ddddddd", None, 10),
]


def trajectory(task: str) -> Trajectory:
    return Trajectory(
        schema_version="ATIF-v1.6",
        session_id=f"s-{task}",
        agent=Agent(name="terminus-2", version="2.0", model_name="openai/gpt-test"),
        steps=[
            Step(step_id=1, source="system", message="You are a coding agent."),
            Step(step_id=2, source="user", message=f"Solve {task}."),
            Step(
                step_id=3,
                source="agent",
                message="Running the tests.",
                model_name="openai/gpt-test",
                tool_calls=[ToolCall(tool_call_id="t1", function_name="bash", arguments={"cmd": "pytest -q"})],
                observation=Observation(results=[ObservationResult(source_call_id="t1", content="1 passed")]),
                metrics=Metrics(prompt_tokens=100, completion_tokens=7, cached_tokens=3),
            ),
            Step(step_id=4, source="agent", message="Done.", model_name="openai/gpt-test"),
        ],
    )


def main(root: Path) -> None:
    job_name = "harbor-job"
    job_dir = root / job_name
    job_dir.mkdir(parents=True)
    agent = AgentConfig(name="terminus-2", model_name="openai/gpt-test")
    config = JobConfig(job_name=job_name, jobs_dir=root, n_attempts=2, agents=[agent])
    (job_dir / "config.json").write_text(config.model_dump_json(indent=4))
    job_id = uuid.uuid4()
    results = []
    for i, (task, suffix, reward, tokens) in enumerate(TRIALS):
        name = f"{task}__{suffix}"
        trial_dir = job_dir / name
        (trial_dir / "agent").mkdir(parents=True)
        trial_config = TrialConfig(task=TaskConfig(path=Path(task)), trial_name=name, trials_dir=job_dir, agent=agent)
        (trial_dir / "config.json").write_text(trial_config.model_dump_json(indent=4))
        started = T0 + timedelta(minutes=i)
        result = TrialResult(
            task_name=task,
            trial_name=name,
            trial_uri=trial_dir.as_uri(),
            task_id=LocalTaskId(path=Path(task)),
            task_checksum="0" * 64,
            config=trial_config,
            agent_info=AgentInfo(name="terminus-2", version="2.0", model_info=ModelInfo(name="gpt-test")),
            agent_result=AgentContext(n_input_tokens=tokens, n_cache_tokens=3, n_output_tokens=7, cost_usd=0.01),
            verifier_result=VerifierResult(rewards={"reward": reward}) if reward is not None else None,
            exception_info=ExceptionInfo(
                exception_type="AgentTimeoutError",
                exception_message="agent timed out after 600 s",
                exception_traceback="Traceback ...",
                occurred_at=started + timedelta(seconds=30),
            )
            if reward is None
            else None,
            started_at=started,
            finished_at=started + timedelta(seconds=30),
        )
        (trial_dir / "result.json").write_text(result.model_dump_json(indent=4))
        (trial_dir / "agent" / "trajectory.json").write_text(trajectory(task).model_dump_json(indent=4))
        results.append(result)
    job = JobResult(
        id=job_id,
        started_at=T0,
        finished_at=T0 + timedelta(minutes=10),
        n_total_trials=len(results),
        stats=JobStats.from_trial_results(results),
    )
    (job_dir / "result.json").write_text(job.model_dump_json(indent=4))
    print(json.dumps({"job_dir": str(job_dir), "trials": [[t, s, r, n] for t, s, r, n in TRIALS]}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
