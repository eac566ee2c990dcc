"""env.sql over the results of Spark's window grouping, ``GROUP BY window(ts, ...)``
and ``session_window(ts, ...)``: their rows are timed by ``window.end`` (docs/API.md
"SQL", windowed results downstream), so a query groups them again by ``window`` or
``window.end`` (one final row per group), joins two of them on equal windows or
window ends, and bounds an interval join by ``window.start``/``window.end``. Exact
against DuckDB on the same rows, at parallelism 1 and 3; the Spark semantics against
PySpark's batch run of the same SQL."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import (
    SESSION_GAP_MS,
    assert_refused,
    assert_timed_as_duck,
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
def test_windowed_counts_grouped_again_by_window_emit_each_window_once(
    env: ed.StreamEnvironment, events: pa.Table, window: str
) -> None:
    """The brief's example: the top count per window, one final row per window (a
    running GROUP BY would emit an update per batch, and the multisets differ)."""
    query = f"""
        SELECT window.start AS ws, window.end AS we, max(c) AS top, count(*) AS keys
        FROM ({counts(window)}) AS x GROUP BY window
    """
    twin = (
        f"SELECT ws, we, max(c) AS top, count(*) AS keys FROM ({duck_counts(window)}) GROUP BY ALL"
    )
    assert_timed_as_duck(env, events, query, twin)


def test_windowed_counts_grouped_again_by_window_end_with_having(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    query = f"""
        SELECT window.end AS we, sum(c) AS total, min(k) AS first
        FROM ({counts(HOP, "v > 0")}) AS x
        GROUP BY window.end HAVING count(*) > 1
    """
    twin = f"""SELECT we, sum(c) AS total, min(k) AS first FROM ({duck_counts(HOP, "v > 0")})
            GROUP BY ALL HAVING count(*) > 1"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert want


def test_regrouped_results_are_timed_by_their_window_for_a_third_group_by(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """A renamed window column keeps timing the rows through two GROUP BYs."""
    query = f"""
        SELECT w.end AS we, sum(top) AS tops
        FROM (SELECT window AS w, k < 'k3' AS low, max(c) AS top
              FROM ({counts(TUMBLE)}) AS x GROUP BY window, k < 'k3') AS y
        GROUP BY w
    """
    twin = f"""SELECT we, sum(top) AS tops FROM (
                SELECT we, k < 'k3' AS low, max(c) AS top FROM ({duck_counts(TUMBLE)})
                GROUP BY ALL)
            GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_a_spark_window_chains_on_the_window_end_of_results(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """``window(we, ...)`` over the results timed by ``we`` (their ``window.end``):
    windows of windowed counts, as "Chaining windows" in the DSL."""
    query = f"""
        SELECT window.start AS ws, sum(c) AS total, max(c) AS top
        FROM (SELECT window.end AS we, k, count(*) AS c FROM events GROUP BY {TUMBLE}, k) AS x
        GROUP BY window(we, '30 seconds')
    """
    twin = f"""SELECT we - we % 30000 AS ws, sum(c) AS total, max(c) AS top
            FROM ({duck_counts(TUMBLE)}) GROUP BY ALL"""
    assert_timed_as_duck(env, events, query, twin)


def test_a_spark_window_over_the_window_column_of_results_is_refused(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    timed(env, events)
    query = f"""
        SELECT window AS w, sum(c) AS total
        FROM ({counts(TUMBLE)}) AS x GROUP BY window(window.end, '30 seconds')
    """
    assert_refused(env, query, "window", "select window.end AS we in a subquery")


def test_session_windows_grouped_again_by_their_bounds(env: ed.StreamEnvironment) -> None:
    rows = session_view(env)
    query = f"""
        SELECT session_window.start AS ws, session_window.end AS we, sum(n) AS n,
               count(*) AS keys
        FROM ({SESSION_COUNTS}) AS x
        GROUP BY session_window.start, session_window.end
    """
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for _, session in sessions(rows):
        groups[(session[0]["t"], session[-1]["t"] + SESSION_GAP_MS)].append(len(session))
    want = [{"ws": s, "we": e, "n": sum(ns), "keys": len(ns)} for (s, e), ns in groups.items()]
    same_rows(run(env, env.sql(query)), want)


def test_a_group_by_of_session_window_results_by_their_session_is_refused(
    env: ed.StreamEnvironment,
) -> None:
    """Spark merges the overlapping sessions of such a grouping (a session of one key
    and an overlapping one of another become one group), which no window here does."""
    session_view(env)
    query = f"""
        SELECT session_window AS w, count(*) AS keys
        FROM ({SESSION_COUNTS}) AS x
        GROUP BY session_window
    """
    assert_refused(env, query, "GROUP BY", "Spark merges the overlapping sessions")


def test_the_top_counts_of_each_window_joined_back_q5(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """Nexmark q5 in Spark's spelling: the counts per sliding window joined on their
    window with the max count of it (a GROUP BY window of the same counts)."""
    query = f"""
        WITH counts AS ({counts(HOP)})
        SELECT x.k, x.c, x.window.start AS ws
        FROM counts AS x
        JOIN (SELECT window, max(c) AS top FROM counts GROUP BY window) AS m
        ON x.window = m.window AND x.c >= m.top
    """
    twin = f"""WITH counts AS ({duck_counts(HOP)})
            SELECT x.k, x.c, x.ws FROM counts AS x
            JOIN (SELECT ws, max(c) AS top FROM counts GROUP BY ws) AS m
            ON x.ws = m.ws AND x.c >= m.top"""
    assert_timed_as_duck(env, events, query, twin)


@pytest.mark.parametrize("how", ["JOIN", "LEFT JOIN"])
def test_two_windowed_results_join_on_their_window(
    env: ed.StreamEnvironment, events: pa.Table, how: str
) -> None:
    """Nexmark q8's shape: equal windows bound the join (a LEFT join emits its
    unmatched rows once the watermark passes their window)."""
    a = f"SELECT k, window, count(*) AS n FROM events WHERE v > 30 GROUP BY k, {TUMBLE}"
    b = (
        "SELECT k, window, sum(v) AS total FROM events WHERE v <= 30 AND k <> 'k3' "
        f"GROUP BY k, {TUMBLE}"
    )
    query = f"""
        SELECT a.k, a.window.start AS ws, a.n, b.total
        FROM ({a}) AS a {how} ({b}) AS b ON a.k = b.k AND a.window = b.window
    """
    win = DUCK_WINDOWS[TUMBLE]
    twin = f"""SELECT a.k, a.ws, a.n, b.total
            FROM (SELECT k, ws, count(*) AS n FROM ({win}) WHERE v > 30 GROUP BY ALL) AS a
            {how} (SELECT k, ws, sum(v) AS total FROM ({win})
                   WHERE v <= 30 AND k <> 'k3' GROUP BY ALL) AS b
            ON a.k = b.k AND a.ws = b.ws"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert any(row["total"] is None for row in want) == (how == "LEFT JOIN")


