"""env.sql over the results of a windowed GROUP BY: their event time is their
``window_end`` (docs/API.md "SQL", event time after a windowed GROUP BY), so a
query joins them with another windowed aggregate on the same windows, interval-joins
them with a view, or groups them again by their window. Exact against DuckDB on the
same rows, at parallelism 1 and 3."""

from __future__ import annotations

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import assert_timed_as_duck, timed

COUNTS = """
    SELECT k, count(*) AS n, window_start, window_end
    FROM TABLE(HOP(TABLE events, DESCRIPTOR(t), INTERVAL '5' SECOND, INTERVAL '15' SECOND))
    GROUP BY k, window_start, window_end
"""

# The same counts in DuckDB: a row at t ms is in the 3 windows starting at
# t - t % 5000 - i * 5000 for i in 0..2.
DUCK_COUNTS = """
    WITH hops AS (
        SELECT k, t - t % 5000 - i * 5000 AS window_start FROM events, range(0, 3) AS r(i)
    )
    SELECT k, count(*) AS n, window_start, window_start + 15000 AS window_end
    FROM hops GROUP BY ALL
"""


def tumble(where: str, aggregate: str) -> str:
    return f"""
        SELECT k, window_start AS ws, window_end AS we, {aggregate}
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
        WHERE {where}
        GROUP BY k, window_start, window_end
    """


def duck_tumble(where: str, aggregate: str) -> str:
    return f"""
        SELECT k, t - t % 10000 AS ws, t - t % 10000 + 10000 AS we, {aggregate}
        FROM events WHERE {where} GROUP BY ALL
    """


@pytest.mark.parametrize("how", ["JOIN", "LEFT JOIN"])
def test_two_windowed_aggregates_join_on_their_windows(
    env: ed.StreamEnvironment, events: pa.Table, how: str
) -> None:
    """The persons and sellers of Nexmark q8: the windows' bounds equated, the
    window ends timing both inputs (a LEFT join emits its unmatched rows once the
    watermark passes their window)."""
    select = "SELECT a.k, a.ws, a.n, b.total"
    on = "ON a.k = b.k AND a.ws = b.ws AND a.we = b.we"
    a, b = ("v > 30", "count(*) AS n"), ("v <= 30 AND k <> 'k3'", "sum(v) AS total")
    query = f"{select} FROM ({tumble(*a)}) AS a {how} ({tumble(*b)}) AS b {on}"
    twin = f"{select} FROM ({duck_tumble(*a)}) AS a {how} ({duck_tumble(*b)}) AS b {on}"
    want = assert_timed_as_duck(env, events, query, twin)
    assert any(row["total"] is None for row in want) == (how == "LEFT JOIN")


