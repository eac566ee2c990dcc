"""Spark Structured Streaming downstream of eddyline, and eddyline downstream of Spark."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import eddyline as ed
from eddyline.spark import SparkTableSink, from_spark_files


def _write(env: ed.StreamEnvironment, ids: range, sink: Any) -> None:
    env.from_collection([{"id": i, "tag": f"r{i}"} for i in ids]).sink_to(sink)
    env.execute("produce")


def _drain(spark: Any, source: str, out: str, chk: str) -> None:
    query = (
        spark.readStream.format("eddyline")
        .load(source)
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def test_read_stream_of_table_sink_output_sees_every_row_once(spark: Any, tmp_path: Any) -> None:
    location, out, chk = (str(tmp_path / n) for n in ("table", "copy", "copy-chk"))
    for part in (range(0, 300), range(300, 500)):
        env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(str(tmp_path / "c")))
        _write(env, part, SparkTableSink(spark, "stream_src", path=location))
        _drain(spark, location, out, chk)
        ids = sorted(r.id for r in spark.read.parquet(out).collect())
        assert ids == list(range(part.stop))
    _drain(spark, location, out, chk)  # nothing new: nothing read twice
    assert spark.read.parquet(out).count() == 500

    # eddyline tails the committed output of Spark's own streaming file sink.
    env = ed.StreamEnvironment()
    schema = pa.schema([("id", pa.int64()), ("tag", pa.string())])
    tail = env.from_source(from_spark_files(out, schema=schema, stop_after_batch=1)).collect()
    env.execute("tail")
    assert sorted(r["id"] for r in tail.to_pylist()) == list(range(500))


def test_read_stream_of_parquet_sink_output_sees_every_row_once(spark: Any, tmp_path: Any) -> None:
    source, out, chk = (str(tmp_path / n) for n in ("files", "copy", "copy-chk"))
    for part in (range(0, 250), range(250, 400)):
        _write(ed.StreamEnvironment(2), part, ed.ParquetSink(source))
        _drain(spark, source, out, chk)
    rows = spark.read.parquet(out).collect()
    assert sorted(r.id for r in rows) == list(range(400))
    assert {r.tag for r in rows} == {f"r{i}" for i in range(400)}
