"""Spark's spelling of windowed aggregation, ``stream.group_by(F.window("ts",
...), "user").agg(...)`` and ``F.session_window``, and ``F.first/F.last(col,
ignorenulls=True)``, against PySpark (``local[2]``) running
``df.groupBy(...).agg(...)`` as a batch on the same rows: the same columns,
in the same order, with the same values. Timestamps are compared as
microseconds since the epoch (both sides' ``window`` struct holds the
event-time column's timestamps)."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as EF
from functions.conftest import NON_ANSI_UTC, row_multiset, spark_settings

UTC = dt.UTC
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("user", pa.string()),
        ("x", pa.int64()),
        ("y", pa.float64()),
    ]
)
# 2024-02-29 (a leap day) 23:50 UTC: windows cross midnight into March.
T0 = dt.datetime(2024, 2, 29, 23, 50, tzinfo=UTC)


def _rows(n: int = 600, seed: int = 3) -> list[dict[str, Any]]:
    """Rows out of order by up to 10 minutes, with gaps that end sessions."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        offset_ms = i * 2_000 + rng.randint(-600_000, 0) + (900_000 if i % 97 == 0 else 0)
        rows.append(
            {
                "ts": T0 + dt.timedelta(milliseconds=max(0, offset_ms) + rng.randint(0, 999)),
                "user": rng.choice(["a", "b", "ü", None]),
                "x": None if i % 7 == 0 else rng.randint(-(10**6), 10**6),
                "y": None if i % 5 == 0 else rng.random(),
            }
        )
    return rows


AGGS: list[Callable[[Any], Any]] = [
    lambda F: F.count("*"),
    lambda F: F.sum("x"),
    lambda F: F.max("x"),
    lambda F: F.min("y"),
    lambda F: F.count_distinct("user"),
]


def _eddyline(
    rows: list[dict[str, Any]], grouping: Callable[[Any], list[Any]], parallelism: int = 2
) -> tuple[list[str], list[dict[str, Any]]]:
    env = ed.StreamEnvironment(parallelism, batch_size=50)
    stream = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA)).with_watermark("ts", "20 minutes")
    out = stream.group_by(*grouping(EF)).agg(*(f(EF) for f in AGGS)).collect()
    result = env.execute()
    late = sum(int(op.get("late_records", 0)) for op in result.metrics["operators"].values())
    assert late == 0, "no row is late with a 20-minute delay"
    table = out.to_arrow()
    return table.schema.names, table.to_pylist()


def _spark(spark: Any, rows: list[dict[str, Any]], grouping: Callable[[Any], list[Any]]) -> Any:
    from pyspark.sql import functions as SF
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType(
        [
            StructField("ts", TimestampType()),
            StructField("user", StringType()),
            StructField("x", LongType()),
            StructField("y", DoubleType()),
        ]
    )
    df = spark.createDataFrame([tuple(r.values()) for r in rows], schema)
    return df.groupBy(*grouping(SF)).agg(*(f(SF) for f in AGGS))


@pytest.mark.parametrize(
    "grouping",
    [
        pytest.param(lambda F: [F.window("ts", "1 minute"), "user"], id="tumbling"),
        pytest.param(lambda F: [F.window("ts", "2 minutes", "30 seconds"), "user"], id="sliding"),
        pytest.param(lambda F: ["user", F.session_window("ts", "1 minute")], id="session"),
        pytest.param(lambda F: [F.window(F.col("ts"), "5 minutes")], id="window-only"),
    ],
)
def test_group_by_window_equals_spark(spark: Any, grouping: Callable[[Any], list[Any]]) -> None:
    rows = _rows()
    names, ours = _eddyline(rows, grouping)
    with spark_settings(spark, NON_ANSI_UTC):
        theirs_df = _spark(spark, rows, grouping)
        assert names == theirs_df.columns
        theirs = [r.asDict(recursive=True) for r in theirs_df.collect()]
    assert len(ours) > 3
    assert row_multiset(ours) == row_multiset(theirs)


def test_window_struct_holds_the_event_time_type() -> None:
    env = ed.StreamEnvironment(1)
    rows = [{"ts": T0, "user": "a", "x": 1, "y": 1.0}]
    stream = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA)).with_watermark("ts", "1s")
    out = stream.group_by(EF.window("ts", "10 minutes"), "user").count().collect()
    env.execute()
    assert out.to_arrow().schema.field("window").type == pa.struct(
        [
            pa.field("start", pa.timestamp("us", tz="UTC")),
            pa.field("end", pa.timestamp("us", tz="UTC")),
        ]
    )
    start = dt.datetime(2024, 2, 29, 23, 50, tzinfo=UTC)
    assert out.to_pylist() == [
        {"window": {"start": start, "end": start + dt.timedelta(minutes=10)}, "user": "a",
         "count": 1},
    ]  # fmt: skip


