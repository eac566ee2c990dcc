"""Failures while a checkpoint is taken: the two-phase-commit protocol stays exact.

The reference :class:`RecordingTwoPhaseSink` logs every phase durably; the
checker reads that commit history.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import InjectedFailure, SleepPerBatch, assert_exact_ids, completed_checkpoints
from support.sinks import RecordingTwoPhaseSink

N = 60_000


class FailingPreCommitSink(RecordingTwoPhaseSink):
    """Raises once in ``pre_commit``, on the first attempt, after a checkpoint completed."""

    def __init__(self, dir: Path, chk_dir: Path, marker_dir: Path) -> None:
        super().__init__(dir)
        self.chk_dir = str(chk_dir)
        self.marker = os.path.join(marker_dir, "pre_commit_failed")

    def pre_commit(self, txn: dict[str, Any]) -> None:
        if self.attempt == 0 and completed_checkpoints(self.chk_dir):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                note = {
                    "checkpoint": txn["checkpoint"],
                    "completed_before": completed_checkpoints(self.chk_dir),
                }
                with os.fdopen(fd, "w") as marker:
                    json.dump(note, marker)
                raise InjectedFailure(f"pre_commit failed for checkpoint {txn['checkpoint']}")
        super().pre_commit(txn)


def test_checkpoint_pre_commit_failure_recovers_exactly(
    tmp_path: Path, chk_dir: Path, marker_dir: Path
) -> None:
    sink_dir = tmp_path / "sink"
    sink = FailingPreCommitSink(sink_dir, chk_dir, marker_dir)
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk_dir, interval="50ms"),
        restart=ed.RestartStrategy.fixed_delay(3, "10ms"),
        batch_size=200,
    )
    slow = env.from_sequence(0, N).map_batches(SleepPerBatch(0.003)).name("slow")
    slow.sink_to(sink).name("txn_sink").uid("txn_sink")

    result = env.execute("pre_commit_failure")

    marker = Path(sink.marker)
    assert marker.exists(), "pre_commit never failed"
    note = json.loads(marker.read_text())
    failed = note["checkpoint"]
    assert note["completed_before"], "no checkpoint completed before the failure"
    assert result.restarts == 1
    completed = set(result.checkpoint_ids)
    assert failed not in completed, f"checkpoint {failed} failed but is reported completed"

    assert_exact_ids(
        RecordingTwoPhaseSink.committed(sink_dir)["value"].to_pylist(), range(N), "committed"
    )

    # commit history: only completed checkpoints commit, each transaction once
    log = RecordingTwoPhaseSink.read_log(sink_dir)
    commits = [e for e in log if e["phase"] in ("commit", "recommit")]
    assert commits, "nothing was committed"
    assert {e["checkpoint"] for e in commits} <= completed, (
        f"commits for checkpoints that never completed: "
        f"{sorted({e['checkpoint'] for e in commits} - completed)}"
    )
    first_commits = Counter(e["txn"] for e in log if e["phase"] == "commit")
    assert max(first_commits.values()) == 1
    pre_committed = [e["txn"] for e in log if e["phase"] == "pre_commit"]
    for entry in commits:
        position = log.index(entry)
        assert entry["txn"] in {e["txn"] for e in log[:position] if e["phase"] == "pre_commit"}
    # the transactions of the failed checkpoint were never committed
    assert not [e for e in commits if e["checkpoint"] == failed]
    # the final checkpoint committed everything: no pre-committed transaction with rows is
    # left uncommitted, except those of the failed attempt (aborted or replayed)
    committed_txns = {e["txn"] for e in commits}
    rows_of = {e["txn"]: e["rows"] for e in log if e["phase"] == "pre_commit"}
    left = [t for t in pre_committed if t not in committed_txns and rows_of[t]]
    assert all(re.match(r"s\d+-a0-", t) for t in left), f"uncommitted after restart: {left}"


def test_checkpoint_unwritable_dir_fails_before_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    chk = blocker / "checkpoints"
    out = tmp_path / "out"
    env = ed.StreamEnvironment(checkpoint=ed.CheckpointConfig(chk, interval="50ms"))
    env.from_sequence(0, 1000).sink_to(ed.ParquetSink(out))
    with pytest.raises(ed.CheckpointError, match=re.escape(str(chk))):
        env.execute("unwritable")
    assert read_parquet_dir(out).num_rows == 0


class FailingBarrier(ed.ProcessFunction):
    """Raises in ``on_barrier`` from checkpoint 2 on (checkpoint 0 is the start epoch)."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        return row

    def on_barrier(self, checkpoint_id: int, ctx: ed.ProcessContext) -> None:
        if checkpoint_id >= 2:
            raise InjectedFailure(f"on_barrier failed at checkpoint {checkpoint_id}")


