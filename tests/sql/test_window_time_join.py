"""Spark's ``window_time(w)`` in a JOIN's condition (docs/API.md "SQL", Spark's
spelling): ``window_time(w)`` is ``w.end`` - 1 ms, a fixed offset from the event time
of a Spark window grouping's results (core's sql/time.rs), so core's
sql/join_time.rs reads it as an event-time term: two window aggregates joined on
``window_time(a.window) = window_time(b.window)`` are an interval join of 0 ms, and
``e.t BETWEEN window_time(m.window) - 9999 AND window_time(m.window)`` bounds an
interval join of a stream with a window aggregate, both with their state expiring.
Where ``window_time`` reads a column that does not time its input, the join is
refused (as a condition after an unbounded join it would keep every row). Exact
against DuckDB at parallelism 1 and 3 in batches of 32, and against PySpark's batch
run of the same SQL."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline._core as core

from .conftest import assert_refused, assert_timed_as_duck, timed
from .spark_windows import DUCK_WINDOWS, HOP, TUMBLE, assert_as_spark, counts, duck_counts


def tops(window: str, where: str = "TRUE") -> str:
    """The largest value per key and window of ``window`` (Spark's spelling)."""
    return f"SELECT window, k, max(v) AS top FROM events WHERE {where} GROUP BY {window}, k"


def duck_tops(window: str, where: str = "TRUE") -> str:
    """:func:`tops` in DuckDB, the window as its bounds ``ws``, ``we``."""
    rows = DUCK_WINDOWS[window]
    return f"SELECT ws, we, k, max(v) AS top FROM ({rows}) WHERE {where} GROUP BY ALL"


def join_node(events: pa.Table, query: str) -> Any:
    """The join core's planner makes of ``query`` over ``events`` (the first join
    below the root)."""
    catalog = [("events", events.schema, "t")]
    nodes = [core.plan_sql(query, catalog)]
    while nodes:
        node = nodes.pop()
        if type(node).__name__ == "SqlJoin":
            return node
        nodes += [getattr(node, a) for a in ("input", "left", "right") if hasattr(node, a)]
    raise AssertionError(f"no join in the plan of {query}")


WINDOW_PAIRS = {
    "tumble": (TUMBLE, TUMBLE),
    "hop": (HOP, HOP),
    # Ends of a 10 s and a 15 s window are equal where the windows are not.
    "tumble-hop": (TUMBLE, HOP),
}


def equal_window_times(
    left: str, right: str, how: str = "JOIN", where: str = "TRUE"
) -> tuple[str, str]:
    """Counts and tops (of the rows ``where`` holds) per key joined on their windows'
    times: the query and its DuckDB twin."""
    query = f"""
        SELECT a.k, window_time(a.window) AS wt, a.c, b.top
        FROM ({counts(left)}) AS a {how} ({tops(right, where)}) AS b
        ON a.k = b.k AND window_time(a.window) = window_time(b.window)
    """
    twin = f"""SELECT a.k, a.we - 1 AS wt, a.c, b.top
            FROM ({duck_counts(left)}) AS a {how} ({duck_tops(right, where)}) AS b
            ON a.k = b.k AND a.we - 1 = b.we - 1"""
    return query, twin


@pytest.mark.parametrize("pair", sorted(WINDOW_PAIRS))
def test_window_aggregates_join_on_equal_window_times(
    env: ed.StreamEnvironment, events: pa.Table, pair: str
) -> None:
    query, twin = equal_window_times(*WINDOW_PAIRS[pair])
    assert assert_timed_as_duck(env, events, query, twin)


def test_a_left_join_on_equal_window_times_keeps_unmatched_windows(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """The tops of large values only: some (key, window) counts find none."""
    query, twin = equal_window_times(TUMBLE, TUMBLE, "LEFT JOIN", "v > 60")
    want = assert_timed_as_duck(env, events, query, twin)
    assert any(r["top"] is None for r in want) and any(r["top"] is not None for r in want)


@pytest.mark.parametrize("how", ["JOIN", "LEFT JOIN"])
@pytest.mark.parametrize("window", [TUMBLE, HOP], ids=["tumble", "hop"])
def test_window_time_bounds_an_interval_join_with_a_stream(
    env: ed.StreamEnvironment, events: pa.Table, window: str, how: str
) -> None:
    """Each event with the counts of its key's windows whose last millisecond is at
    most 9999 ms after it and not before it (``t`` <= ``wt``, strictly greater than
    ``wt`` - 10000)."""
    query = f"""
        SELECT e.k, e.t, window_time(m.window) AS wt, m.c
        FROM events AS e {how} ({counts(window)}) AS m
        ON e.k = m.k AND e.t <= window_time(m.window) AND e.t > window_time(m.window) - 10000
    """
    twin = f"""SELECT e.k, e.t, m.we - 1 AS wt, m.c
            FROM events AS e {how} ({duck_counts(window)}) AS m
            ON e.k = m.k AND e.t <= m.we - 1 AND e.t > m.we - 1 - 10000"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert want
    if how == "LEFT JOIN":
        # Every event is in a window of its key: none goes unmatched.
        assert len({(r["k"], r["t"]) for r in want}) == events.num_rows


def test_window_time_conditions_plan_as_bounded_interval_joins(events: pa.Table) -> None:
    """The condition is the interval join's bound, not a filter after an unbounded
    join: 0 ms between equal window times, and (the right's time being the window's
    end) from 1 ms to 10000 ms after an event's time for the stream's."""
    query, _ = equal_window_times(TUMBLE, HOP)
    node = join_node(events, query)
    assert (node.kind, node.lower_ms, node.upper_ms) == ("interval", 0, 0)
    assert node.time_columns is not None
    query = f"""
        SELECT e.k, m.c FROM events AS e JOIN ({counts(TUMBLE)}) AS m
        ON e.k = m.k AND e.t BETWEEN window_time(m.window) - 9999 AND window_time(m.window)
    """
    node = join_node(events, query)
    assert (node.kind, node.lower_ms, node.upper_ms) == ("interval", 1, 10_000)
    assert node.time_columns == ("t", "__sql_event_time")


def test_window_time_of_a_column_not_timing_its_input_is_refused(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """A struct the query builds is no window of a grouping: its window_time bounds
    nothing, and a join keeping every row is refused, naming the call."""
    timed(env, events)
    built = "SELECT k, named_struct('start', t, 'end', t + 10) AS w FROM events"
    query = f"""
        SELECT a.k FROM ({built}) AS a JOIN ({counts(TUMBLE)}) AS b
        ON a.k = b.k AND window_time(a.w) = window_time(b.window)
    """
    assert_refused(env, query, "JOIN", r"window_time\(a\.w\).*whose end times its input")


SPARK_JOIN = """
    SELECT a.k, {ms}(window_time(a.window)) AS wt, a.c, b.top
    FROM (SELECT window, k, count(*) AS c FROM events GROUP BY window({t}, '10 seconds'), k) AS a
    JOIN (SELECT window, k, max(v) AS top FROM events
          GROUP BY window({t}, '15 seconds', '5 seconds'), k) AS b
    ON a.k = b.k AND window_time(a.window) = window_time(b.window)
"""

SPARK_SPELLING = """
    SELECT a.k, {ms}(a.wt) AS wt, a.c, b.top
    FROM (SELECT window_time(window) AS wt, k, c
          FROM (SELECT window, k, count(*) AS c FROM events
                GROUP BY window({t}, '10 seconds'), k) AS x) AS a
    JOIN (SELECT window_time(window) AS wt, k, top
          FROM (SELECT window, k, max(v) AS top FROM events
                GROUP BY window({t}, '15 seconds', '5 seconds'), k) AS y) AS b
    ON a.k = b.k AND a.wt = b.wt
"""
"""The same rows in a spelling Spark's SQL takes: it fails to analyze
:data:`SPARK_JOIN` (it reports ``a.k`` unresolved), window_time in the condition."""


@pytest.mark.spark
def test_a_join_on_equal_window_times_matches_spark(
    spark: Any, events: pa.Table, env: ed.StreamEnvironment
) -> None:
    """Spark's window_time is its end - 1 µs: as milliseconds, our end - 1."""
    assert_as_spark(spark, env, events, SPARK_JOIN, SPARK_SPELLING)
