"""The time functions of ``eddyline.functions`` run natively, checked
exactly, and the errors of a bad pattern, unit or argument at graph build."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F
from eddyline import _core

from .conftest import assert_fails_at_build

ROWS = [
    {
        "id": 0,
        "s": "2024-02-29 23:59:59",
        "ts": dt.datetime(2024, 2, 29, 23, 59, 59, tzinfo=dt.UTC),
    },
    {"id": 1, "s": None, "ts": None},
    {"id": 2, "s": "junk", "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=dt.UTC)},
]
SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("ts", pa.timestamp("ns"))])


def _select(**named: ed.Expr) -> dict[str, list[Any]]:
    env = ed.StreamEnvironment()
    source = env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    out = source.select("id", *(e.alias(n) for n, e in named.items())).collect()
    env.execute()
    rows = sorted(out.to_pylist(), key=lambda r: r["id"])
    return {n: [r[n] for r in rows] for n in named}


def test_time_functions_over_nanosecond_timestamps_and_strings() -> None:
    got = _select(
        parsed=F.to_timestamp("s", "yyyy-MM-dd HH:mm:ss"),
        secs=F.unix_timestamp("ts"),
        text=F.date_format("ts", "yyyy-MM-dd HH:mm:ss.SSS"),
        day=F.to_date("s"),
        dow=F.dayofweek("ts"),
        hour=F.hour("s"),
        trunc=F.date_trunc("hour", "ts"),
    )
    leap = dt.datetime(2024, 2, 29, 23, 59, 59, tzinfo=dt.UTC)
    assert got == {
        "parsed": [leap, None, None],
        "secs": [1709251199, None, 0],
        "text": ["2024-02-29 23:59:59.000", None, "1969-12-31 23:59:59.500"],
        "day": [dt.date(2024, 2, 29), None, None],
        "dow": [5, None, 4],
        "hour": [23, None, None],
        "trunc": [
            dt.datetime(2024, 2, 29, 23, tzinfo=dt.UTC),
            None,
            dt.datetime(1969, 12, 31, 23, tzinfo=dt.UTC),
        ],
    }


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        (lambda: F.to_timestamp("s", "YYYY-ww"), "unsupported letter 'Y'"),
        (lambda: F.date_format("ts", "yyyy[-MM]"), "optional sections"),
        (lambda: F.from_unixtime("s", "'unclosed"), "function 'from_unixtime'"),
        (
            lambda: _core.Expr._call("date_format", [F.col("ts"), F.col("s")]),
            "format of date_format must be a literal string",
        ),
        (lambda: F.year("id"), "function 'year'.*column 'id'"),
    ],
)
def test_bad_patterns_and_arguments_fail_at_build(expr: Any, needle: str) -> None:
    assert_fails_at_build(ROWS, SCHEMA, expr(), needle)


def test_unix_timestamp_needs_a_column() -> None:
    with pytest.raises(ed.SchemaError, match="not deterministic"):
        F.unix_timestamp()
    with pytest.raises(ed.SchemaError, match="takes a Spark datetime pattern") as info:
        F.date_format("ts", F.col("s"))  # type: ignore[arg-type]
    assert info.value.operator == "date_format"
    assert not hasattr(F, "current_timestamp")