def test_a_view_interval_joins_the_maxes_of_its_windows(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """Nexmark q7: each row priced at the max of the tumbling window it is in, the
    maxes timed by their window_end (renamed)."""
    query = """
        SELECT e.k, e.v, e.t
        FROM events AS e
        JOIN (
            SELECT max(v) AS top, window_end AS t
            FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
            GROUP BY window_start, window_end
        ) AS m
        ON e.v = m.top
        WHERE e.t BETWEEN m.t - 10000 AND m.t - 1
    """
    twin = """SELECT e.k, e.v, e.t FROM events AS e
           JOIN (SELECT max(v) AS top, t - t % 10000 + 10000 AS we FROM events GROUP BY we) AS m
           ON e.v = m.top WHERE e.t BETWEEN m.we - 10000 AND m.we - 1"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert want


def test_rows_join_the_max_of_their_window_between_its_bounds(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """``window_start`` of a tumbling window's results is its ``window_end`` minus
    the size: a bound of the event time like ``window_end``."""
    query = """
        SELECT e.k, e.v, e.t
        FROM events AS e
        JOIN (
            SELECT max(v) AS top, window_start AS ws, window_end AS we
            FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
            GROUP BY window_start, window_end
        ) AS m
        ON e.v = m.top AND e.t >= m.ws AND e.t < m.we
    """
    twin = """SELECT e.k, e.v, e.t FROM events AS e
           JOIN (SELECT max(v) AS top, t - t % 10000 AS ws FROM events GROUP BY ws) AS m
           ON e.v = m.top AND e.t >= m.ws AND e.t < m.ws + 10000"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert want


def test_the_top_counts_of_each_window_regroup_its_results(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """Nexmark q5: the max count of each window (a GROUP BY of the windowed counts
    by their window, one row per window) joined back to the counts."""
    query = f"""
        WITH counts AS ({COUNTS})
        SELECT c.k, c.n, c.window_start, c.window_end
        FROM counts AS c
        JOIN (
            SELECT max(n) AS top, window_start, window_end
            FROM counts GROUP BY window_start, window_end
        ) AS m
        ON c.window_start = m.window_start AND c.window_end = m.window_end AND c.n >= m.top
    """
    twin = f"""WITH counts AS ({DUCK_COUNTS})
            SELECT c.k, c.n, c.window_start, c.window_end
            FROM counts AS c
            JOIN (SELECT max(n) AS top, window_start FROM counts GROUP BY ALL) AS m
            ON c.window_start = m.window_start AND c.n >= m.top"""
    assert_timed_as_duck(env, events, query, twin)


def test_a_group_by_window_of_window_results_emits_each_group_once(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """Grouped by the window end alone (renamed), with HAVING: one final row per
    window, where a running aggregate would emit an update per batch."""
    query = f"""
        SELECT we, sum(n) AS total, count(*) AS keys
        FROM (SELECT n, window_end AS we FROM ({COUNTS}) AS c) AS r
        GROUP BY we HAVING count(*) > 2
    """
    twin = f"""SELECT window_end AS we, sum(n) AS total, count(*) AS keys
            FROM ({DUCK_COUNTS}) AS c GROUP BY ALL HAVING count(*) > 2"""
    assert_timed_as_duck(env, events, query, twin)


def test_a_regrouped_aggregate_may_not_read_the_window_bounds(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    timed(env, events)
    query = f"SELECT window_end, min(window_start) AS s FROM ({COUNTS}) AS c GROUP BY window_end"
    with pytest.raises(ed.SqlError, match="cannot read window_start; group by it"):
        env.sql(query)


def test_a_group_by_of_a_running_group_by_is_refused(env: ed.StreamEnvironment) -> None:
    """A running GROUP BY emits updates; another GROUP BY would count each of them
    (the average of every running max, not of the final ones)."""
    table = pa.table({"id": [1, 1, 2, 2, 1], "c": [1, 1, 1, 1, 1], "x": [1, 5, 2, 3, 9]})
    env.from_arrow(table).create_temporary_view("a")
    inner = "SELECT id, c, max(x) AS f FROM a GROUP BY id, c"
    with pytest.raises(ed.SqlError, match="SQL GROUP BY: GROUP BY over a running GROUP BY"):
        env.sql(f"SELECT c, avg(f) AS m FROM ({inner}) AS q GROUP BY c")
    with pytest.raises(ed.SqlError, match="SQL JOIN: JOIN over a running GROUP BY"):
        env.sql(f"SELECT q.f, a.x FROM ({inner}) AS q JOIN a ON q.id = a.id")


def test_equal_event_times_of_two_views_are_an_interval_of_0_ms(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """``a.t = b.t`` of the two event-time columns bounds the join (a LEFT join
    emits its unmatched rows)."""
    query = """
        SELECT a.k, a.v, b.v AS w FROM events AS a
        LEFT JOIN (SELECT k, v, t FROM events WHERE v > 40) AS b
        ON a.k = b.k AND a.t = b.t
    """
    twin = """SELECT a.k, a.v, b.v AS w FROM events AS a
           LEFT JOIN (SELECT k, v, t FROM events WHERE v > 40) AS b
           ON a.k = b.k AND a.t = b.t"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert any(row["w"] is None for row in want) and any(row["w"] is not None for row in want)
