"""``ed.DeltaSink(compact_every=, target_file_size=)`` (docs/DESIGN.md "Compacting a
Delta table"): many small checkpoints leave a bounded number of files, the rows stay
exactly the input (append, upsert, two jobs on one table; SIGKILL + restore with
compaction on is in test_delta_sink.py), and a failed compaction fails the job with
its cause."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import eddyline as ed
from support.faults import SleepPerBatch, assert_exact_ids

deltalake = pytest.importorskip(
    "deltalake", reason="the compaction tests read tables back with deltalake (test extra)"
)


def _table(uri: Path) -> deltalake.DeltaTable:
    return deltalake.DeltaTable(str(uri))


def _operations(uri: Path) -> list[str]:
    return [h["operation"] for h in _table(uri).history()]


def _slow_job(table: Path, chk: Path, n: int, sink: ed.DeltaSink) -> ed.StreamEnvironment:
    # ~5 ms a batch of 200 rows: a checkpoint every 20 ms holds a few batches,
    # the small commits of a streaming job.
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="20ms"), batch_size=200
    )
    numbers = env.from_sequence(0, n).name("numbers")
    numbers.map_batches(SleepPerBatch(0.004)).name("slow").sink_to(sink).name("delta")
    return env


@pytest.mark.parametrize("compact_every", [None, 3])
def test_delta_compaction_keeps_the_file_count_bounded(
    tmp_path: Path, compact_every: int | None
) -> None:
    table, n = tmp_path / "t", 60_000
    sink = ed.DeltaSink(table, compact_every=compact_every)
    result = _slow_job(table, tmp_path / "chk", n, sink).execute("delta-compact")
    assert_exact_ids(_table(table).to_pyarrow_table()["value"].to_pylist(), range(n), "DeltaSink")
    operations = _operations(table)
    writes, files = operations.count("WRITE"), len(_table(table).file_uris())
    assert writes >= 20, (writes, result)  # enough small commits to need compacting
    if compact_every is None:
        assert files == writes and "OPTIMIZE" not in operations  # one file a commit
        return
    # Compactions start after every 3rd commit; one still running when the 3rd
    # comes is started by the next commit instead, and the last one finishes
    # before the job ends: at most 2 * 3 - 1 uncompacted files and one or two
    # compacted ones.
    assert operations.count("OPTIMIZE") >= writes // (2 * compact_every), operations
    assert files <= 2 * compact_every + 1, (files, writes)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_delta_upsert_with_compaction_keeps_current_values(
    tmp_path: Path, parallelism: int
) -> None:
    # Merges rewrite the files compaction reads: one of two conflicting commits
    # fails in Delta and is retried (a merge) or tried again (a compaction).
    # Keys of 50 consecutive values: each commit updates a few keys and adds
    # new ones, so the table grows small files to compact.
    table, n, width = tmp_path / "t", 30_000, 50
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="20ms"),
        batch_size=200,
    )
    numbers = env.from_sequence(0, n).map_batches(SleepPerBatch(0.006 * parallelism))
    sums = numbers.with_columns(k=ed.col("value") // width).key_by("k").sum("value")
    sums.sink_to(ed.DeltaSink(table, mode="upsert", key="k", compact_every=2)).name("current")
    result = env.execute("delta-upsert-compact")
    assert result.restarts == 0, result
    got = _table(table).to_pyarrow_table().to_pydict()
    expected = {k: sum(range(k * width, (k + 1) * width)) for k in range(n // width)}
    assert dict(zip(got["k"], got["value"], strict=True)) == expected
    assert len(got["k"]) == n // width, "one row per key"
    operations = _operations(table)
    # Non-vacuity only: how many checkpoints a loaded machine takes varies.
    assert operations.count("MERGE") >= 4 and "OPTIMIZE" in operations, operations
    assert len(_table(table).file_uris()) <= 2 * 2 + 1, operations


def _writer(table: Path, chk: Path, first: int, n: int) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="20ms"),
        batch_size=300,
        restart=ed.RestartStrategy.fixed_delay(5, "10ms"),
    )
    numbers = env.from_sequence(first, first + n).name("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.002)).name("slow")
    slow.sink_to(ed.DeltaSink(table, compact_every=2)).name("delta")
    return env


def test_delta_two_jobs_compacting_one_table_keep_every_row(tmp_path: Path) -> None:
    # Each job compacts after every 2nd commit while the other appends and
    # compacts: an append that lands during a compaction is kept, and of two
    # compactions of the same files one fails in Delta and is left.
    table, n = tmp_path / "t", 30_000
    clients = [
        _writer(table, tmp_path / f"chk-{w}", w * n, n).execute_async(f"writer-{w}")
        for w in range(2)
    ]
    results = [c.wait() for c in clients]
    assert_exact_ids(
        _table(table).to_pyarrow_table()["value"].to_pylist(), range(2 * n), "DeltaSink"
    )
    assert all(r.checkpoints and r.restarts == 0 for r in results), results
    operations = _operations(table)
    assert operations.count("OPTIMIZE") >= 2, operations
    assert len(_table(table).file_uris()) < operations.count("WRITE") // 2


def test_delta_target_file_size_splits_writes_and_sizes_compaction(tmp_path: Path) -> None:
    table, target = tmp_path / "t", 64 * 1024
    sink = ed.DeltaSink(table, compact_every=10, target_file_size=target)
    sink.open({"name": "delta", "subtask_index": 0})
    big = pa.record_batch({"value": pa.array(range(200_000), pa.int64())})
    sink._stage("app", "run", 0, 1, [big])
    sink._commit("app", 1, {"run": 1})
    files = pa.table(_table(table).get_add_actions())["size_bytes"].to_pylist()
    assert len(files) > 10 and max(files) < 3 * target, files  # one commit, many files
    for checkpoint in range(2, 11):  # nine small commits, the 10th compacts
        small = pa.record_batch(
            {"value": pa.array(range(checkpoint * 10**6, checkpoint * 10**6 + 3_000), pa.int64())}
        )
        sink._stage("app", "run", 0, checkpoint, [small])
        sink._commit("app", checkpoint, {"run": checkpoint})
    sink.close()
    assert _operations(table).count("OPTIMIZE") == 1
    sizes = pa.table(_table(table).get_add_actions())["size_bytes"].to_pylist()
    assert max(sizes) < 3 * target, sizes  # packed up to the target, not into one file
    assert _table(table).to_pyarrow_table().num_rows == 200_000 + 9 * 3_000


def test_delta_failed_compaction_fails_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: object, **kwargs: object) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(deltalake.table.TableOptimizer, "compact", broken)
    sink = ed.DeltaSink(tmp_path / "t", compact_every=1)
    sink.open({"name": "delta", "subtask_index": 0})
    batch = pa.record_batch({"value": pa.array([1, 2, 3], pa.int64())})
    sink._stage("app", "run", 0, 1, [batch])
    sink._commit("app", 1, {"run": 1})  # starts the compaction, which fails
    with pytest.raises(ed.EddylineError, match="DeltaSink 'delta': compacting") as raised:
        sink.close()
    assert isinstance(raised.value.__cause__, OSError)
    assert _table(tmp_path / "t").to_pyarrow_table()["value"].to_pylist() == [1, 2, 3]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("compact_every", 0),
        ("compact_every", True),
        ("compact_every", "5"),
        ("target_file_size", -1),
    ],
)
def test_delta_compaction_options_must_be_positive_integers(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"{option}= must be a positive integer"):
        ed.DeltaSink("t", **{option: value})  # type: ignore[arg-type]
