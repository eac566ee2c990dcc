"""Spark DataFrame -> keyed sum -> SparkTableSink, and the sink's commit protocol."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.connectors.spark.sink import STAGING
from eddyline.connectors.spark.source import PINS_DIR
from eddyline.spark import SparkTableSink
from support.faults import SleepPerBatch


def _final_sums(rows: list[dict[str, Any]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for row in rows:
        out[row["k"]] = max(out.get(row["k"], 0), row["amount"])
    return out


def test_keyed_sum_from_spark_to_table_equals_numpy_reference(
    spark: Any, tmp_path: Any, keyed_sum_input: Callable[[int], tuple[Any, dict[int, int]]]
) -> None:
    df, expected = keyed_sum_input(20_000)
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="200ms"), batch_size=1000
    )
    sums = env.from_spark(df).select("k", "amount").key_by("k").sum("amount")
    sums.sink_to(SparkTableSink(spark, "sums_ref", path=str(tmp_path / "sums")))
    env.execute("spark-sum")

    with open(tmp_path / "chk" / PINS_DIR / "from_spark_0" / "pin.json", encoding="utf-8") as fh:
        pinned = json.load(fh)
    assert pinned["snapshot"] is None, "a plain Parquet scan is pinned as its file list"
    assert pinned["files"] == sorted(f.removeprefix("file://") for f in df.inputFiles())

    rows = [r.asDict() for r in spark.table("sums_ref").collect()]
    assert _final_sums(rows) == expected
    # Running sums of positive amounts grow strictly: a duplicate commit would repeat a row.
    assert len({(r["k"], r["amount"]) for r in rows}) == len(rows)
    assert spark.read.parquet(str(tmp_path / "sums")).count() == len(rows)


def test_table_sink_staging_is_invisible_and_commit_is_idempotent(
    spark: Any, tmp_path: Any
) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    location = str(tmp_path / "t")
    sink = SparkTableSink(spark, "staging_probe", path=location)
    sink._bind("probe", schema)
    sink.open({"subtask_index": 0, "attempt": 0, "run_tag": "r1", "parallelism": 1})
    txn = sink.begin_transaction()
    sink.write(txn, pa.record_batch([pa.array([1, 2]), pa.array(["a", "b"])], schema=schema))
    sink.on_checkpoint(txn, 7)
    sink.pre_commit(txn)

    assert os.listdir(os.path.join(location, STAGING, txn.key))
    assert spark.read.schema("k long, v string").parquet(location).count() == 0
    assert spark.table("staging_probe").count() == 0

    sink.commit(txn)
    assert sorted(r.k for r in spark.read.parquet(location).collect()) == [1, 2]
    sink.commit(txn)  # a restore commits the restored checkpoint again
    assert spark.read.parquet(location).count() == 2
    assert spark.table("staging_probe").count() == 2


def test_table_sink_restore_removes_staging_of_aborted_checkpoints(
    spark: Any, tmp_path: Any
) -> None:
    schema = pa.schema([("k", pa.int64())])
    location = str(tmp_path / "t")
    batch = pa.record_batch([pa.array([5])], schema=schema)
    first = SparkTableSink(spark, "aborted_probe", path=location)
    first._bind("probe", schema)
    first.open({"subtask_index": 0, "attempt": 0, "run_tag": "r1"})
    done, aborted = first.begin_transaction(), first.begin_transaction()
    for txn, checkpoint in ((done, 1), (aborted, 2)):
        first.write(txn, batch)
        first.on_checkpoint(txn, checkpoint)
        first.pre_commit(txn)
    # The job dies here: checkpoint 1 completed (not yet committed), 2 never did.
    again = SparkTableSink(spark, "aborted_probe", path=location)
    again._bind("probe", schema)
    again.commit(done)  # restore() re-commits the restored checkpoint
    again.open({"subtask_index": 0, "attempt": 0, "run_tag": "r2"})
    assert os.listdir(os.path.join(location, STAGING)) == ["inprogress"] or not [
        n for n in os.listdir(os.path.join(location, STAGING)) if n.startswith("r1-")
    ]
    assert [r.k for r in spark.read.parquet(location).collect()] == [5]


def test_table_sink_rejects_incompatible_table(spark: Any, tmp_path: Any) -> None:
    spark.sql(f"CREATE TABLE wrong_cols (x STRING) USING parquet LOCATION '{tmp_path / 'w'}'")
    env = ed.StreamEnvironment()
    stream = env.from_collection([{"k": 1, "v": 2}]).name("rows")
    with pytest.raises(ed.SchemaError, match=r"operator 'sink_\d+'.*wrong_cols"):
        stream.sink_to(SparkTableSink(spark, "wrong_cols"))


def test_table_sink_rejects_unwritable_location(spark: Any, tmp_path: Any) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = ed.StreamEnvironment()
    stream = env.from_collection([{"k": 1}])
    with pytest.raises(ed.GraphError, match=r"operator 'sink_\d+': cannot write into the location"):
        stream.sink_to(SparkTableSink(spark, "blocked", path=str(blocker / "t")))
    assert not spark.catalog.tableExists("blocked")


def test_from_spark_without_checkpointing_reads_a_snapshot(spark: Any) -> None:
    df = spark.range(0, 1000, numPartitions=2).selectExpr("id", "id * 2 AS twice")
    env = ed.StreamEnvironment(2)
    out = env.from_spark(df).collect()
    env.execute()
    assert sorted((r["id"], r["twice"]) for r in out.to_pylist()) == [
        (i, 2 * i) for i in range(1000)
    ]


def test_from_spark_unreadable_dataframe_is_a_graph_error(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "gone")
    spark.range(10).write.parquet(path)
    df = spark.read.parquet(path)
    shutil.rmtree(path)
    env = ed.StreamEnvironment()
    with pytest.raises(
        ed.GraphError, match="operator 'from_spark': cannot read the Spark DataFrame"
    ):
        env.from_spark(df)


def test_concurrent_reader_never_sees_part_of_a_checkpoint(spark: Any, tmp_path: Any) -> None:
    location = str(tmp_path / "t")
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="100ms"), batch_size=100
    )
    numbers = env.from_sequence(0, 6000)
    slow = numbers.map_batches(SleepPerBatch(0.01))
    schema = pa.schema([("value", pa.int64())])
    slow.sink_to(SparkTableSink(spark, "polled", path=location, schema=schema))
    seen: list[dict[str, set[str]]] = []
    stop = threading.Event()
    reader = spark.newSession()  # its own cached listings: reads the table like an outsider

    def poll() -> None:
        while not stop.is_set():
            files = reader.read.schema("value long").parquet(location).inputFiles()
            by_checkpoint: dict[str, set[str]] = defaultdict(set)
            for f in files:
                name = os.path.basename(f)
                by_checkpoint[name.split("-s")[0]].add(name)
            seen.append(by_checkpoint)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        env.execute("polled")
    finally:
        stop.set()
        poller.join()
    final = seen[-1] if seen else {}
    complete: dict[str, set[str]] = defaultdict(set)
    for f in spark.read.parquet(location).inputFiles():
        name = os.path.basename(f)
        complete[name.split("-s")[0]].add(name)
    assert sorted(r.value for r in spark.read.parquet(location).collect()) == list(range(6000))
    assert len(complete) > 1, "the run committed only one checkpoint: nothing to observe"
    assert len(seen) > 3 and any(0 < len(s) < len(complete) for s in seen), (
        "the reader never observed the table mid-run"
    )
    for snapshot in seen:
        for key, names in snapshot.items():
            assert names == complete[key], f"the reader saw part of checkpoint {key}"
    assert final.keys() <= complete.keys()


def test_an_untested_object_store_path_is_a_storage_error_naming_it() -> None:
    """s3:// tables go through Spark's S3A filesystem (tests/storage/test_s3_spark.py);
    gs:// and az:// are refused up front, not written to a local dir "gs:"."""
    from eddyline.spark import SparkTableSink

    with pytest.raises(ed.StorageError, match=r"gs://bucket/table.*DeltaSink") as info:
        SparkTableSink(object(), "t", path="gs://bucket/table")
    assert info.value.uri == "gs://bucket/table"
    with pytest.raises(ed.StorageError, match="names no bucket"):
        SparkTableSink(object(), "t", path="s3:///table")


