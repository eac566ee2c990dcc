"""from_spark and event time: a pinned snapshot keeps one split per input file, in order.

Each input file spans the same hour of event time. Spark packs small files
into one partition (spark.sql.files.maxPartitionBytes / openCostInBytes); a
snapshot written from such partitions would run through the hour once per
packed file inside one split, and per-split watermarks would drop most rows as
late (DESIGN.md "Event time per split").
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
from eddyline.spark import SparkRunner, SparkTableSink, UnorderedInputWarning

FILES = 8
ROWS = 400  # per file
HOUR_MS = 3_600_000
BASE_MS = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS


def _write_input(directory: Any) -> pd.DataFrame:
    """8 files, each over the same hour (±3 s jitter); their rows as one frame."""
    rng = np.random.default_rng(32)
    directory.mkdir()
    frames = []
    for f in range(FILES):
        steps = np.arange(ROWS, dtype=np.int64) * (HOUR_MS // ROWS)
        ts = BASE_MS + steps + rng.integers(-3_000, 3_001, ROWS)
        frame = pd.DataFrame(
            {
                "id": np.arange(ROWS, dtype=np.int64) + f * ROWS,
                "k": rng.integers(0, 3, ROWS).astype(np.int64),
                "v": rng.integers(1, 1_000, ROWS).astype(np.int64),
                "ts": ts.astype(np.int64),
            }
        )
        pq.write_table(
            pa.Table.from_pandas(frame, preserve_index=False), directory / f"{f}.parquet"
        )
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _reference(rows: pd.DataFrame) -> list[tuple[int, int, int, int]]:
    """The 1-minute tumbling sum of v per k, computed as a batch."""
    start = rows["ts"] - rows["ts"] % 60_000
    sums = rows.assign(window_start=start).groupby(["k", "window_start"])["v"].sum()
    return sorted((int(k), int(s), int(s) + 60_000, int(v)) for (k, s), v in sums.items())


def _windowed(env: ed.StreamEnvironment, df: Any) -> ed.DataStream:
    stamped = env.from_spark(df).name("events").assign_timestamps("ts", max_out_of_orderness="10s")
    return stamped.key_by("k").window(ed.Tumbling("60s")).sum("v")


def _rows(table: pa.Table) -> list[tuple[int, int, int, int]]:
    return sorted(
        (r["k"], r["window_start"], r["window_end"], r["v"])
        for r in table.select(["k", "window_start", "window_end", "v"]).to_pylist()
    )


def test_filtered_dataframe_keeps_every_row_on_time(spark: Any, tmp_path: Any) -> None:
    rows = _write_input(tmp_path / "in")
    df = spark.read.parquet(str(tmp_path / "in")).filter("v % 5 <> 0")
    assert df.rdd.getNumPartitions() < FILES  # Spark packs the small files together
    expected = _reference(rows[rows["v"] % 5 != 0])

    env = ed.StreamEnvironment(2)
    handle = _windowed(env, df).collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnorderedInputWarning)
        env.execute("spark-event-time")
    assert _rows(handle.to_arrow()) == expected


def test_filtered_dataframe_on_time_under_spark_runner(spark: Any, tmp_path: Any) -> None:
    rows = _write_input(tmp_path / "in")
    df = spark.read.parquet(str(tmp_path / "in")).filter("v % 5 <> 0")
    expected = _reference(rows[rows["v"] % 5 != 0])

    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="200ms")
    )
    table = "spark_event_time_windows"
    _windowed(env, df).sink_to(SparkTableSink(spark, table, path=str(tmp_path / "out")))
    result = env.execute("spark-event-time-runner", runner=SparkRunner(spark, workers=2))
    assert result.restarts == 0
    spark.catalog.refreshTable(table)
    got = sorted((r.k, r.window_start, r.window_end, r.v) for r in spark.table(table).collect())
    assert got == expected


def test_shuffled_dataframe_with_event_time_warns_before_the_job_runs(
    spark: Any, tmp_path: Any
) -> None:
    rows = _write_input(tmp_path / "in")
    shuffled = spark.read.parquet(str(tmp_path / "in")).repartition(2, "k")

    env = ed.StreamEnvironment(2)
    handle = _windowed(env, shuffled).collect()
    with pytest.warns(UnorderedInputWarning) as caught:
        env.execute("spark-event-time-shuffled")
    [warning] = caught
    assert warning.filename == __file__  # points at the user's execute() call
    message = str(warning.message)
    assert message.startswith("from_spark source 'events': the DataFrame's partitions are not")
    assert "Exchange hashpartitioning(k" in message and "(it shuffles)" in message
    assert "df.sortWithinPartitions('ts')" in message
    assert handle.to_arrow().num_rows > 0

    # Sorted within its partitions, the same DataFrame is on time, without a warning.
    env = ed.StreamEnvironment(2)
    handle = _windowed(env, shuffled.sortWithinPartitions("ts")).collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnorderedInputWarning)
        env.execute("spark-event-time-sorted")
    assert _rows(handle.to_arrow()) == _reference(rows)

    # Without event time the order does not matter: no warning.
    env = ed.StreamEnvironment(2)
    env.from_spark(shuffled).key_by("k").sum("v").collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnorderedInputWarning)
        env.execute("spark-shuffled-no-event-time")


@pytest.mark.parametrize(
    ("shape", "found"),
    [
        pytest.param(lambda d, s: d.filter("v > 1").select("ts", "k"), None, id="narrow"),
        pytest.param(lambda d, s: d.union(d.filter("k = 1")), None, id="union"),
        pytest.param(lambda d, s: d.join(s.range(3).toDF("k"), "k"), None, id="broadcast-join"),
        pytest.param(lambda d, s: d.orderBy("ts"), None, id="order-by"),
        pytest.param(lambda d, s: d.repartition(3).sortWithinPartitions("ts"), None, id="sorted"),
        pytest.param(lambda d, s: d.coalesce(1), "Coalesce 1 (it concatenates", id="coalesce"),
        pytest.param(lambda d, s: d.groupBy("k", "ts").sum("v"), "HashAggregate(", id="group-by"),
        pytest.param(
            lambda d, s: d.join(s.range(3).toDF("k").hint("merge"), "k"),
            "SortMergeJoin [k",
            id="merge-join",
        ),
        pytest.param(lambda d, s: d.filter("v > 1").repartition(2), "Exchange ", id="repartition"),
    ],
)
def test_plans_that_lose_the_input_order_are_named(
    spark: Any, tmp_path: Any, shape: Any, found: str | None
) -> None:
    from eddyline.connectors.spark.source import _reordering

    _write_input(tmp_path / "in")
    df = shape(spark.read.parquet(str(tmp_path / "in")), spark)
    verdict = _reordering(df._jdf.queryExecution().executedPlan())
    if found is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.startswith(found), verdict
