"""Aggregates of expressions (``F.sum(F.col("x") * 2)``, ``F.avg(F.length("s"))``)
against PySpark (``local[2]``): Spark's default names and values; a ``sum``
of longs that overflows wraps around as Spark's non-ANSI sum does; and
Spark's ANSI mode reaches an aggregate's argument (an invalid cast fails the
job with ``ansi=True``, is null without it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as EF
from functions.conftest import NON_ANSI_UTC, spark_settings

SCHEMA = pa.schema([("k", pa.string()), ("x", pa.int64()), ("s", pa.string())])
ROWS = [
    {"k": "a", "x": 3, "s": "héllo"},
    {"k": "a", "x": None, "s": ""},
    {"k": "b", "x": -4, "s": None},
    {"k": "b", "x": 10, "s": "日本"},
    {"k": "c", "x": None, "s": None},
]
AGGS: list[Callable[[Any], Any]] = [
    lambda F: F.sum(F.col("x") * 2),
    lambda F: F.avg(F.length("s")),
    lambda F: F.max(F.col("x") + F.length("s")),
    lambda F: F.count_distinct(F.lower("s")),
]
SPARK_SCHEMA = "k STRING, x BIGINT, s STRING"


def _final(rows: list[dict[str, Any]], aggs: list[Any], *, ansi: bool = False) -> Any:
    env = ed.StreamEnvironment(1, ansi=ansi)
    stream = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA))
    out = stream.group_by("k").agg(*aggs).collect()
    env.execute()
    table = out.to_arrow()
    return table.schema.names, {r["k"]: r for r in table.to_pylist()}


def test_aggregates_of_expressions_equal_spark(spark: Any) -> None:
    from pyspark.sql import functions as SF

    names, ours = _final(ROWS, [f(EF) for f in AGGS])
    with spark_settings(spark, NON_ANSI_UTC):
        df = spark.createDataFrame([tuple(r.values()) for r in ROWS], SPARK_SCHEMA)
        theirs_df = df.groupBy("k").agg(*(f(SF) for f in AGGS))
        # Spark's default names: sum((x * 2)), avg(length(s)), ...
        assert names == theirs_df.columns
        theirs = {r["k"]: r.asDict() for r in theirs_df.collect()}
    assert ours == theirs


def test_sum_overflow_wraps_around_as_spark_without_ansi(spark: Any) -> None:
    from pyspark.sql import functions as SF

    big = 2**62
    rows = [{"k": "a", "x": big, "s": "1"} for _ in range(3)]
    _, ours = _final(rows, [EF.sum("x")])
    with spark_settings(spark, NON_ANSI_UTC):
        df = spark.createDataFrame([tuple(r.values()) for r in rows], SPARK_SCHEMA)
        theirs = df.groupBy("k").agg(SF.sum("x")).collect()[0]["sum(x)"]
    assert ours["a"]["sum(x)"] == theirs == 3 * big - 2**64


def test_ansi_applies_to_the_arguments_of_aggregates() -> None:
    rows = [{"k": "a", "x": 1, "s": "12"}, {"k": "a", "x": 2, "s": "abc"}]
    cast_sum = EF.sum(EF.col("s").cast("int")).alias("total")
    _, ours = _final(rows, [cast_sum])
    assert ours["a"]["total"] == 12  # "abc" is null without ANSI
    with pytest.raises(ed.JobFailedError, match=r"(?s)'agg.*abc"):
        _final(rows, [cast_sum], ansi=True)