def slow_job_without_restarts(chk_dir: Path) -> tuple[ed.StreamEnvironment, ed.DataStream]:
    """A p=2 job checkpointing every 50 ms with no restarts, and its slowed-down input."""
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk_dir, interval="50ms"),
        restart=ed.RestartStrategy.none(),
        batch_size=100,
    )
    return env, env.from_sequence(0, 20_000).map_batches(SleepPerBatch(0.002)).name("slow")


def test_checkpoint_on_barrier_failure_fails_the_checkpoint_and_the_job(
    tmp_path: Path, chk_dir: Path
) -> None:
    env, slow = slow_job_without_restarts(chk_dir)
    slow.key_by("value").process(FailingBarrier()).name("barrier_fn").collect()
    with pytest.raises(ed.JobFailedError, match="operator 'barrier_fn'") as info:
        env.execute("on_barrier_failure")
    err = info.value
    assert err.operator == "barrier_fn"
    assert isinstance(err.__cause__, InjectedFailure)
    assert "on_barrier failed at checkpoint 2" in (err.user_traceback or "")
    assert "in on_barrier" in (err.user_traceback or "")
    assert completed_checkpoints(chk_dir) == [1], "the failed checkpoint 2 completed"


class FailingPreCommit(RecordingTwoPhaseSink):
    def pre_commit(self, txn: dict[str, Any]) -> None:
        if txn["checkpoint"] == 2:
            raise InjectedFailure("pre_commit failed at checkpoint 2")
        super().pre_commit(txn)


def test_checkpoint_pre_commit_failure_fails_the_checkpoint_and_the_job(
    tmp_path: Path, chk_dir: Path
) -> None:
    env, slow = slow_job_without_restarts(chk_dir)
    slow.sink_to(FailingPreCommit(tmp_path / "sink")).name("txn_sink")
    with pytest.raises(ed.JobFailedError, match="operator 'txn_sink'") as info:
        env.execute("pre_commit_failure_no_restart")
    assert isinstance(info.value.__cause__, InjectedFailure)
    assert "in pre_commit" in (info.value.user_traceback or "")
    assert completed_checkpoints(chk_dir) == [1], "the failed checkpoint 2 completed"


class ConnectingSink(RecordingTwoPhaseSink):
    """Connects in ``open`` and refuses any commit before it (as a database sink would)."""

    def __init__(self, dir: Path) -> None:
        super().__init__(dir)
        self.connection: dict[str, int] | None = None

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        self.connection = {"attempt": self.attempt}

    def commit(self, txn: dict[str, Any]) -> None:
        if self.connection is None:
            raise RuntimeError("commit() called before open()")
        super().commit(txn)


class FailAfterCheckpoints:
    """A ``map_batches`` function that raises once, after ``count`` checkpoints completed."""

    def __init__(self, chk_dir: Path, marker_dir: Path, count: int) -> None:
        self.chk_dir = str(chk_dir)
        self.marker = os.path.join(marker_dir, "fired")
        self.count = count

    def __call__(self, batch: Any) -> Any:
        completed = completed_checkpoints(self.chk_dir)
        if len(completed) >= self.count and not os.path.exists(self.marker):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return batch
            with os.fdopen(fd, "w") as marker:
                json.dump({"completed_before": completed}, marker)
            raise InjectedFailure(f"failure after checkpoints {completed}")
        return batch


def test_checkpoint_restore_commits_after_the_sinks_open(
    tmp_path: Path, chk_dir: Path, marker_dir: Path
) -> None:
    n = 20_000
    sink_dir = tmp_path / "sink"
    fail = FailAfterCheckpoints(chk_dir, marker_dir, count=2)
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk_dir, interval="50ms"),
        restart=ed.RestartStrategy.fixed_delay(2, "10ms"),
        batch_size=200,
    )
    # ~1 s of input: checkpoints 1 and 2 complete well before it ends, even on a loaded machine
    slow = env.from_sequence(0, n).map_batches(SleepPerBatch(0.02)).name("slow")
    slow.map_batches(fail).name("fail").sink_to(ConnectingSink(sink_dir)).name("db").uid("db")

    result = env.execute("commit_after_open")

    note = json.loads(Path(fail.marker).read_text())
    assert len(note["completed_before"]) >= 2, "the failure came before two checkpoints"
    assert result.restarts == 1
    assert_exact_ids(
        RecordingTwoPhaseSink.committed(sink_dir)["value"].to_pylist(), range(n), "committed"
    )
    # the restored attempt re-committed the transactions of its checkpoint
    log = RecordingTwoPhaseSink.read_log(sink_dir)
    assert [e for e in log if e["phase"] == "recommit" and e["attempt"] == 1]