def test_two_windowed_results_join_on_equal_window_ends_alone(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """No key but the window ends: equal event times are the key."""
    query = f"""
        SELECT a.window.end AS we, a.n, b.total
        FROM (SELECT window, count(*) AS n FROM events GROUP BY {HOP}) AS a
        JOIN (SELECT window, sum(v) AS total FROM events WHERE v > 0 GROUP BY {HOP}) AS b
        ON a.window.end = b.window.end
    """
    win = DUCK_WINDOWS[HOP]
    twin = f"""SELECT a.we, a.n, b.total
            FROM (SELECT we, count(*) AS n FROM ({win}) GROUP BY ALL) AS a
            JOIN (SELECT we, sum(v) AS total FROM ({win}) WHERE v > 0 GROUP BY ALL) AS b
            ON a.we = b.we"""
    assert_timed_as_duck(env, events, query, twin)


def test_rows_interval_join_the_max_of_their_window_q7(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    """Nexmark q7 in Spark's spelling: each row priced at the max of its tumbling
    window, the join bounded by the window's start and end."""
    query = f"""
        SELECT e.k, e.v, e.t, m.window.end AS we
        FROM events AS e
        JOIN (SELECT window, max(v) AS top FROM events GROUP BY {TUMBLE}) AS m
        ON e.v = m.top AND e.t >= m.window.start AND e.t < m.window.end
    """
    twin = f"""SELECT e.k, e.v, e.t, m.we FROM events AS e
            JOIN (SELECT we, max(v) AS top FROM ({DUCK_WINDOWS[TUMBLE]}) GROUP BY we) AS m
            ON e.v = m.top AND e.t >= m.we - 10000 AND e.t < m.we"""
    want = assert_timed_as_duck(env, events, query, twin)
    assert want


def test_a_session_window_start_cannot_bound_an_interval_join(
    env: ed.StreamEnvironment,
) -> None:
    """A session's start is no fixed offset from its end (the event time)."""
    session_view(env)
    query = f"""
        SELECT s.k, s.t FROM s
        JOIN ({SESSION_COUNTS}) AS m
        ON s.k = m.k AND s.t >= m.session_window.start AND s.t < m.session_window.end
    """
    assert_refused(env, query, "JOIN", r"\(m.session_window.start: a session window's start")


# -- Spark itself as the reference ------------------------------------------------


SPARK_QUERIES = {
    "regroup-by-window": """
        SELECT {ms}(window.end) AS we, max(c) AS top, count(*) AS keys
        FROM (SELECT window, k, count(*) AS c FROM events
              GROUP BY window({t}, '15 seconds', '5 seconds'), k) AS x
        GROUP BY window
    """,
    "q5-join-on-window": """
        WITH counts AS (SELECT window, k, count(*) AS c FROM events
                        GROUP BY window({t}, '15 seconds', '5 seconds'), k)
        SELECT x.k, x.c, {ms}(x.window.start) AS ws
        FROM counts AS x
        JOIN (SELECT window, max(c) AS top FROM counts GROUP BY window) AS m
        ON x.window = m.window AND x.c >= m.top
    """,
    "sessions-regrouped": """
        SELECT {ms}(session_window.end) AS we, sum(c) AS c, count(*) AS keys
        FROM (SELECT k, session_window, count(*) AS c FROM events
              GROUP BY k, session_window({t}, '2 seconds')) AS x
        GROUP BY session_window.start, session_window.end
    """,
}


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(SPARK_QUERIES))
def test_window_results_downstream_match_spark(
    spark: Any, events: pa.Table, env: ed.StreamEnvironment, name: str
) -> None:
    assert_as_spark(spark, env, events, SPARK_QUERIES[name], SPARK_QUERIES[name])
