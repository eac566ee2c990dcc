"""``keyed.agg(...)`` against PySpark's ``groupBy(k).agg(...)`` (``local[2]``) on
the same Arrow data: nulls, NaN, ±0.0, empty strings, unicode, keys whose
values are all null. The final running value of every key equals Spark's
aggregate; where Spark itself is approximate or order-dependent the check is
the documented one (docs/API.md "Aggregates"): ``approx_count_distinct``
within 5% of the exact count, ``approx_percentile`` within 1% of the rank,
``first``/``last``/``collect_list`` in arrival order (Spark's are
nondeterministic after a shuffle: compared as a multiset), ``collect_set``
as a set."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as EF

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("k", pa.string()), ("x", pa.int64()), ("y", pa.float64()), ("s", pa.string())])


def _data(n: int = 3000, seed: int = 7) -> pa.Table:
    rng = random.Random(seed)
    keys = ["a", "b", "ü", "", None, "日本"]
    specials = [float("nan"), -0.0, 0.0, 1e300, -2.5]
    rows: list[dict[str, Any]] = []
    for i in range(n):
        k = keys[i % len(keys)]
        rows.append(
            {
                "k": k,
                "x": None if i % 7 == 0 else rng.randint(-(10**12), 10**12),
                "y": None if i % 5 == 0 else (specials[i % 5] if i % 11 == 0 else rng.random()),
                "s": None if i % 9 == 0 else rng.choice(["", "x", "é", "e\u0301", "日"]),
            }
        )
    # A key whose values are all null, and one seen once.
    rows += [{"k": "nulls", "x": None, "y": None, "s": None}] * 3
    rows.append({"k": "once", "x": 4, "y": 0.5, "s": "z"})
    return pa.Table.from_pylist(rows, SCHEMA)


# (name, aggregate) written against a functions module F (eddyline's or Spark's).
EXACT: list[Callable[[Any], Any]] = [
    lambda F: F.sum("x"),
    lambda F: F.count("*"),
    lambda F: F.count("y"),
    lambda F: F.min("x"),
    lambda F: F.max("x"),
    lambda F: F.min("s"),
    lambda F: F.max("s"),
    lambda F: F.count_distinct("s"),
    lambda F: F.countDistinct("x"),
]
CLOSE: list[Callable[[Any], Any]] = [
    lambda F: F.avg("y"),
    lambda F: F.mean("x"),
    lambda F: F.sum("y"),
    lambda F: F.stddev("y"),
    lambda F: F.variance("x"),
    lambda F: F.stddev_pop("y"),
    lambda F: F.var_pop("y"),
]
# NaN compares: Spark's min/max order NaN above every number.
NAN_ORDERED: list[Callable[[Any], Any]] = [lambda F: F.min("y"), lambda F: F.max("y")]
OTHER: list[Callable[[Any], Any]] = [
    lambda F: F.approx_count_distinct("x"),
    lambda F: F.approx_percentile("x", 0.9),
    lambda F: F.first("x"),
    lambda F: F.last("s"),
    lambda F: F.collect_list("s"),
    lambda F: F.collect_set("s"),
]
ALL = EXACT + CLOSE + NAN_ORDERED + OTHER


def _eddyline(table: pa.Table) -> tuple[list[str], dict[Any, dict[str, Any]]]:
    # One source subtask: arrival order is the table's, which first/last and
    # collect_list are checked against (several subtasks interleave).
    env = ed.StreamEnvironment(1, batch_size=97)
    out = env.from_arrow(table).key_by("k").agg(*(f(EF) for f in ALL)).collect()
    env.execute()
    result = out.to_arrow()
    final: dict[Any, dict[str, Any]] = {}
    for row in result.to_pylist():
        final[row["k"]] = row  # the last row of a key is its final value
    return result.schema.names, final


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b
    return bool(a == b)


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_final_values_equal_spark_group_by(spark: Any) -> None:
    from pyspark.sql import functions as SF
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    table = _data()
    names, ours = _eddyline(table)
    spark_schema = StructType(
        [
            StructField("k", StringType()),
            StructField("x", LongType()),
            StructField("y", DoubleType()),
            StructField("s", StringType()),
        ]
    )
    df = spark.createDataFrame([tuple(r.values()) for r in table.to_pylist()], spark_schema)
    theirs_df = df.groupBy("k").agg(*(f(SF) for f in ALL))
    # Spark's default names are eddyline's.
    assert names == theirs_df.columns
    theirs = {r["k"]: r.asDict() for r in theirs_df.collect()}
    assert set(ours) == set(theirs)

    rows = table.to_pylist()
    for key, spark_row in theirs.items():
        mine = ours[key]
        values = [r for r in rows if r["k"] == key]
        n_exact = len(EXACT)
        for i, name in enumerate(names[1:]):
            a, b = mine[name], spark_row[name]
            where = f"key {key!r}, {name}: eddyline {a!r}, Spark {b!r}"
            if i < n_exact or ALL[i] in NAN_ORDERED:
                assert _same(a, b), where
            elif ALL[i] in CLOSE:
                assert _close(a, b), where
            elif name.startswith("approx_count_distinct"):
                exact = len({r["x"] for r in values if r["x"] is not None})
                assert abs(a - exact) <= max(1, 0.05 * exact), where
            elif name.startswith("approx_percentile"):
                xs = sorted(r["x"] for r in values if r["x"] is not None)
                if not xs:
                    assert a is None and b is None, where
                    continue
                rank = 0.9 * len(xs)
                lo = xs[max(0, int(rank - 0.01 * len(xs)) - 1)]
                hi = xs[min(len(xs) - 1, int(rank + 0.01 * len(xs)) + 1)]
                assert lo <= a <= hi and lo <= b <= hi, (where, lo, hi)
            elif name == "first(x)":
                assert a == values[0]["x"], where
            elif name == "last(s)":
                assert a == values[-1]["s"], where
            elif name == "collect_list(s)":
                assert a == [r["s"] for r in values if r["s"] is not None], where
                assert sorted(a) == sorted(b), where
            elif name == "collect_set(s)":
                assert sorted(a) == sorted(b), where
            else:
                raise AssertionError(f"unchecked column {name}")
