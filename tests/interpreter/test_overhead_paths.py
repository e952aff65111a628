"""The cheap paths behind the overhead bench keep their guarantees (R: atomic results, resume, logs)."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from interp_helpers import FakeBench, PyHarness, program, run, run_dir, tasks

from acx.drivers.fake import FakeDriver
from acx.interpreter import _fs
from acx.interpreter._orchestrator import _RunLogHandler
from acx.interpreter._store import RunStore
from acx.ir import RunResult


def test_atomic_write_replaces_whole_file_with_mode_0644(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # contract R13
    target = tmp_path / "a" / "b" / "result.json"  # parents are created on demand
    _fs.atomic_write_bytes(target, b"old", fsync=False)
    old = os.umask(0o077)
    try:
        # acx reads the umask once per process (a run does not change it); re-read it here.
        monkeypatch.setattr(_fs, "_UMASK", _fs._umask())
        assert _fs._UMASK & 0o644
        _fs.atomic_write_bytes(target, b"new" * 10000)
        _fs.write_new_bytes(str(target.parent / "task.json"), b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((target.parent / "task.json").stat().st_mode) == 0o644
    (target.parent / "task.json").unlink()
    assert target.read_bytes() == b"new" * 10000
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # shareable whatever the umask
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]  # no temp file left
    _fs.atomic_write_bytes(target, b"private", mode=_fs.PRIVATE)  # attempt results (V1)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_atomic_write_skips_a_stale_temp_name_and_cleans_up_on_failure(tmp_path: Path) -> None:  # R13
    target = tmp_path / "x.json"
    n = next(_fs._tmp_counter) + 1
    stale = tmp_path / f".x.json.{os.getpid()}.{n}.tmp"  # a killed process with our pid left it
    stale.write_bytes(b"stale")
    _fs.atomic_write_bytes(target, b"fresh", fsync=False)
    assert target.read_bytes() == b"fresh" and stale.read_bytes() == b"stale"
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(OSError):
        _fs.atomic_write_bytes(tmp_path / "dir.json", b"x")  # rename onto a directory fails
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([stale.name, "dir.json", "x.json"])


def test_start_attempt_is_lazy_and_a_resumed_run_archives_leftovers(tmp_path: Path) -> None:  # contract R13
    store = RunStore.create(tmp_path, "ns", run_id="r1")
    store.start_attempt("t/1", 1, fsync=False)
    d = store.attempt_dir("t/1", 1)
    assert not d.exists()  # created by the first write into it, not up front
    d.mkdir(parents=True)
    (d / "partial.txt").write_text("interrupted")
    store.close()
    (store.run_dir / "run_info.json").write_text('{"schema_version": "acx.run_info.v1", "run_id": "r1"}')
    resumed = RunStore.open_existing(store.run_dir)
    resumed.start_attempt("t/1", 1, fsync=False)  # the same attempt again (resume): leftovers archived
    archived = list((d / "retries").glob("interrupted-*/partial.txt"))
    assert len(archived) == 1 and not (d / "partial.txt").exists()
    resumed.start_attempt("t/1", 2, fsync=False)
    resumed.write_attempt("t/1", 2, {"status": "normal"})
    assert (store.attempt_dir("t/1", 2) / "result.json").is_file()
    resumed.close()
    kinds = [(e["kind"], e["attempt"]) for e in resumed.records.read_journal()]
    assert kinds == [("attempt_started", 1), ("attempt_started", 1), ("attempt_started", 2), ("attempt_finished", 2)]


def test_queued_writes_run_in_order_and_a_failed_requirement_skips_the_commit(tmp_path: Path) -> None:  # R13
    store = RunStore.create(tmp_path, "ns", run_id="r1")
    store.io_threads = False
    ok = store.queue_attempt("t", 1, {"status": "normal"})
    bad = store.queue(_raise_oserror)
    seen: list[str] = []

    async def main() -> None:
        with pytest.raises(OSError, match="disk full"):
            await store.durably(seen.append, "committed", requires=(ok, bad))
        assert await store.durably(seen.append, "second", requires=(ok,)) is None

    trio.run(main)
    assert seen == ["second"] and ok.error is None
    assert (store.attempt_dir("t", 1) / "result.json").is_file()
    store.close()


def _raise_oserror() -> None:
    raise OSError("disk full")


def test_run_log_is_complete_after_close_and_warnings_are_flushed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    handler = _RunLogHandler(path)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("acx.test_overhead_paths")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        handler._flushed = time.monotonic() + 3600  # as if just flushed: info records stay buffered
        logger.info("first")
        assert path.read_text() == ""
        logger.warning("second")  # flushed immediately, with what came before
        assert path.read_text().splitlines() == ["INFO first", "WARNING second"]
        for i in range(3):
            logger.info("more %d", i)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert path.read_text().splitlines()[-1] == "INFO more 2"


def test_session_ids_are_unique_and_name_the_run(tmp_path: Path) -> None:  # contract E1
    driver = FakeDriver()
    result = run([program(FakeBench(), PyHarness(), tasks(6), driver=driver)], tmp_path)
    ids = [r.session_id for r in driver.opened]
    assert len(set(ids)) == 6
    run_id = run_dir(result).name
    key = RunStore.open_existing(run_dir(result)).run_key
    assert all(i.startswith(f"{run_id}-{key}-") and len(i) <= len(run_id) + 19 for i in ids)
    # records are gone after a clean run; the journal has one start per attempt
    assert not list((run_dir(result) / ".env-resources").glob("*.json"))
    journal = [json.loads(line) for line in (run_dir(result) / "journal.jsonl").read_text().splitlines()]
    starts: list[Any] = [e for e in journal if e["kind"] == "attempt_started"]
    assert len(starts) == 6


def test_a_failed_commit_round_fails_every_waiter_and_hangs_none(tmp_path: Path) -> None:  # contract R13
    commit = _fs.GroupCommit(tmp_path / "gone")  # syncfs cannot open the root: the round fails
    # In a worker thread (the default): b and c arrive while a's round runs, and wait for the next.
    outcomes: list[str] = []

    async def waiter(name: str) -> None:
        try:
            await commit.sync()
        except FileNotFoundError:
            outcomes.append(f"{name} failed")
        else:
            outcomes.append(f"{name} ok")

    async def main() -> None:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for name in "abc":
                    nursery.start_soon(waiter, name)
        (tmp_path / "gone").mkdir()
        await commit.sync()  # the next round works again

    trio.run(main)
    assert sorted(outcomes) == ["a failed", "b failed", "c failed"]
    assert commit.rounds >= 2


def test_a_syncfs_error_is_raised_not_hidden_behind_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes
    import errno

    def failing_syncfs(fd: int) -> int:
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(_fs, "_SYNCFS", failing_syncfs)
    commit = _fs.GroupCommit(tmp_path)
    commit.threads = False
    with pytest.raises(OSError, match="syncfs") as info:
        trio.run(commit.sync)
    assert info.value.errno == errno.EIO


def test_progress_and_journal_are_written_while_a_long_attempt_runs(tmp_path: Path) -> None:
    # results.md: batched lines reach progress.jsonl and journal.jsonl within 0.5 s even when no
    # later event comes to carry them (here: one agent that runs for a minute).
    seen: dict[str, str] = {}

    async def execute(prepared: Any, session: Any, plan: Any) -> RunResult:
        await trio.sleep(2)
        run_dir_ = next((tmp_path / "results").glob("req/*"))
        seen["progress"] = (run_dir_ / "progress.jsonl").read_text()
        seen["journal"] = (run_dir_ / "journal.jsonl").read_text()
        seen["snapshot"] = (run_dir_ / "progress.json").read_text()
        await trio.sleep(60)
        return RunResult(task_id=prepared.task_id, final_answer="Q0")

    result = run([program(FakeBench(), PyHarness(execute), tasks(1))], tmp_path)
    assert result.status == "completed"
    assert '"attempt_started"' in seen["progress"] and '"phase_changed"' in seen["progress"]
    assert '"attempt_started"' in seen["journal"]
    assert json.loads(seen["snapshot"])["attempts_started"] == 1
