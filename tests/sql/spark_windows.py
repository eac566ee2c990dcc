"""What the tests of Spark's window spelling in SQL share (test_spark_window_results.py,
test_spark_window_time.py): the two windows, their DuckDB twins, the timed view of the
events, the per-key counts the queries start from, and PySpark's batch run of a query."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

TUMBLE = "window(t, '10 seconds')"
HOP = "window(t, '15 seconds', '5 seconds')"

# Spark's windows in DuckDB: a row at t ms is in the tumbling window starting at
# t - t % 10000, and in the 3 sliding windows starting at t - t % 5000 - i * 5000.
DUCK_WINDOWS = {
    TUMBLE: "SELECT *, t - t % 10000 AS ws, t - t % 10000 + 10000 AS we FROM events",
    HOP: """SELECT *, t - t % 5000 - i * 5000 AS ws, t - t % 5000 - i * 5000 + 15000 AS we
            FROM events, range(0, 3) AS r(i)""",
}


def timed(env: ed.StreamEnvironment, events: pa.Table) -> None:
    """``events`` as view ``events``, timed by ``t`` (3 s out of order)."""
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )


def counts(window: str, where: str = "TRUE") -> str:
    """The rows per key and window of ``window`` (Spark's spelling)."""
    return f"SELECT window, k, count(*) AS c FROM events WHERE {where} GROUP BY {window}, k"


def duck_counts(window: str, where: str = "TRUE") -> str:
    """:func:`counts` in DuckDB, the window as its bounds ``ws``, ``we``."""
    rows = DUCK_WINDOWS[window]
    return f"SELECT ws, we, k, count(*) AS c FROM ({rows}) WHERE {where} GROUP BY ALL"


def spark_session(app: str) -> Iterator[Any]:
    """A local[2] Spark session (batch SQL over a test's rows), times in UTC: the body
    of a module's ``spark`` fixture."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def spark_rows(spark: Any, events: pa.Table, query: str) -> list[dict[str, Any]]:
    """``query`` (``{t}``: the time column, ``{ms}``: its conversion to milliseconds)
    run by Spark as a batch over ``events``, its time ``t`` as a timestamp ``ts``."""
    frame = spark.createDataFrame(events.to_pandas())
    frame.selectExpr("*", "timestamp_millis(t) AS ts").createOrReplaceTempView("events")
    return [row.asDict() for row in spark.sql(query.format(t="ts", ms="unix_millis")).collect()]
