"""Spark's ``floor(a / b)`` of integers in env.sql, against PySpark over the same rows.

Spark's ``/`` divides as doubles and its ``floor`` turns the floored double into a bigint
(saturating); eddyline runs an integer kernel where that gives the same result and the
double computation elsewhere (docs/DESIGN.md "Expressions"). The rows hold what could tell
the two apart: negative values (floor, not truncation), nulls, values around 2^53 (where a
bigint stops being exact as a double) and the extremes of bigint."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import run, same_rows

EXACT = 1 << 53
BIG = 2**63 - 1
DIVIDENDS = [
    *(0, 1, -1, 7, -7, 908, -999, 123_456_789, -987_654_321_987),
    *(EXACT - 3, EXACT - 1, EXACT, EXACT + 1, EXACT + 3, 3 * EXACT + 1, BIG - 1, BIG),
    *(-(EXACT - 1), -EXACT, -(EXACT + 1), -(3 * EXACT + 1), -BIG, -BIG - 1),
    None,
]
DIVISORS = [1, -1, 2, -2, 3, 7, -7, 1000, -1000, EXACT, EXACT + 1, BIG, -BIG - 1, None]

QUERY = """
    SELECT a, b, floor(a / b) AS q, floor(a / 1000) AS per_mille, floor(a / -7) AS sevenths,
           floor(a / -1) AS negated, floor(a / 9007199254740993) AS beyond,
           floor(n / 3) AS small, floor(p * 908 / 1000) AS price, floor(-7 / 2) AS constant
    FROM t
"""


def rows() -> pa.Table:
    """Every dividend against every divisor; ``n`` (int) and ``p`` small values of ``a``."""
    pairs = list(itertools.product(DIVIDENDS, DIVISORS))
    small = [None if a is None else a % 200_003 - 100_001 for a, _ in pairs]
    return pa.table(
        {
            "a": pa.array([a for a, _ in pairs], pa.int64()),
            "b": pa.array([b for _, b in pairs], pa.int64()),
            "n": pa.array(small, pa.int32()),
            "p": pa.array(small, pa.int64()),
        }
    )


def spark_view(spark: Any, table: pa.Table) -> None:
    """``table`` as Spark's view ``t``, its bigints passed exactly (no pandas floats)."""
    schema = "a bigint, b bigint, n int, p bigint"
    frame = spark.createDataFrame([tuple(r.values()) for r in table.to_pylist()], schema)
    frame.createOrReplaceTempView("t")


@contextmanager
def ansi(spark: Any, enabled: bool) -> Iterator[None]:
    """Spark's ``spark.sql.ansi.enabled`` set to ``enabled`` for a block."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


@pytest.fixture(params=[1, 3], ids=lambda p: f"p{p}")
def env(request: pytest.FixtureRequest) -> ed.StreamEnvironment:
    return ed.StreamEnvironment(parallelism=request.param, batch_size=32)


@pytest.mark.spark
def test_floor_of_integer_division_is_sparks(spark: Any, env: ed.StreamEnvironment) -> None:
    table = rows()
    spark_view(spark, table)
    # eddyline's default is Spark's ANSI mode off: `floor` saturates to a bigint (in ANSI
    # mode Spark fails on floor(-2^63 / -1) instead).
    with ansi(spark, False):
        want = [row.asDict() for row in spark.sql(QUERY).collect()]
    # Non-vacuous: the rows do tell truncation and exact division apart from Spark's.
    assert any(r["q"] is not None and r["q"] < 0 and r["a"] % r["b"] != 0 for r in want)
    assert any(r["beyond"] is not None and r["a"] // 9007199254740993 != r["beyond"] for r in want)
    assert {r["negated"] for r in want if r["a"] == -BIG - 1} == {BIG}
    env.from_arrow(table).create_temporary_view("t")
    same_rows(run(env, env.sql(QUERY)), want)


@pytest.mark.spark
def test_floor_of_integer_division_by_zero_is_sparks(spark: Any, env: ed.StreamEnvironment) -> None:
    table = rows()
    spark_view(spark, table)
    query = "SELECT a, b, floor(a / (b - b)) AS q FROM t"
    from pyspark.errors import ArithmeticException

    # Spark with ANSI mode off (eddyline's default) gives null; with it on the query
    # fails, and so does eddyline's job with ansi=True.
    with ansi(spark, False):
        want = [row.asDict() for row in spark.sql(query).collect()]
    assert {r["q"] for r in want} == {None}
    env.from_arrow(table).create_temporary_view("t")
    same_rows(run(env, env.sql(query)), want)
    with ansi(spark, True), pytest.raises(ArithmeticException, match="DIVIDE_BY_ZERO"):
        spark.sql(query).collect()
    strict = ed.StreamEnvironment(parallelism=env.parallelism, batch_size=32, ansi=True)
    strict.from_arrow(table).create_temporary_view("t")
    with pytest.raises(ed.JobFailedError, match=r"\[DIVIDE_BY_ZERO\]"):
        run(strict, strict.sql(query))