def test_a_publication_cut_before_its_log_batch_is_not_foreign_data(
    spark: Any, tmp_path: Any
) -> None:
    """A run killed between publishing a checkpoint's files and writing the log
    batch listing them leaves each file next to its staged twin: the restored
    run's sink accepts the location (and commits that checkpoint again); a part
    file without a staged twin is still someone else's data."""
    import pyarrow.parquet as pq

    key = "0123456789abr1700000000-a0-c00000000000000000001"
    name = f"part-{key}-s0000-000001.parquet"
    rows = pa.table({"k": [1], "v": [2]})
    cut = tmp_path / "cut"
    (cut / STAGING / key).mkdir(parents=True)
    pq.write_table(rows, cut / STAGING / key / name)
    os.link(cut / STAGING / key / name, cut / name)
    stray = tmp_path / "stray"
    stray.mkdir()
    pq.write_table(rows, stray / name)

    env = ed.StreamEnvironment()
    stream = env.from_collection([{"k": 1, "v": 2}]).name("rows")
    stream.sink_to(SparkTableSink(spark, "cut_publication", path=str(cut)))
    with pytest.raises(ed.GraphError, match=r"already holds data files .*not listed"):
        stream.sink_to(SparkTableSink(spark, "stray_files", path=str(stray)))
