"""What the tests of Spark's window spelling in SQL share (test_spark_window_results.py,
test_spark_window_time.py): the two windows, their DuckDB twins, the per-key counts the
queries start from, and the comparison with PySpark's batch run of a query."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import run, same_rows, timed

TUMBLE = "window(t, '10 seconds')"
HOP = "window(t, '15 seconds', '5 seconds')"

each_window = pytest.mark.parametrize("window", [TUMBLE, HOP], ids=["tumble", "hop"])
"""Parametrizes a test over the two windows, as ``window``."""

# Spark's windows in DuckDB: a row at t ms is in the tumbling window starting at
# t - t % 10000, and in the 3 sliding windows starting at t - t % 5000 - i * 5000.
DUCK_WINDOWS = {
    TUMBLE: "SELECT *, t - t % 10000 AS ws, t - t % 10000 + 10000 AS we FROM events",
    HOP: """SELECT *, t - t % 5000 - i * 5000 AS ws, t - t % 5000 - i * 5000 + 15000 AS we
            FROM events, range(0, 3) AS r(i)""",
}


SESSION_COUNTS = (
    "SELECT k, session_window, count(*) AS n FROM s GROUP BY k, session_window(t, '3 seconds')"
)
"""The rows per key and session of the view ``s`` (``conftest.session_view``, gap 3 s)."""


def counts(window: str, where: str = "TRUE") -> str:
    """The rows per key and window of ``window`` (Spark's spelling)."""
    return f"SELECT window, k, count(*) AS c FROM events WHERE {where} GROUP BY {window}, k"


def duck_counts(window: str, where: str = "TRUE") -> str:
    """:func:`counts` in DuckDB, the window as its bounds ``ws``, ``we``."""
    rows = DUCK_WINDOWS[window]
    return f"SELECT ws, we, k, count(*) AS c FROM ({rows}) WHERE {where} GROUP BY ALL"


def spark_rows(spark: Any, events: pa.Table, query: str) -> list[dict[str, Any]]:
    """``query`` (``{t}``: the time column, ``{ms}``: its conversion to milliseconds)
    run by Spark as a batch over ``events``, its time ``t`` as a timestamp ``ts``."""
    frame = spark.createDataFrame(events.to_pandas())
    frame.selectExpr("*", "timestamp_millis(t) AS ts").createOrReplaceTempView("events")
    return [row.asDict() for row in spark.sql(query.format(t="ts", ms="unix_millis")).collect()]


def assert_as_spark(
    spark: Any, env: ed.StreamEnvironment, events: pa.Table, query: str, theirs: str
) -> None:
    """Asserts that ``query`` over ``events`` (:func:`timed`, ``{t}`` the time column
    ``t``, ``{ms}`` nothing) gives the rows, not none, of Spark's run of ``theirs`` (see
    :func:`spark_rows`; the same query but where Spark's SQL takes another spelling)."""
    want = spark_rows(spark, events, theirs)
    assert want
    timed(env, events)
    same_rows(run(env, env.sql(query.format(t="t", ms=""))), want)
