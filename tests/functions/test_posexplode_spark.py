"""``F.posexplode`` / ``F.posexplode_outer`` in ``select`` and
``stream.posexplode`` against PySpark itself (``local[2]``, non-ANSI): the same
columns (``pos`` an ``int``, ``col``, or the two names of ``.alias(p, e)``), in
the same places, with the same rows, over arrays with nulls, null elements,
empty arrays, unicode strings and empty strings; and the errors of a
generator named with the wrong number of names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as EF
from functions.conftest import NON_ANSI_UTC, spark_settings

pytestmark = pytest.mark.spark

ROWS: list[dict[str, Any]] = [
    {"id": 0, "arr": [5, 6, 7], "s": "a,,ü"},
    {"id": 1, "arr": [], "s": ""},
    {"id": 2, "arr": None, "s": None},
    {"id": 3, "arr": [None, 8], "s": "日本,語"},
    {"id": 4, "arr": [-1], "s": ",lead"},
]
SCHEMA = pa.schema([("id", pa.int64()), ("arr", pa.list_(pa.int64())), ("s", pa.string())])
SPARK_SCHEMA = "id BIGINT, arr ARRAY<BIGINT>, s STRING"

# name -> (the position's column, the selected columns written against a functions module F)
QUERIES: dict[str, tuple[str, Callable[[Any], list[Any]]]] = {
    "unnamed": ("pos", lambda F: ["id", F.posexplode("arr"), "s"]),
    "named": ("p", lambda F: [F.posexplode("arr").alias("p", "e"), "id"]),
    "outer_unnamed": ("pos", lambda F: ["id", F.posexplode_outer("arr")]),
    "outer_named": ("i", lambda F: ["s", F.posexplode_outer("arr").alias("i", "v"), "id"]),
    "of_split": ("pos", lambda F: ["id", F.posexplode(F.split("s", ","))]),
    "outer_of_split": (
        "n",
        lambda F: ["id", F.posexplode_outer(F.split("s", ",")).alias("n", "w")],
    ),
}


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: repr(sorted(r.items())))


@pytest.mark.parametrize("query", list(QUERIES))
def test_select_posexplode_same_as_spark(spark: Any, query: str) -> None:
    from pyspark.sql import functions as SF

    env = ed.StreamEnvironment(2, batch_size=2)
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    position, columns = QUERIES[query]
    stream = source.select(*columns(EF))
    out = stream.collect()
    env.execute()
    with spark_settings(spark, NON_ANSI_UTC):
        df = spark.createDataFrame([tuple(r.values()) for r in ROWS], SPARK_SCHEMA)
        frame = df.select(*columns(SF))
        theirs = [r.asDict() for r in frame.collect()]
    assert stream.schema is not None
    assert stream.schema.names == frame.columns
    assert stream.schema.field(position).type == pa.int32()
    assert frame.schema[position].dataType.simpleString() == "int"
    assert _sorted(out.to_pylist()) == _sorted(theirs)
    assert len(theirs) >= 4


@pytest.mark.parametrize("outer", [False, True])
def test_stream_posexplode_keeps_the_columns(spark: Any, outer: bool) -> None:
    """``stream.posexplode("arr")``: the elements replace ``arr`` in place and
    ``pos`` is appended; the rows are Spark's ``select("*", posexplode(arr))``
    with the columns moved so."""
    from pyspark.sql import functions as SF

    env = ed.StreamEnvironment(2, batch_size=2)
    stream = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA)).posexplode(
        "arr", outer=outer
    )
    out = stream.collect()
    env.execute()
    assert stream.schema is not None
    assert stream.schema.names == ["id", "arr", "s", "pos"]
    generator = SF.posexplode_outer if outer else SF.posexplode
    with spark_settings(spark, NON_ANSI_UTC):
        df = spark.createDataFrame([tuple(r.values()) for r in ROWS], SPARK_SCHEMA)
        frame = df.select("id", "s", generator("arr").alias("pos", "element"))
        theirs = [
            {"id": r["id"], "arr": r["element"], "s": r["s"], "pos": r["pos"]}
            for r in frame.collect()
        ]
    assert _sorted(out.to_pylist()) == _sorted(theirs)


def test_stream_posexplode_names_and_generator_argument() -> None:
    env = ed.StreamEnvironment(1)
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    named = source.posexplode(EF.posexplode_outer("arr"), alias="x", pos="i")
    assert named.schema is not None
    # Both appended, the position first as in Spark.
    assert named.schema.names == ["id", "arr", "s", "i", "x"]
    # stream.explode of a posexplode is the same operation.
    same = source.explode(EF.posexplode("arr"))
    assert same.schema is not None
    assert same.schema.names == ["id", "arr", "s", "pos"]
    out = named.collect()
    env.execute()
    rows = [(r["id"], r["i"], r["x"]) for r in out.to_pylist()]
    assert sorted(rows, key=repr) == sorted(
        [(0, 0, 5), (0, 1, 6), (0, 2, 7), (1, None, None), (2, None, None), (3, 0, None),
         (3, 1, 8), (4, 0, -1)],
        key=repr,
    )  # fmt: skip


def test_posexplode_names_must_fit_its_two_columns() -> None:
    env = ed.StreamEnvironment(1)
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA)).name("rows")
    with pytest.raises(ed.GraphError, match=r"posexplode makes two columns.*\['e'\]") as info:
        source.select(EF.posexplode("arr").alias("e"))
    assert info.value.operator == "rows"
    with pytest.raises(ed.GraphError, match="explode of an array makes one column"):
        source.select(EF.explode("arr").alias("p", "e"))
    with pytest.raises(ed.GraphError, match=r"with_columns\(x=...\): posexplode makes two"):
        source.with_columns(x=EF.posexplode("arr"))
    with pytest.raises(TypeError, match="alias\\(\\) takes one name"):
        EF.col("id").alias("a", "b")
    with pytest.raises(ed.GraphError, match="column 'id' is selected twice"):
        source.select("id", EF.posexplode("arr").alias("id", "e"))
    with pytest.raises(ed.GraphError, match="both named 'p'"):
        source.posexplode("arr", alias="p", pos="p")
    with pytest.raises(ed.SchemaError, match="explode needs an array"):
        source.select(EF.posexplode("id"))
    assert repr(EF.posexplode("arr").alias("p", "e")) == "posexplode(col('arr')).alias('p', 'e')"
