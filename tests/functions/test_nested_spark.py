"""Structs, arrays, ``split``, ``explode`` and ``F.expr`` against PySpark
itself (``local[2]``, non-ANSI): the same expressions, written once for
both modules, over rows with nulls, empty arrays and strings, unicode and
negative numbers; each result equal to Spark's."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as EF

pytestmark = pytest.mark.spark

ROWS: list[dict[str, Any]] = [
    {"id": 0, "s": "a,b,,c,,", "x": 5, "arr": [1, 2, 3], "st": {"a": 1, "b": "p"}},
    {"id": 1, "s": "", "x": -7, "arr": [], "st": {"a": None, "b": "q"}},
    {"id": 2, "s": None, "x": None, "arr": None, "st": None},
    {"id": 3, "s": "日本,語;x", "x": 0, "arr": [4, None], "st": {"a": -3, "b": None}},
    {"id": 4, "s": ",lead", "x": 12, "arr": [2], "st": {"a": 7, "b": "ünï"}},
]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("x", pa.int64()),
        ("arr", pa.list_(pa.int64())),
        ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
    ]
)

# name -> the expression, written against a functions module F.
CASES: dict[str, Any] = {
    "struct": lambda F: F.struct("id", "s"),
    "struct_named": lambda F: F.struct(F.col("x").alias("y"), F.col("st.b"), F.lit(1)),
    "field_dot": lambda F: F.col("st.a"),
    "field_index": lambda F: F.col("st")["b"],
    "field_get": lambda F: F.col("st").getField("a"),
    "struct_of_struct": lambda F: F.struct("st", "x"),
    "array": lambda F: F.array("id", "x"),
    "array_of_arrays": lambda F: F.array("arr", "arr"),
    "size": lambda F: F.size("arr"),
    "element_at_1": lambda F: F.element_at("arr", 1),
    "element_at_neg": lambda F: F.element_at("arr", -1),
    "element_at_out": lambda F: F.element_at("arr", 3),
    "element_at_far": lambda F: F.element_at("arr", -4),
    "get_item": lambda F: F.col("arr")[1],
    "get_item_neg": lambda F: F.col("arr")[-1],
    "array_contains": lambda F: F.array_contains("arr", 2),
    "array_contains_null": lambda F: F.array_contains("arr", 4),
    "split": lambda F: F.split("s", ","),
    "split_limit": lambda F: F.split("s", ",", 2),
    "split_limit_one": lambda F: F.split("s", ",", 1),
    "split_class": lambda F: F.split("s", "[,;]+"),
    "split_empty_pattern": lambda F: F.split("s", ""),
    "split_empty_pattern_limit": lambda F: F.split("s", "", 2),
    "size_split": lambda F: F.size(F.split("s", ",")),
}

# Spark SQL texts, evaluated by F.expr in both engines.
EXPRESSIONS: dict[str, str] = {
    "arith": "x * 2 + 1 - id",
    "div": "x / 2",
    "mod": "x % 3",
    "neg": "-x",
    "cmp": "x >= 5 AND NOT (id = 4) OR s IS NULL",
    "ne": "x != 0 AND x <> 5",
    "eqeq": "x == 5",
    "case": "CASE WHEN x > 0 THEN 'pos' WHEN x < 0 THEN 'neg' ELSE 'zero' END",
    "case_operand": "CASE id WHEN 0 THEN 'zero' WHEN 1 THEN 'one' END",
    "cast": "CAST(x AS STRING)",
    "cast_double": "cast(s AS double)",
    "in": "x IN (5, 0, NULL)",
    "not_in": "x NOT IN (5, 0)",
    "between": "x BETWEEN -1 AND 5",
    "not_between": "x NOT BETWEEN -1 AND 5",
    "like": "s LIKE '%,%'",
    "not_like": "s NOT LIKE 'a%'",
    "rlike": "s RLIKE '^[a-z]'",
    "concat_op": "lower(s) || '!'",
    "functions": "upper(concat_ws('-', s, 'z'))",
    "coalesce": "coalesce(s, 'none')",
    "is_not_null": "s IS NOT NULL",
    "field": "st.a * 2",
    "backticks": "`st`.`b`",
    "subscript_field": "st['b']",
    "subscript_item": "arr[0]",
    "size": "size(arr)",
    "element_at": "element_at(arr, -1)",
    "split": "split(s, ',')",
    "struct": "struct(id, st.b)",
    "array": "array(x, 1)",
    "double_quoted": 'concat(s, "?")',
    "floats": "x * 1.5",
}


def _frame(spark: Any) -> Any:
    from pyspark.sql.types import (
        ArrayType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("s", StringType()),
            StructField("x", LongType()),
            StructField("arr", ArrayType(LongType())),
            StructField(
                "st",
                StructType([StructField("a", LongType()), StructField("b", StringType())]),
            ),
        ]
    )
    rows = [
        (r["id"], r["s"], r["x"], r["arr"], None if r["st"] is None else tuple(r["st"].values()))
        for r in ROWS
    ]
    return spark.createDataFrame(rows, schema)


def _plain(value: Any) -> Any:
    """A Spark value as pyarrow's to_pylist gives it (Rows as dicts)."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _ours(columns: list[Any]) -> list[dict[str, Any]]:
    env = ed.StreamEnvironment()
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    out = source.select("id", *columns).collect()
    env.execute()
    return sorted(out.to_pylist(), key=lambda r: r["id"])


