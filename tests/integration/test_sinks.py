"""Parquet and two-phase-commit sinks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import eddyline as ed
from eddyline.testing import assert_same_rows

MakeEnv = Callable[..., ed.StreamEnvironment]

ROWS = [{"id": i, "name": f"n{i}"} for i in range(80)]


def test_parquet_sink_round_trip(make_env: MakeEnv, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    env = make_env()
    env.from_collection(ROWS).sink_to(ed.ParquetSink(out_dir)).name("files")
    result = env.execute()
    table = ds.dataset(out_dir, format="parquet").to_table()
    assert_same_rows(table, ROWS)
    assert "files" in result.metrics["operators"]


def test_parquet_sink_sweeps_what_killed_runs_of_its_job_left(
    make_env: MakeEnv, tmp_path: Path
) -> None:
    """A run killed between a pre-commit and its checkpoint's completion leaves a
    ``.pending-`` file that no checkpoint names; the next run of the same job (same
    checkpoint dir) removes it once its first checkpoint completed, and leaves the
    files of another job writing into the same directory alone."""
    out, chk = tmp_path / "out", tmp_path / "chk"

    def run(rows: list[dict[str, Any]]) -> None:
        env = make_env(checkpoint=ed.CheckpointConfig(chk, interval="50ms"))
        env.from_collection(rows).sink_to(ed.ParquetSink(out)).name("files")
        env.execute()

    run(ROWS[:40])
    parts = sorted(p.name for p in out.glob("part-*.parquet"))
    assert parts
    tag = parts[0].removeprefix("part-").split("-")[0]
    job, _, _ = tag.partition("r")
    assert job, f"the run tag {tag!r} names no job"
    # What a killed run of this job (another time tag) and another job leave.
    orphan = out / f".pending-{job}r1-0000-a0-000000.parquet"
    half_written = out / f".inprogress-{job}r1-0001-a0-000003.parquet"
    other_job = out / ".pending-0123abcdr1-0000-a0-000000.parquet"
    for leftover in (orphan, half_written, other_job):
        leftover.write_bytes((out / parts[0]).read_bytes())
    run(ROWS[40:])
    assert not orphan.exists() and not half_written.exists()
    assert other_job.exists(), "a file of another job was removed"
    table = ds.dataset(out, format="parquet").to_table()
    assert_same_rows(table, ROWS)


def test_parquet_sink_then_from_parquet(make_env: MakeEnv, tmp_path: Path) -> None:
    env = make_env()
    env.from_collection(ROWS).sink_to(ed.ParquetSink(tmp_path))
    env.execute()
    env2 = make_env()
    back = env2.from_parquet(tmp_path).collect()
    env2.execute()
    assert_same_rows(back, ROWS)


class RecordingSink(ed.TwoPhaseCommitSink):
    """Commits into a shared log (a reference two-phase-commit sink)."""

    log: ClassVar[list[tuple[str, int]]] = []
    rows: ClassVar[list[dict[str, Any]]] = []
    lock = threading.Lock()

    def open(self, ctx: dict[str, Any]) -> None:
        self.subtask = ctx["subtask_index"]

    def begin_transaction(self) -> list[pa.RecordBatch]:
        return []

    def write(self, txn: list[pa.RecordBatch], batch: pa.RecordBatch) -> None:
        txn.append(batch)

    def pre_commit(self, txn: list[pa.RecordBatch]) -> None:
        with self.lock:
            RecordingSink.log.append(("pre_commit", self.subtask))

    def commit(self, txn: list[pa.RecordBatch]) -> None:
        with self.lock:
            RecordingSink.log.append(("commit", self.subtask))
            for batch in txn:
                RecordingSink.rows.extend(batch.to_pylist())
            txn.clear()

    def abort(self, txn: list[pa.RecordBatch]) -> None:
        txn.clear()


def test_two_phase_commit_sink_commits_everything_at_the_end(make_env: MakeEnv) -> None:
    RecordingSink.log = []
    RecordingSink.rows = []
    env = make_env()
    env.from_collection(ROWS).sink_to(RecordingSink()).name("txn_sink")
    env.execute()
    assert_same_rows(RecordingSink.rows, ROWS)
    for subtask in range(env.parallelism):
        phases = [phase for phase, s in RecordingSink.log if s == subtask]
        # One transaction per subtask, pre-committed and committed exactly once
        # by the end-of-job commit (finish() itself commits nothing).
        assert phases == ["pre_commit", "commit"]


class LockedSink(RecordingSink):
    """Holds a lock per instance: it cannot be copied for each parallel instance."""

    def __init__(self) -> None:
        self.own_lock = threading.Lock()


def test_a_sink_that_cannot_be_copied_is_a_graph_error_before_anything_runs() -> None:
    env = ed.StreamEnvironment(2)
    env.from_sequence(0, 10).sink_to(LockedSink()).name("locked_sink")
    with pytest.raises(ed.GraphError, match=r"operator 'locked_sink'.*cannot be copied") as info:
        env.execute()
    assert info.value.operator == "locked_sink"
    assert isinstance(info.value.__cause__, TypeError)


def test_discard_sink_drops_rows_and_counts_them(tmp_path: Path) -> None:
    """A DiscardSink beside a collect, in recompute mode (it holds no state): it counts
    every row that reached it and emits none."""
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), recovery="recompute")
    )
    rows = env.from_sequence(0, 5_000)
    rows.sink_to(ed.DiscardSink()).name("dropped")
    kept = rows.filter(ed.col("value") % 5 == 0).collect()
    result = env.execute("discard")
    assert sorted(r["value"] for r in kept.to_pylist()) == list(range(0, 5_000, 5))
    assert result.metrics["operators"]["dropped"]["records_in"] == 5_000
    assert result.metrics["operators"]["dropped"]["records_out"] == 0
    with pytest.raises(TypeError, match="DiscardSink"):
        rows.sink_to("nowhere")  # type: ignore[arg-type]
