"""Read-only access to acx run directories (the layout in ``docs/results.md``).

This is the public read API of the results store: reports, viewers and scripts use it instead of
the interpreter's writer. It never writes, never takes the run's lock (it only probes whether a
live process holds it) and tolerates a run that is still being written (a torn last line of
``progress.jsonl``, a task still under ``details/running/``)::

    run = RunReader.open("results/quickstart/20261201_153014")
    run.info["status"], run.metrics, run.progress
    for task in run.tasks():            # final states first, then unfinished tasks
        task.task_id, task.state, task.category, task.task_json
        for attempt in task.attempts:   # attempt-N/result.json, in order
            attempt.n, attempt.result, attempt.retries   # discarded tries (retry records)
    run.phase_timings()                  # (task_id, attempt) → [(phase, seconds), ...]
    run.started_tasks()                  # task id → category of every task_started event
    find_runs("results")                 # every run directory under a results root

It also converts runs to and from other tools' formats (``acx results export`` / ``import``)::

    export_run("results/q/20261201_153014", "inspect", "logs")   # or "harbor", "atif"
    import_run("logs/2026-12-01T15-30-14+00-00_q_ab12.eval", "imported/q-inspect")
"""

from acx.results._export import EXPORT_FORMATS, ExportWritten, export_run
from acx.results._import import ImportWritten, import_run, load_id_map
from acx.results._reader import (
    FINAL_STATES,
    RUN_INFO_SCHEMA,
    AttemptRecord,
    PhaseTiming,
    RunReader,
    TaskRecord,
    find_runs,
)

__all__ = [
    "EXPORT_FORMATS",
    "FINAL_STATES",
    "RUN_INFO_SCHEMA",
    "AttemptRecord",
    "ExportWritten",
    "ImportWritten",
    "PhaseTiming",
    "RunReader",
    "TaskRecord",
    "export_run",
    "find_runs",
    "import_run",
    "load_id_map",
]