def test_group_by_event_time_errors_name_the_operator() -> None:
    env = ed.StreamEnvironment(1)
    table = pa.Table.from_pylist([], SCHEMA.append(pa.field("other", pa.int64())))
    source = env.from_arrow(table).name("events")
    with pytest.raises(ed.GraphError, match=r"'events'.*with_watermark") as info:
        source.group_by(EF.window("ts", "1 minute"), "user")
    assert info.value.operator == "events"
    stamped = source.with_watermark("other", "1s")
    with pytest.raises(ed.GraphError, match=r"column 'ts'.*event time.*'other'"):
        stamped.group_by(EF.session_window("ts", "1 minute"))
    with pytest.raises(ed.GraphError, match="one window"):
        stamped.group_by(EF.window("other", "1 minute"), EF.window("other", "2 minutes"))
    with pytest.raises(ed.SchemaError, match="function 'window'"):
        EF.window("ts", "1 minute", "2 minutes")
    with pytest.raises(ed.SchemaError, match="function 'session_window'"):
        EF.session_window("ts", "soon")


def test_group_by_without_a_window_is_key_by_agg() -> None:
    env = ed.StreamEnvironment(1)
    rows = [{"ts": T0, "user": u, "x": i, "y": None} for i, u in enumerate("abab")]
    stream = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA))
    out = stream.groupBy("user").agg(EF.sum("x")).collect()
    env.execute()
    final = {r["user"]: r["sum(x)"] for r in out.to_pylist()}
    assert final == {"a": 2, "b": 4}


def test_first_and_last_ignorenulls_equal_spark(spark: Any) -> None:
    """Per key, nulls first and last, one non-null value in between repeated:
    Spark's order after its shuffle does not matter, and not ignoring nulls
    would give null. A key of nulls only gives null."""
    from pyspark.sql import functions as SF

    rows: list[dict[str, Any]] = []
    for k, value in [("a", 3), ("b", -7), ("c", None)]:
        rows += [{"ts": T0, "user": k, "x": None, "y": None}] * 3
        rows += [{"ts": T0, "user": k, "x": value, "y": 0.5}] * 4
        rows += [{"ts": T0, "user": k, "x": None, "y": None}] * 2
    aggs = [
        lambda F: F.first("x", ignorenulls=True),
        lambda F: F.last("x", ignorenulls=True),
        lambda F: F.first("y", True),
        lambda F: F.first("x").alias("first_plain"),
    ]
    env = ed.StreamEnvironment(1, batch_size=4)
    stream = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA))
    out = stream.group_by("user").agg(*(f(EF) for f in aggs)).collect()
    env.execute()
    ours = {r["user"]: r for r in out.to_pylist()}
    df = spark.createDataFrame(
        [(r["user"], r["x"], r["y"]) for r in rows], "user STRING, x BIGINT, y DOUBLE"
    )
    theirs_df = df.groupBy("user").agg(*(f(SF) for f in aggs[:3]))
    assert list(ours["a"])[:4] == theirs_df.columns
    theirs = {r["user"]: r.asDict() for r in theirs_df.collect()}
    for k in "abc":
        mine = {name: ours[k][name] for name in theirs_df.columns}
        assert mine == theirs[k], k
    # Without ignorenulls, the first value in arrival order: null.
    assert [ours[k]["first_plain"] for k in "abc"] == [None, None, None]


@pytest.mark.parametrize(
    "window",
    [
        pytest.param(lambda F: F.window("ts", "2 minutes", "30 seconds"), id="sliding"),
        pytest.param(lambda F: F.session_window("ts", "1 minute"), id="session"),
    ],
)
def test_window_time_equals_spark(spark: Any, window: Callable[[Any], Any]) -> None:
    """``F.window_time`` of a window of microsecond timestamps: Spark's end - 1 µs."""
    rows = _rows()
    name = "session_window" if "session" in repr(window(EF)) else "window"

    def query(F: Any, stream: Any) -> Any:
        grouped = stream.groupBy(window(F), "user").count()
        return grouped.select("user", F.window_time(name).alias("wt"), "count")

    env = ed.StreamEnvironment(2, batch_size=50)
    stream = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA)).with_watermark("ts", "20 minutes")
    out = query(EF, stream).collect()
    env.execute()
    assert out.to_arrow().schema.field("wt").type == pa.timestamp("us", tz="UTC")
    ours = out.to_pylist()
    with spark_settings(spark, NON_ANSI_UTC):
        frame = spark.createDataFrame(
            [tuple(r.values()) for r in rows], "ts TIMESTAMP, user STRING, x BIGINT, y DOUBLE"
        )
        theirs = [r.asDict() for r in query(_spark_functions(), frame).collect()]
    assert len(ours) > 3
    assert row_multiset(ours) == row_multiset(theirs)


def _spark_functions() -> Any:
    from pyspark.sql import functions as SF

    return SF


def test_window_time_of_int_ms_windows_and_what_it_refuses() -> None:
    env = ed.StreamEnvironment(1)
    rows = [{"t": 1_500, "k": "a"}, {"t": 12_000, "k": "a"}]
    stream = env.from_collection(rows).with_watermark("t", "1 second")
    grouped = stream.group_by(EF.window("t", "10 seconds"), "k").count()
    out = grouped.select(EF.window_time(EF.col("window")).alias("wt")).collect()
    env.execute()
    assert out.to_pylist() == [{"wt": 9_999}, {"wt": 19_999}]
    with pytest.raises(ed.SchemaError, match=r"window_time takes a window"):
        stream.select(EF.window_time("k").alias("wt"))
