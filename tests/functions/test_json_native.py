"""The JSON functions of ``eddyline.functions`` run natively: schemas given
as DDL, pyarrow schemas, struct types or field lists, and the errors of a
bad schema or argument at graph build."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F

from .conftest import assert_fails_at_build

ROWS = [
    {"id": 0, "j": '{"user": {"id": 7, "tags": ["a", "b"]}, "ms": 1.5}'},
    {"id": 1, "j": None},
    {"id": 2, "j": "{bad"},
]
SCHEMA = pa.schema([("id", pa.int64()), ("j", pa.string())])
USER = pa.struct([("id", pa.int32()), ("tags", pa.list_(pa.string()))])


def _select(**named: ed.Expr) -> dict[str, list[Any]]:
    env = ed.StreamEnvironment()
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    out = source.select("id", *(e.alias(n) for n, e in named.items())).collect()
    env.execute()
    rows = sorted(out.to_pylist(), key=lambda r: r["id"])
    return {n: [r[n] for r in rows] for n in named}


@pytest.mark.parametrize(
    "schema",
    [
        "user STRUCT<id: INT, tags: ARRAY<STRING>>, ms DOUBLE",
        pa.schema([("user", USER), ("ms", pa.float64())]),
        pa.struct([("user", USER), ("ms", pa.float64())]),
        [("user", USER), pa.field("ms", pa.float64())],
    ],
)
def test_from_json_schemas(schema: Any) -> None:
    got = _select(v=F.from_json("j", schema))
    assert got["v"] == [
        {"user": {"id": 7, "tags": ["a", "b"]}, "ms": 1.5},
        None,
        {"user": None, "ms": None},
    ]


def test_get_json_object_and_to_json() -> None:
    got = _select(
        uid=F.get_json_object("j", "$.user.id"),
        tag=F.get_json_object("j", "$.user.tags[1]"),
        back=F.to_json(F.from_json("j", "ms DOUBLE, user STRUCT<tags: ARRAY<STRING>>")),
    )
    assert got == {
        "uid": ["7", None, None],
        "tag": ["b", None, None],
        "back": ['{"ms":1.5,"user":{"tags":["a","b"]}}', None, "{}"],
    }


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        (lambda: F.from_json("j", "a"), "cannot read the schema 'a'"),
        (lambda: F.from_json("j", "a BINARY"), "does not read type"),
        (lambda: F.to_json("j"), "to_json takes a struct, an array or a map"),
    ],
)
def test_bad_schemas_and_arguments_fail_at_build(expr: Any, needle: str) -> None:
    assert_fails_at_build(ROWS, SCHEMA, expr(), needle)


def test_from_json_refuses_a_bad_schema_object() -> None:
    with pytest.raises(ed.SchemaError, match="takes a schema"):
        F.from_json("j", 42)
    with pytest.raises(ed.SchemaError, match="takes a JSONPath"):
        F.get_json_object("j", F.col("j"))  # type: ignore[arg-type]
    with pytest.raises(ed.SchemaError, match="cannot read JSON into type"):
        F.from_json("j", pa.schema([("b", pa.binary())]))
