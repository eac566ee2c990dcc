"""A ``sum`` of longs that overflows, against PySpark (``local[2]``) with
``spark.sql.ansi.enabled`` on and off, on the same rows, grouped by key
(running), by a tumbling window and by a session window.

Spark sums integers in a ``bigint`` with ``Math.addExact`` in ANSI mode: the
query fails with ``ARITHMETIC_OVERFLOW``; without ANSI mode the sum wraps
around. ``avg`` sums in a double and ``sum`` of ``int`` in a ``bigint``, so
neither overflows here in either mode. eddyline with
``StreamEnvironment(ansi=True)`` fails the job with ``ed.JobFailedError``
naming the operator and the overflow; without it, the values equal Spark's."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as EF
from functions.conftest import row_multiset, spark_settings

UTC = dt.UTC
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("k", pa.string()),
        ("x", pa.int64()),
        ("i", pa.int32()),
    ]
)
T0 = dt.datetime(2024, 2, 29, 23, 59, tzinfo=UTC)
BIG = 2**62
INT_MAX = 2**31 - 1


def _rows(overflow: bool) -> list[dict[str, Any]]:
    """Key ``a`` sums four values above 2**62 (past bigint's maximum whatever
    the order) when ``overflow``, else values that fit; ``b`` and the null key
    always fit; ``i`` sums ``int``s past int's range (a long in Spark)."""
    rows = []
    for n in range(12):
        k = ["a", "b", None][n % 3]
        if k == "a":
            x: int | None = BIG + n if overflow else n * 1000
        else:
            x = None if n % 4 == 0 else -n
        rows.append(
            {
                # Four seconds apart: one tumbling minute and one session.
                "ts": T0 + dt.timedelta(seconds=4 * n),
                "k": k,
                "x": x,
                "i": INT_MAX if n % 2 else None,
            }
        )
    return rows


AGGS: list[Callable[[Any], Any]] = [
    lambda F: F.sum("x"),
    lambda F: F.avg("x"),
    lambda F: F.sum("i"),
    lambda F: F.avg("i"),
]
GROUPINGS = [
    pytest.param(lambda F: ["k"], id="keyed"),
    pytest.param(lambda F: [F.window("ts", "1 minute"), "k"], id="tumbling"),
    pytest.param(lambda F: ["k", F.session_window("ts", "1 minute")], id="session"),
]


def _eddyline(
    rows: list[dict[str, Any]], grouping: Callable[[Any], list[Any]], *, ansi: bool
) -> tuple[list[str], list[dict[str, Any]]]:
    env = ed.StreamEnvironment(2, batch_size=4, ansi=ansi)
    stream = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA)).with_watermark("ts", "1 minute")
    out = stream.group_by(*grouping(EF)).agg(*(f(EF) for f in AGGS)).collect()
    env.execute()
    table = out.to_arrow()
    final = table.to_pylist()
    if not {"window", "session_window"} & set(table.schema.names):
        # A running aggregate emits an upsert per key per batch: the last.
        final = list({r["k"]: r for r in final}.values())
    return table.schema.names, final


def _spark(spark: Any, rows: list[dict[str, Any]], grouping: Callable[[Any], list[Any]]) -> Any:
    from pyspark.sql import functions as SF

    df = spark.createDataFrame(
        [tuple(r.values()) for r in rows], "ts TIMESTAMP, k STRING, x BIGINT, i INT"
    )
    return df.groupBy(*grouping(SF)).agg(*(f(SF) for f in AGGS))


def _settings(ansi: bool) -> dict[str, str]:
    return {"spark.sql.ansi.enabled": str(ansi).lower(), "spark.sql.session.timeZone": "UTC"}


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize(("overflow", "ansi"), [(True, False), (False, True), (False, False)])
def test_sums_equal_spark(
    spark: Any, grouping: Callable[[Any], list[Any]], overflow: bool, ansi: bool
) -> None:
    rows = _rows(overflow)
    names, ours = _eddyline(rows, grouping, ansi=ansi)
    with spark_settings(spark, _settings(ansi)):
        theirs_df = _spark(spark, rows, grouping)
        assert names == theirs_df.columns
        theirs = [r.asDict(recursive=True) for r in theirs_df.collect()]
    assert len(ours) == 3
    assert row_multiset(ours) == row_multiset(theirs)
    a = next(r for r in ours if r["k"] == "a")
    if overflow:
        # Spark's non-ANSI sum wraps around.
        assert a["sum(x)"] == 4 * BIG + 0 + 3 + 6 + 9 - 2**64
    assert a["sum(i)"] == 2 * INT_MAX


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_ansi_overflow_fails_as_spark(spark: Any, grouping: Callable[[Any], list[Any]]) -> None:
    from pyspark.errors import ArithmeticException

    rows = _rows(overflow=True)
    with (
        spark_settings(spark, _settings(True)),
        pytest.raises(ArithmeticException, match="ARITHMETIC_OVERFLOW"),
    ):
        _spark(spark, rows, grouping).collect()
    with pytest.raises(ed.JobFailedError, match="ARITHMETIC_OVERFLOW") as info:
        _eddyline(rows, grouping, ansi=True)
    operator = info.value.operator
    assert operator, "the error names the operator"
    message = str(info.value)
    assert f"operator '{operator}'" in message
    assert "aggregate 'sum'" in message
    assert "the sum of 'x' leaves bigint's range" in message
    assert "ANSI" in message


def test_ansi_overflow_after_restarts_keeps_its_cause() -> None:
    """An overflow fails again on every attempt: once the restarts are used
    up the job fails with the overflow as its cause, never a later symptom."""
    env = ed.StreamEnvironment(
        1, ansi=True, restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="10ms")
    )
    rows = _rows(overflow=True)
    source = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA))
    source.group_by("k").agg(EF.sum("x")).name("totals").collect()
    with pytest.raises(ed.JobFailedError, match="ARITHMETIC_OVERFLOW") as info:
        env.execute()
    assert info.value.operator == "totals"
    assert "the sum of 'x' leaves bigint's range" in str(info.value)
