"""The JSON functions of ``eddyline.functions`` against PySpark itself
(``local[2]``, non-ANSI): ``get_json_object``, ``from_json`` with a DDL
schema and ``to_json``, over nested values, numbers Jackson re-spells,
escapes, unicode, type mismatches, malformed JSON and nulls."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from .conftest import NON_ANSI_UTC, eddyline_cases, spark_settings

JSON = [
    '{"a": 1.50, "b": "x", "c": {"z": 1, "a": [1, 2.0, "s", null]}, "d": null}',
    '{"a": "x", "b": 2, "c": {"a": [true, {"k": "v"}]}}',
    "{bad",
    None,
    '{"a": 1} trailing',
    '[{"a": 1}, {"a": 2}]',
    '{"a": 3000000000, "b": true, "c": {"a": []}}',
    '{"a": 1e2, "b": 1.5, "c": {"z": 1E-7}}',
    '{"b": "tab\\there \\u00e9\\ud83d\\ude00 \\"q\\"", "a": -0}',
    '{"a": 7, "a": 8, "b": {"n": "nested"}, "t": "2024-02-29 10:00:00", "dt": "2024-02-29"}',
    "",
    '{"c": {"a": [1, 2, 3]}, "b": ""}',
]
ROWS = [
    {
        "id": i,
        "j": j,
        "st": None
        if i == 3
        else {
            "x": [5, None, -3, 0, 2**40, None, 7, 1, 2, 3, 4, 5][i],
            "y": ["a", 'b\n"q"', None, "", "ü", "日本", "x", "y", "z", "w", "v", "u"][i],
            "f": [
                1.0,
                1e20,
                float("nan"),
                None,
                1e-5,
                123456789.0,
                -0.5,
                float("inf"),
                0.1,
                2.5,
                3.0,
                4.0,
            ][i],
            "t": dt.datetime(2024, 2, 29, 12, 0, 0, 123456, tzinfo=dt.UTC) if i % 2 else None,
        },
    }
    for i, j in enumerate(JSON)
]
ST = pa.struct(
    [
        ("x", pa.int64()),
        ("y", pa.string()),
        ("f", pa.float64()),
        ("t", pa.timestamp("us", tz="UTC")),
    ]
)
SCHEMA = pa.schema([("id", pa.int64()), ("j", pa.string()), ("st", ST)])

Case = Callable[[Any], Any]
DDL = "a INT, b STRING"

CASES: dict[str, Case] = {
    "get_a": lambda F: F.get_json_object("j", "$.a"),
    "get_b": lambda F: F.get_json_object("j", "$.b"),
    "get_c": lambda F: F.get_json_object("j", "$.c"),
    "get_ca1": lambda F: F.get_json_object("j", "$.c.a[1]"),
    "get_bracket": lambda F: F.get_json_object("j", "$['c']['z']"),
    "get_root": lambda F: F.get_json_object("j", "$"),
    "get_index": lambda F: F.get_json_object("j", "$[1].a"),
    "get_d": lambda F: F.get_json_object("j", "$.d"),
    "get_bad_path": lambda F: F.get_json_object("j", "a.b"),
    "from_json": lambda F: F.from_json("j", DDL),
    "from_json_wide": lambda F: F.from_json("j", "a DOUBLE, b BOOLEAN, c STRUCT<z: DOUBLE>"),
    "from_json_long": lambda F: F.from_json("j", "a BIGINT, b STRING, c STRING"),
    "from_json_array": lambda F: F.from_json("j", "c STRUCT<a: ARRAY<INT>>"),
    "from_json_time": lambda F: F.from_json("j", "t TIMESTAMP, dt DATE"),
    "to_json": lambda F: F.to_json("st"),
    "roundtrip": lambda F: F.to_json(F.from_json("j", DDL)),
}


def _plain(value: Any) -> Any:
    """Spark's Rows and eddyline's dicts as plain dicts and lists."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None) if value.tzinfo is None else value
    return value


KNOWN_DIFFERENCES: dict[str, list[tuple[int, Any, Any]]] = {}


@pytest.fixture(scope="module")
def results(spark: Any) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    from pyspark.sql import functions as SF

    ours = eddyline_cases(ROWS, SCHEMA, CASES)

    with spark_settings(spark, NON_ANSI_UTC):
        frame = spark.createDataFrame(pa.Table.from_pylist(ROWS, schema=SCHEMA))
        theirs = [
            r.asDict()
            for r in frame.select(
                "id", *(case(SF).alias(name) for name, case in CASES.items())
            ).collect()
        ]
    theirs.sort(key=lambda r: r["id"])
    by_case = lambda rows: {n: [_plain(r[n]) for r in rows] for n in CASES}  # noqa: E731
    return by_case(ours), by_case(theirs)


def _timestamps_as_micros(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _timestamps_as_micros(v) for k, v in value.items()}
    if isinstance(value, dt.datetime):
        epoch = dt.datetime(1970, 1, 1, tzinfo=value.tzinfo)
        return (value - epoch) // dt.timedelta(microseconds=1)
    return value


@pytest.mark.parametrize("name", list(CASES))
def test_same_as_spark(
    name: str, results: tuple[dict[str, list[Any]], dict[str, list[Any]]]
) -> None:
    ours, theirs = results
    differ = [
        (i, a, b)
        for i, (a, b) in enumerate(zip(ours[name], theirs[name], strict=True))
        if _timestamps_as_micros(a) != _timestamps_as_micros(b)
    ]
    assert differ == KNOWN_DIFFERENCES.get(name, []), (
        f"(id, eddyline, spark) where they differ: {differ}"
    )
