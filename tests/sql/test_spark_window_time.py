"""env.sql with Spark's ``window_time(window)`` and regroups by a window's start
(docs/API.md "SQL", Spark's spelling): ``window_time`` is the window's end - 1 ms
for int64 milliseconds (Spark's end - 1 µs for its microsecond timestamps), and
times the rows where nothing else of the window does, so window results chain
on it (``GROUP BY window(window_time(window), ...)``, as Spark's docs show),
regroup on it and bound an interval join by it. A ``GROUP BY window.start`` (or
``window_start``) of tumbling or sliding window results closes each group on
the watermark, one final row per group. Exact against DuckDB at parallelism 1
and 3 in batches of 32 (a running GROUP BY would emit updates, and differ), and
against PySpark's batch run of the same SQL."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import (
    SESSION_GAP_MS,
    assert_refused,
    assert_timed_as_duck,
    duck,
    run,
    same_rows,
    session_view,
    sessions,
    timed,
)
from .spark_windows import (
    DUCK_WINDOWS,
    HOP,
    SESSION_COUNTS,
    TUMBLE,
    assert_as_spark,
    counts,
    duck_counts,
    each_window,
)


@each_window
def test_window_time_is_each_windows_last_millisecond(
    env: ed.StreamEnvironment, events: pa.Table, window: str
) -> None:
    query = f"SELECT window_time(window) AS wt, window.end AS we, k, c FROM ({counts(window)}) AS x"
    twin = f"SELECT we - 1 AS wt, we, k, c FROM ({duck_counts(window)})"
    assert_timed_as_duck(env, events, query, twin)


@each_window
def test_windows_chain_on_window_time_as_in_sparks_docs(
    env: ed.StreamEnvironment, events: pa.Table, window: str
) -> None:
    """``window(window_time(window), ...)``: the new ``window`` column replaces the
    one it reads. A 10 s window ending at 30 s is in the 30 s window [0, 30 s)."""
    query = f"""
        SELECT window.start AS ws, window.end AS we, sum(c) AS total, count(*) AS n
        FROM ({counts(window)}) AS x
        GROUP BY window(window_time(window), '30 seconds')
    """
    twin = f"""SELECT (we - 1) - (we - 1) % 30000 AS ws, (we - 1) - (we - 1) % 30000 + 30000 AS we,
                   sum(c) AS total, count(*) AS n
            FROM ({duck_counts(window)}) GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_window_time_selected_alone_times_the_rows(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """A subquery keeping only ``window_time(window)`` of the window: a GROUP BY of it
    closes each group once, and a window over it chains (a renamed key as well)."""
    inner = f"SELECT window_time(window) AS wt, k, c FROM ({counts(HOP)}) AS x"
    query = f"""
        SELECT wt, max(c) AS top, count(*) AS keys FROM ({inner}) AS y GROUP BY wt
    """
    twin = f"""SELECT we - 1 AS wt, max(c) AS top, count(*) AS keys
            FROM ({duck_counts(HOP)}) GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_a_window_over_a_selected_window_time(env: ed.StreamEnvironment, events: pa.Table) -> None:
    inner = f"SELECT k, window_time(window) AS wt, c FROM ({counts(TUMBLE, 'v > 0')}) AS x"
    query = f"""
        SELECT window.start AS ws, k, sum(c) AS total
        FROM ({inner}) AS y GROUP BY window(wt, '20 seconds', '10 seconds'), k
    """
    twin = f"""SELECT ws2 AS ws, k, sum(c) AS total FROM (
                SELECT (we - 1) - (we - 1) % 10000 - i * 10000 AS ws2, k, c
                FROM ({duck_counts(TUMBLE, "v > 0")}), range(0, 2) AS r(i))
            GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_window_time_of_sessions_chains_a_window(env: ed.StreamEnvironment) -> None:
    rows = session_view(env)
    query = f"""
        SELECT window.start AS ws, sum(n) AS n, count(*) AS sessions
        FROM ({SESSION_COUNTS}) AS x
        GROUP BY window(window_time(session_window), '10 seconds')
    """
    groups: dict[int, list[int]] = defaultdict(list)
    for _, session in sessions(rows):
        last = session[-1]["t"] + SESSION_GAP_MS - 1
        groups[last - last % 10_000].append(len(session))
    want = [{"ws": ws, "n": sum(ns), "sessions": len(ns)} for ws, ns in groups.items()]
    same_rows(run(env, env.sql(query)), want)


def test_window_time_bounds_an_interval_join(env: ed.StreamEnvironment, events: pa.Table) -> None:
    """Each row with the max of its tumbling window, the join bounded by the
    window's time (``t`` in [wt - 9999, wt] is in the window ending at wt + 1)."""
    query = f"""
        SELECT e.k, e.v, e.t, m.wt
        FROM events AS e
        JOIN (SELECT window_time(window) AS wt, max(v) AS top
              FROM events GROUP BY {TUMBLE}) AS m
        ON e.v = m.top AND e.t BETWEEN m.wt - 9999 AND m.wt
    """
    twin = f"""SELECT e.k, e.v, e.t, m.wt FROM events AS e
            JOIN (SELECT we - 1 AS wt, max(v) AS top FROM ({DUCK_WINDOWS[TUMBLE]})
                  GROUP BY we) AS m
            ON e.v = m.top AND e.t BETWEEN m.wt - 9999 AND m.wt"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert want


@each_window
def test_regroup_by_window_start_alone_emits_each_group_once(
    env: ed.StreamEnvironment, events: pa.Table, window: str
) -> None:
    """``window.start`` is the end minus the size: its groups close on the watermark
    like the end's (as a running GROUP BY, each batch would emit an update)."""
    query = f"""
        SELECT window.start AS ws, max(c) AS top, count(*) AS keys
        FROM ({counts(window)}) AS x GROUP BY window.start
    """
    twin = f"""SELECT ws, max(c) AS top, count(*) AS keys FROM ({duck_counts(window)})
            GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_regroup_by_a_selected_window_start_and_a_key(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    inner = f"SELECT window, window.start AS ws, k < 'k3' AS low, c FROM ({counts(HOP)}) AS x"
    query = f"SELECT ws, low, sum(c) AS total FROM ({inner}) AS y GROUP BY ws, low"
    twin = f"""SELECT ws, k < 'k3' AS low, sum(c) AS total FROM ({duck_counts(HOP)})
            GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_tvf_regroup_by_window_start_alone_emits_each_group_once(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    inner = """
        SELECT window_start, window_end, k, count(*) AS c
        FROM TABLE(HOP(TABLE events, DESCRIPTOR(t), INTERVAL '5' SECOND, INTERVAL '15' SECOND))
        GROUP BY window_start, window_end, k
    """
    query = f"""
        SELECT window_start, max(c) AS top, count(*) AS keys FROM ({inner}) AS x
        GROUP BY window_start
    """
    twin = f"""SELECT ws AS window_start, max(c) AS top, count(*) AS keys
            FROM ({duck_counts(HOP)}) GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_a_group_by_of_a_session_start_alone_is_refused(env: ed.StreamEnvironment) -> None:
    session_view(env)
    query = f"""
        SELECT session_window.start AS ws, count(*) AS keys
        FROM ({SESSION_COUNTS}) AS x
        GROUP BY session_window.start
    """
    assert_refused(env, query, "GROUP BY", r"a session window's start.*no fixed offset")


def test_window_time_of_what_is_not_a_window_is_refused(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    timed(env, events)
    assert_refused(env, "SELECT window_time(k) AS w FROM events", "function", "takes a window")


def test_a_window_over_window_time_of_regrouped_results_is_refused(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """A regrouped window's rows come after the watermark passed their end - 1 ms:
    window_time cannot time them."""
    timed(env, events)
    regrouped = f"SELECT window, max(c) AS top FROM ({counts(TUMBLE)}) AS x GROUP BY window"
    query = f"""
        SELECT window.start AS ws, max(top) AS top FROM ({regrouped}) AS y
        GROUP BY window(window_time(window), '30 seconds')
    """
    assert_refused(env, query, "window", r"window\(window_time\(w\), ...\)")


# -- Spark itself as the reference ------------------------------------------------


SPARK_QUERIES = {
    "window-time": """
        SELECT {ms}(window_time(window)) AS wt, k, c
        FROM (SELECT window, k, count(*) AS c FROM events
              GROUP BY window({t}, '15 seconds', '5 seconds'), k) AS x
    """,
    "chain-on-window-time": """
        SELECT {ms}(window.start) AS ws, {ms}(window.end) AS we, sum(c) AS total,
               count(*) AS n
        FROM (SELECT window, k, count(*) AS c FROM events
              GROUP BY window({t}, '10 seconds'), k) AS x
        GROUP BY window(window_time(window), '30 seconds')
    """,
    # The same in the spelling Spark's SQL takes: there, `window` in the SELECT
    # above names the input's column (not grouped: refused).
    "chain-on-a-selected-window-time": """
        SELECT {ms}(window.start) AS ws, {ms}(window.end) AS we, sum(c) AS total,
               count(*) AS n
        FROM (SELECT window_time(window) AS wt, c
              FROM (SELECT window, k, count(*) AS c FROM events
                    GROUP BY window({t}, '10 seconds'), k) AS x) AS y
        GROUP BY window(wt, '30 seconds')
    """,
    "sessions-chain-on-window-time": """
        SELECT {ms}(window.start) AS ws, sum(c) AS total, count(*) AS n
        FROM (SELECT k, session_window, count(*) AS c FROM events
              GROUP BY k, session_window({t}, '2 seconds')) AS x
        GROUP BY window(window_time(session_window), '20 seconds')
    """,
    "regroup-by-window-start": """
        SELECT {ms}(window.start) AS ws, max(c) AS top, count(*) AS keys
        FROM (SELECT window, k, count(*) AS c FROM events
              GROUP BY window({t}, '15 seconds', '5 seconds'), k) AS x
        GROUP BY window.start
    """,
}

SPARK_SPELLING = {"chain-on-window-time": "chain-on-a-selected-window-time"}
"""Queries Spark's SQL refuses, compared with the query of the same rows it takes."""


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(SPARK_QUERIES))
def test_window_time_and_window_start_match_spark(
    spark: Any, events: pa.Table, env: ed.StreamEnvironment, name: str
) -> None:
    """Spark's window_time is its end - 1 µs: as milliseconds, our end - 1."""
    theirs = SPARK_QUERIES[SPARK_SPELLING.get(name, name)]
    assert_as_spark(spark, env, events, SPARK_QUERIES[name], theirs)


@pytest.mark.spark
def test_window_time_of_microsecond_timestamps_is_sparks(
    spark: Any, events: pa.Table, env: ed.StreamEnvironment
) -> None:
    """A view timed by Spark's own type, timestamps of microseconds in UTC: the
    same window_time, end - 1 µs, to the microsecond."""
    micros = pa.array([t * 1000 for t in events.column("t").to_pylist()], pa.int64())
    stamped = events.append_column("ts", micros.cast(pa.timestamp("us", tz="UTC")))
    query = """
        SELECT window_time(window) AS wt, k, c
        FROM (SELECT window, k, count(*) AS c FROM events GROUP BY window(ts, '10 seconds'), k) AS x
    """
    spark.createDataFrame(stamped.drop_columns(["t"]).to_pandas()).createOrReplaceTempView("events")
    rows = spark.sql(query.replace("window_time(window)", "unix_micros(window_time(window))"))
    want = [row.asDict() for row in rows.collect()]
    assert want
    env.from_arrow(stamped).assign_timestamps(
        "ts", max_out_of_orderness="3s"
    ).create_temporary_view("events")
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    got = [
        {**row, "wt": (row["wt"] - epoch) // dt.timedelta(microseconds=1)}
        for row in run(env, env.sql(query))
    ]
    same_rows(got, want)


def test_a_select_of_more_columns_than_its_input_plans(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """Plain columns past the count of the input's (as ``SELECT window_time(window)
    AS wt, window.end AS we, k, c`` over three columns): the planner read past the
    input's columns and panicked."""
    timed(env, events)
    query = """
        SELECT v + 1 AS a, v * 2 AS b, t - 1 AS c, v % 3 AS d, k < 'k3' AS e, k, t
        FROM events
    """
    same_rows(run(env, env.sql(query)), duck(query, events=events))
