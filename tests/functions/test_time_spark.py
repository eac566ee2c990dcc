"""The time functions of ``eddyline.functions`` against PySpark itself
(``local[2]``, session time zone UTC, non-ANSI): the same expressions,
written once for both modules, over timestamps around DST changes (strings
with offsets and region ids), leap days, epoch 0, negative epochs, nulls and
strings that do not parse. Timestamps are compared as microseconds since the
epoch, so neither side's Python conversion of time zones takes part."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from .conftest import NON_ANSI_UTC, eddyline_cases, spark_settings

UTC = dt.UTC


def _at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


# s: strings parsed like a cast; p: strings of the pattern P; e: seconds
# since the epoch; ts: timestamps (UTC).
P = "dd/MM/yyyy HH:mm:ss XXX"
ROWS: list[dict[str, Any]] = [
    {
        "id": 0,
        "s": "2024-03-10 02:30:00",
        "p": "10/03/2024 02:30:00 -05:00",
        "e": 0,
        "ts": _at("1970-01-01 00:00:00"),
    },
    {
        "id": 1,
        "s": "2024-03-10 02:30:00-05:00",
        "p": "29/02/2024 23:59:59 +01:00",
        "e": -1,
        "ts": _at("1969-12-31 23:59:59.999999"),
    },
    {
        "id": 2,
        "s": "2024-11-03T01:30:00.123456+01:00",
        "p": "31/12/1969 23:59:59 Z",
        "e": 1709951400,
        "ts": _at("2024-02-29 12:34:56.789"),
    },
    {
        "id": 3,
        "s": "2024-02-29 23:59:59.999999",
        "p": "1/1/2024 00:00:00 Z",
        "e": 951782400,
        "ts": _at("2024-03-10 07:00:00"),
    },
    {
        "id": 4,
        "s": "1970-01-01 00:00:00",
        "p": "29/02/2023 00:00:00 Z",
        "e": None,
        "ts": _at("2024-11-03 06:00:00"),
    },
    {"id": 5, "s": "1969-12-31 23:59:59.5", "p": None, "e": -3155760000, "ts": None},
    {
        "id": 6,
        "s": None,
        "p": "not a time",
        "e": 253402300799,
        "ts": _at("1900-01-01 00:00:00"),
    },
    {
        "id": 7,
        "s": "not a time",
        "p": "10/03/2024 02:30:00 +0100",
        "e": 1,
        "ts": _at("2100-12-31 23:59:59.5"),
    },
    {
        "id": 8,
        "s": "2023-02-29 10:00:00",
        "p": "27/10/2024 02:30:00 +02:00",
        "e": 86399,
        "ts": _at("1999-12-31 23:59:59"),
    },
    {"id": 9, "s": "2024-3-1 1:2:3", "p": "", "e": -86401, "ts": _at("2024-12-30 00:00:00")},
    {
        "id": 10,
        "s": "2024-10-27 02:30:00 Europe/Paris",
        "p": "29/02/2024 23:59:59 +01:00 ",
        "e": 1700000000,
        "ts": _at("2024-01-01 00:00:00"),
    },
    {
        "id": 11,
        "s": "2024-03-31T02:30:00 Europe/Paris",
        "p": "05/01/2024 12:00:00 +05:30",
        "e": 4102444800,
        "ts": _at("2024-06-15 12:00:00"),
    },
    {"id": 12, "s": "  2024-01-01  ", "p": "05/01/2024 12:00:00 Z", "e": 0, "ts": None},
    {
        "id": 13,
        "s": "2024-12-31 23:59:59Z",
        "p": "31/12/2024 23:59:59 -12:00",
        "e": 59,
        "ts": _at("2024-03-31 01:00:00"),
    },
    {"id": 14, "s": "2024-02-29", "p": "2024-02-29", "e": 951868800, "ts": _at("2023-01-01")},
]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("p", pa.string()),
        ("e", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)

Case = Callable[[Any], Any]
FULL = "yyyy-MM-dd HH:mm:ss.SSSSSS"

# name -> the expression, written against a functions module F.
CASES: dict[str, Case] = {
    "to_timestamp": lambda F: F.to_timestamp("s"),
    "to_timestamp_fmt": lambda F: F.to_timestamp("p", P),
    "to_timestamp_ts": lambda F: F.to_timestamp("ts"),
    "to_date": lambda F: F.to_date("s"),
    "to_date_fmt": lambda F: F.to_date("p", P),
    "to_date_ts": lambda F: F.to_date("ts"),
    "unix_timestamp": lambda F: F.unix_timestamp("s"),
    "unix_timestamp_ts": lambda F: F.unix_timestamp("ts"),
    "unix_timestamp_fmt": lambda F: F.unix_timestamp("p", P),
    "from_unixtime": lambda F: F.from_unixtime("e"),
    "from_unixtime_fmt": lambda F: F.from_unixtime("e", "yyyy-MM-dd'T'HH:mm:ss.SSS EEE MMM a h D"),
    "from_unixtime_y": lambda F: F.from_unixtime("e", "y yy yyyy MMMM EEEE k K"),
    "date_format": lambda F: F.date_format("ts", FULL),
    "date_format_words": lambda F: F.date_format("ts", "EEEE, d MMMM yy h:mm a XXX xx Z"),
    "date_format_str": lambda F: F.date_format("s", "yyyyMMdd HHmmss"),
    "trunc_year": lambda F: F.date_trunc("year", "ts"),
    "trunc_quarter": lambda F: F.date_trunc("quarter", "ts"),
    "trunc_month": lambda F: F.date_trunc("MM", "ts"),
    "trunc_week": lambda F: F.date_trunc("week", "ts"),
    "trunc_day": lambda F: F.date_trunc("dd", "ts"),
    "trunc_hour": lambda F: F.date_trunc("hour", "ts"),
    "trunc_minute": lambda F: F.date_trunc("minute", "ts"),
    "trunc_second": lambda F: F.date_trunc("second", "ts"),
    "trunc_ms": lambda F: F.date_trunc("millisecond", "ts"),
    "trunc_bad": lambda F: F.date_trunc("fortnight", "ts"),
    "trunc_str": lambda F: F.date_trunc("mon", "s"),
    "year": lambda F: F.year("ts"),
    "quarter": lambda F: F.quarter("ts"),
    "month": lambda F: F.month("ts"),
    "dayofmonth": lambda F: F.dayofmonth("ts"),
    "dayofyear": lambda F: F.dayofyear("ts"),
    "dayofweek": lambda F: F.dayofweek("ts"),
    "hour": lambda F: F.hour("ts"),
    "minute": lambda F: F.minute("ts"),
    "second": lambda F: F.second("ts"),
    "year_str": lambda F: F.year("s"),
    "dayofweek_str": lambda F: F.dayofweek("s"),
    "hour_str": lambda F: F.hour("s"),
    "second_str": lambda F: F.second("s"),
}

# Cases whose values are timestamps: compared as microseconds.
TIMESTAMPS = {"to_timestamp", "to_timestamp_fmt", "to_timestamp_ts"} | {
    name for name in CASES if name.startswith("trunc_")
}

# Where eddyline differs from Spark, by case: (id, eddyline, Spark); each is
# listed in docs/API.md "Functions". A fix makes its case fail here until the
# entry goes.
KNOWN_DIFFERENCES: dict[str, list[tuple[int, Any, Any]]] = {}

EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    return value


@pytest.fixture(scope="module")
def results(spark: Any) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """Every case's column, by id, from eddyline and from Spark."""
    from pyspark.sql import functions as SF
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    ours = eddyline_cases(ROWS, SCHEMA, CASES)
    ours = [{k: _micros(v) if k in TIMESTAMPS else v for k, v in r.items()} for r in ours]

    spark_schema = StructType(
        [
            StructField("id", LongType()),
            StructField("s", StringType()),
            StructField("p", StringType()),
            StructField("e", LongType()),
            StructField("ts", TimestampType()),
        ]
    )
    with spark_settings(spark, NON_ANSI_UTC):
        frame = spark.createDataFrame([tuple(r.values()) for r in ROWS], spark_schema)
        columns = [
            (SF.unix_micros(case(SF)) if name in TIMESTAMPS else case(SF)).alias(name)
            for name, case in CASES.items()
        ]
        theirs = [r.asDict() for r in frame.select("id", *columns).collect()]
    theirs.sort(key=lambda r: r["id"])
    by_case = lambda rows: {name: [r[name] for r in rows] for name in CASES}  # noqa: E731
    return by_case(ours), by_case(theirs)


@pytest.mark.parametrize("name", list(CASES))
def test_same_as_spark(
    name: str, results: tuple[dict[str, list[Any]], dict[str, list[Any]]]
) -> None:
    ours, theirs = results
    differ = [
        (i, a, b)
        for i, (a, b) in enumerate(zip(ours[name], theirs[name], strict=True))
        if not (a == b and type(a) is type(b))
    ]
    assert differ == KNOWN_DIFFERENCES.get(name, []), (
        f"(id, eddyline, spark) where they differ: {differ}"
    )
