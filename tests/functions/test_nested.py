"""Struct and array columns through the engine: built by ``F.struct`` /
``F.array`` / ``F.split``, read by field access, and carried by
``select``, ``with_columns``, ``filter``, ``key_by`` (on a scalar column
beside them), the ParquetSink and ``collect``; the errors of misused
generators and indices; ``F.expr`` errors."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
import eddyline.functions as F
from eddyline.testing import read_parquet_dir

ROWS: list[dict[str, Any]] = [
    {"k": i % 3, "n": i, "tags": f"t{i},u{i % 2}" if i % 4 else None} for i in range(40)
]


def _nested(env: ed.StreamEnvironment) -> ed.DataStream:
    return env.from_collection(ROWS).with_columns(
        st=F.struct("k", (F.col("n") * 10).alias("ten")),
        arr=F.split("tags", ","),
    )


def _expected_rows() -> list[dict[str, Any]]:
    out = []
    for r in ROWS:
        arr = None if r["tags"] is None else r["tags"].split(",")
        out.append({**r, "st": {"k": r["k"], "ten": r["n"] * 10}, "arr": arr})
    return out


def test_struct_and_array_columns_flow_through_operators() -> None:
    env = ed.StreamEnvironment(2)
    stream = (
        _nested(env)
        .filter(F.col("st.ten") >= 100)
        .with_columns(first=F.element_at("arr", 1), a=F.col("st")["k"])
        .select("n", "st", "arr", "first", "a")
    )
    out = stream.collect()
    env.execute()
    got = sorted(out.to_pylist(), key=lambda r: r["n"])
    want = [
        {
            "n": r["n"],
            "st": r["st"],
            "arr": r["arr"],
            "first": None if r["arr"] is None else r["arr"][0],
            "a": r["k"],
        }
        for r in _expected_rows()
        if r["n"] * 10 >= 100
    ]
    assert got == want
    assert stream.schema is not None
    assert stream.schema.field("st").type == pa.struct([("k", pa.int64()), ("ten", pa.int64())])
    assert stream.schema.field("arr").type.value_type == pa.string()


def test_key_by_a_scalar_beside_nested_columns() -> None:
    env = ed.StreamEnvironment(2)
    keyed = (
        _nested(env)
        .key_by("k")
        .reduce(lambda a, b: {**b, "n": a["n"] + b["n"], "st": b["st"], "arr": b["arr"]})
    )
    out = keyed.collect()
    env.execute()
    final: dict[int, dict[str, Any]] = {}
    for r in out.to_pylist():
        final[r["k"]] = r
    assert {k: r["n"] for k, r in final.items()} == {
        k: sum(r["n"] for r in ROWS if r["k"] == k) for k in range(3)
    }
    assert all(r["st"]["k"] == k for k, r in final.items())


def test_nested_columns_to_parquet_sink(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(2)
    _nested(env).sink_to(ed.ParquetSink(str(tmp_path / "out")))
    env.execute()
    table = read_parquet_dir(tmp_path / "out")
    got = sorted(table.to_pylist(), key=lambda r: r["n"])
    assert got == _expected_rows()
    files = sorted((tmp_path / "out").glob("*.parquet"))
    assert files and pq.read_schema(files[0]).field("st").type.num_fields == 2


def test_dotted_names_and_backticks() -> None:
    assert repr(F.col("st.a")) == repr(F.col("st").getField("a"))
    assert F.col("st.a").output_name == "a"
    assert F.col("`a.b`").output_name == "a.b"
    assert repr(F.col("`x``y`.z")) == repr(ed.Expr._col("x`y")["z"])
    with pytest.raises(ValueError, match="unclosed backtick"):
        F.col("`a.b")
    with pytest.raises(ValueError, match="empty part"):
        F.col("a..b")
    env = ed.StreamEnvironment()
    out = env.from_arrow(pa.table({"a.b": [1, 2]})).select(F.col("`a.b`")).collect()
    env.execute()
    assert out.to_pylist() == [{"a.b": 1}, {"a.b": 2}]


def test_nested_expressions_pickle() -> None:
    for e in (F.col("st.a"), F.struct("a", F.col("b").alias("c")), F.split("s", ",", 2)):
        assert repr(pickle.loads(pickle.dumps(e))) == repr(e)
    e = pickle.loads(pickle.dumps(F.col("st")["a"].alias("x")))
    assert e.output_name == "x"


def test_generator_inside_an_expression_is_a_schema_error() -> None:
    env = ed.StreamEnvironment()
    s = _nested(env)
    with pytest.raises(ed.SchemaError, match="explode is a generator"):
        s.with_columns(x=F.size(F.explode("arr")))
    with pytest.raises(ed.GraphError, match="only one generator"):
        s.select(F.explode("arr").alias("a"), F.explode("arr").alias("b"))


def test_explode_of_a_non_array_is_a_schema_error() -> None:
    env = ed.StreamEnvironment()
    with pytest.raises(ed.SchemaError, match="explode needs an array"):
        _nested(env).explode("n")


def test_element_at_zero_fails_the_job_naming_it() -> None:
    env = ed.StreamEnvironment()
    _nested(env).select(F.element_at("arr", 0).alias("z")).name("pick").collect()
    with pytest.raises(ed.EddylineError, match=r"(?s)pick.*SQL array indices start at 1"):
        env.execute()


def test_getitem_takes_names_and_indices_only() -> None:
    with pytest.raises(TypeError, match="field name"):
        F.col("arr")[1.5]
    with pytest.raises(TypeError, match="not iterable"):
        list(F.col("arr"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nosuch(x) + 1", r"unknown function 'nosuch'.*\(at line 1, column 1\)"),
        ("x + sum(y)", r"aggregate 'sum'.*column 5"),
        ("x +", r'cannot parse expression "x \+"'),
        ("x IS DISTINCT FROM y", r"is not supported in expression.*column 1"),
        ("CAST(x AS whatever)", r"unknown type"),
    ],
)
def test_expr_errors_name_text_and_position(text: str, message: str) -> None:
    with pytest.raises(ed.EddylineError, match=message):
        F.expr(text)


def test_expr_alias_and_equal_to_functions() -> None:
    e = F.expr("lower(tags) || '!' AS shout")
    assert e.output_name == "shout"
    env = ed.StreamEnvironment()
    source = env.from_collection(ROWS)
    ours = source.select("n", e, F.expr("size(split(tags, ','))").alias("parts")).collect()
    built = source.select(
        "n",
        F.concat(F.lower("tags"), F.lit("!")).alias("shout"),
        F.size(F.split("tags", ",")).alias("parts"),
    ).collect()
    env.execute()
    assert ours.to_pylist() == built.to_pylist()
