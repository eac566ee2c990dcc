"""``keyed.agg(...)`` with ``eddyline.functions`` aggregates (API.md "Functions
and aggregates"): exact running values per key, Spark's default names, the
errors at graph build, and ``read_state`` of the accumulators' state."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F

ROWS = [
    {"k": "a", "x": 1, "y": 1.0, "s": "p"},
    {"k": "b", "x": None, "y": None, "s": None},
    {"k": "a", "x": 3, "y": 2.0, "s": "q"},
    {"k": None, "x": 5, "y": float("nan"), "s": "p"},
    {"k": "a", "x": 2, "y": 6.0, "s": "p"},
]


def _run(aggs: list[F.AggregateColumn], batch_size: int = 2) -> list[dict[str, object]]:
    env = ed.StreamEnvironment(1, batch_size=batch_size)
    out = env.from_collection(ROWS).key_by("k").agg(*aggs).collect()
    env.execute()
    return out.to_pylist()


def test_running_values_per_batch_with_spark_names() -> None:
    rows = _run(
        [
            F.sum("x").alias("total"),
            F.count("*"),
            F.count("x"),
            F.avg("y"),
            F.min("x"),
            F.max("y"),
            F.count_distinct("s"),
            F.first("x"),
            F.last("x"),
            F.collect_list("s"),
        ]
    )
    names = [
        "k", "total", "count(1)", "count(x)", "avg(y)", "min(x)", "max(y)",
        "count(DISTINCT s)", "first(x)", "last(x)", "collect_list(s)",
    ]  # fmt: skip
    assert all(list(r) == names for r in rows)
    got = [tuple(r.values()) for r in rows]
    nan = got[3][4]
    assert nan != nan  # NaN avg and max of the null key's NaN
    assert got == [
        # batch 1: a, b
        ("a", 1, 1, 1, 1.0, 1, 1.0, 1, 1, 1, ["p"]),
        ("b", None, 1, 0, None, None, None, 0, None, None, []),
        # batch 2: a, null key
        ("a", 4, 2, 2, 1.5, 1, 2.0, 2, 1, 3, ["p", "q"]),
        (None, 5, 1, 1, nan, 5, got[3][6], 1, 5, 5, ["p"]),
        # batch 3: a
        ("a", 6, 3, 3, 3.0, 1, 6.0, 2, 1, 2, ["p", "q", "p"]),
    ]


def test_statistics_and_approximations() -> None:
    env = ed.StreamEnvironment(1, batch_size=100)
    data = [{"k": i % 2, "v": float(i)} for i in range(1000)]
    out = (
        env.from_collection(data)
        .key_by("k")
        .agg(
            F.stddev("v"),
            F.variance("v").alias("var"),
            F.stddev_pop("v"),
            F.approx_count_distinct("v"),
            F.approx_percentile("v", 0.5),
            F.percentile_approx("v", 0.99).alias("p99"),
            F.collect_set("k"),
        )
        .collect()
    )
    env.execute()
    final = {r["k"]: r for r in out.to_pylist()}
    even = [float(i) for i in range(0, 1000, 2)]
    mean = sum(even) / len(even)
    var = sum((v - mean) ** 2 for v in even) / (len(even) - 1)
    row = final[0]
    assert list(row) == [
        "k", "stddev(v)", "var", "stddev_pop(v)", "approx_count_distinct(v)",
        "approx_percentile(v, 0.5, 10000)", "p99", "collect_set(k)",
    ]  # fmt: skip
    assert row["var"] == pytest.approx(var, rel=1e-12)
    assert row["stddev(v)"] == pytest.approx(var**0.5, rel=1e-12)
    assert row["stddev_pop(v)"] == pytest.approx((var * 499 / 500) ** 0.5, rel=1e-12)
    assert abs(row["approx_count_distinct(v)"] - 500) <= 15
    assert abs(row["approx_percentile(v, 0.5, 10000)"] - 500) <= 10
    assert abs(row["p99"] - 988) <= 10
    assert row["collect_set(k)"] == [0]


def test_expressions_as_arguments() -> None:
    rows = _run([F.sum(F.col("x") * 2).alias("twice"), F.max(F.length("s")).alias("longest")], 10)
    final = {r["k"]: r for r in rows}
    assert final["a"] == {"k": "a", "twice": 12, "longest": 1}


def test_errors_at_graph_build_name_the_aggregate_and_column() -> None:
    env = ed.StreamEnvironment(1)
    keyed = env.from_collection(ROWS).key_by("k")
    with pytest.raises(ed.SchemaError, match=r"aggregate 'avg'.*'s'"):
        keyed.agg(F.avg("s"))
    with pytest.raises(ed.GraphError, match="column 'nope' is not in the input schema"):
        keyed.agg(F.sum("nope"))
    with pytest.raises(ed.GraphError, match="two aggregates are named 'sum\\(x\\)'"):
        keyed.agg(F.sum("x"), F.sum("x"))
    with pytest.raises(ed.GraphError, match="at least one aggregate"):
        keyed.agg()
    with pytest.raises(TypeError, match=r"aggregates of eddyline\.functions"):
        keyed.agg(F.col("x"))  # type: ignore[arg-type]
    with pytest.raises(ed.SchemaError, match="approx_percentile"):
        keyed.agg(F.approx_percentile("x", 1.5))
    with pytest.raises(ed.EddylineError, match="aggregate 'sum\\(x\\)'"):
        F.sum("x") + 1
    with pytest.raises(ed.EddylineError, match="aggregate 'total'"):
        env.from_collection(ROWS).with_columns(t=F.sum("x").alias("total"))
    with pytest.raises(ed.EddylineError, match="aggregate 'sum\\(x\\)'"):
        env.from_collection(ROWS).select(F.sum("x"))
    with pytest.raises(ed.EddylineError, match="aggregate 'count\\(1\\)'"):
        env.from_collection(ROWS).filter(F.count("*"))  # type: ignore[arg-type]


def test_read_state_shows_keys_and_current_values(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="1h"), batch_size=2
    )
    out = (
        env.from_collection(ROWS)
        .key_by("k")
        .agg(F.sum("x").alias("total"), F.count("*"), F.collect_list("s"))
        .uid("aggs")
        .collect()
    )
    result = env.execute()
    final = {r["k"]: r for r in out.to_pylist()}
    assert result.checkpoints, "the final checkpoint of a bounded job"
    table = ed.read_state(result.checkpoints[-1].path, "aggs")
    assert table.schema.names == ["k", "total", "count(1)", "collect_list(s)"]
    assert table.schema.field("total").type == pa.int64()
    state = {r["k"]: r for r in table.to_pylist()}
    assert state == final
    only = ed.read_state(result.checkpoints[-1].path, "aggs", state="total")
    assert only.schema.names == ["k", "total"]
