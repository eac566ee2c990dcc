"""The differential tests share the Spark suite's one local[2] session; the
helpers the function tests share (eddyline's side of a differential test,
Spark settings for a block, an expression refused when the job is built)."""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as EF
from spark.conftest import spark  # noqa: F401  (the session fixture, reused)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.join(os.path.dirname(__file__), "test_functions_spark")
    for item in items:
        path = str(item.fspath)
        # The differential tests: test_functions_spark*, test_time_spark,
        # test_json_spark.
        if path.startswith(here) or path.endswith("_spark.py"):
            item.add_marker(pytest.mark.spark)


# eddyline is Spark's non-ANSI mode (docs/DESIGN.md "Expressions"); Spark 4
# defaults to ANSI, so the comparisons run with it off, in UTC.
NON_ANSI_UTC = {"spark.sql.ansi.enabled": "false", "spark.sql.session.timeZone": "UTC"}


def eddyline_cases(
    rows: list[dict[str, Any]], schema: pa.Schema, cases: Mapping[str, Callable[[Any], Any]]
) -> list[dict[str, Any]]:
    """Runs every case (an expression written over a functions module, here
    ``eddyline.functions``) over ``rows``: one row per input row with its
    ``id`` and a column per case, sorted by ``id``."""
    env = ed.StreamEnvironment()
    source = env.from_arrow(pa.Table.from_pylist(rows, schema=schema))
    out = source.select("id", *(case(EF).alias(name) for name, case in cases.items())).collect()
    env.execute()
    return sorted(out.to_pylist(), key=lambda r: r["id"])


@contextmanager
def spark_settings(session: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Spark SQL ``settings`` for the block; the previous values after it."""
    saved = {key: session.conf.get(key) for key in settings}
    for key, value in settings.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            session.conf.set(key, value)


def assert_fails_at_build(
    rows: list[dict[str, Any]], schema: pa.Schema, expr: Any, needle: str
) -> None:
    """Selecting ``expr`` over ``rows`` raises a SchemaError matching
    ``needle`` while the job is built, naming the select."""
    env = ed.StreamEnvironment()
    source = env.from_arrow(pa.Table.from_pylist(rows, schema=schema))
    with pytest.raises(ed.SchemaError, match=needle) as info:
        source.select(expr.alias("y"))
    assert info.value.operator == "select_1"


def _micros(value: Any) -> Any:
    """Timestamps (and the ``window`` structs holding them) as epoch microseconds,
    so eddyline's and Spark's rows compare whatever their time zone handling."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(value, dict):
        return {k: _micros(v) for k, v in value.items()}
    return value


def row_multiset(rows: list[dict[str, Any]]) -> Counter[str]:
    """``rows`` as a multiset, timestamps as epoch microseconds."""
    return Counter(repr(sorted(_micros(r).items())) for r in rows)