def _theirs(spark: Any, columns: list[Any]) -> list[dict[str, Any]]:
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        rows = [_plain(r) for r in _frame(spark).select("id", *columns).collect()]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)
    return sorted(rows, key=lambda r: r["id"])


@pytest.fixture(scope="module")
def results(spark: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from pyspark.sql import functions as SF

    ours = _ours([case(EF).alias(name) for name, case in CASES.items()])
    theirs = _theirs(spark, [case(SF).alias(name) for name, case in CASES.items()])
    return ours, theirs


@pytest.mark.parametrize("name", list(CASES))
def test_same_as_spark(name: str, results: tuple[list[Any], list[Any]]) -> None:
    ours, theirs = results
    assert [r[name] for r in ours] == [r[name] for r in theirs]


@pytest.fixture(scope="module")
def expr_results(spark: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from pyspark.sql import functions as SF

    ours = _ours([EF.expr(text).alias(name) for name, text in EXPRESSIONS.items()])
    theirs = _theirs(spark, [SF.expr(text).alias(name) for name, text in EXPRESSIONS.items()])
    return ours, theirs


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_expr_same_as_spark(name: str, expr_results: tuple[list[Any], list[Any]]) -> None:
    ours, theirs = expr_results
    assert [r[name] for r in ours] == [r[name] for r in theirs], EXPRESSIONS[name]


def test_struct_field_names_as_spark(spark: Any) -> None:
    from pyspark.sql import functions as SF

    column = lambda F: F.struct(F.col("x").alias("y"), F.col("st.b"), F.lit(1))  # noqa: E731
    env = ed.StreamEnvironment()
    stream = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA)).select(column(EF).alias("v"))
    assert stream.schema is not None
    ours = [f.name for f in stream.schema.field("v").type]
    theirs = _frame(spark).select(column(SF).alias("v")).schema["v"].dataType.names
    assert ours == theirs == ["y", "b", "col3"]


@pytest.mark.parametrize("outer", [False, True])
def test_explode_same_as_spark(spark: Any, outer: bool) -> None:
    from pyspark.sql import functions as SF

    def query(F: Any) -> list[Any]:
        generator = F.explode_outer if outer else F.explode
        return ["id", generator("arr").alias("e"), F.col("st.b")]

    env = ed.StreamEnvironment(2)
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    out = source.select(*query(EF)).collect()
    env.execute()
    ours = sorted(out.to_pylist(), key=lambda r: (r["id"], r["e"] is None, r["e"]))
    rows = [_plain(r) for r in _frame(spark).select(*query(SF)).collect()]
    theirs = sorted(rows, key=lambda r: (r["id"], r["e"] is None, r["e"]))
    assert ours == theirs
    assert list(ours[0]) == ["id", "e", "b"]


def test_explode_split_unnamed_is_col_as_spark(spark: Any) -> None:
    from pyspark.sql import functions as SF

    env = ed.StreamEnvironment()
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    out = source.select("id", EF.explode(EF.split("s", ","))).collect()
    env.execute()
    ours = sorted((r["id"], r["col"]) for r in out.to_pylist())
    frame = _frame(spark).select("id", SF.explode(SF.split("s", ",")))
    theirs = sorted((r["id"], r["col"]) for r in frame.collect())
    assert ours == theirs
