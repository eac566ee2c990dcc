"""env.sql: Spark's window grouping, ``GROUP BY window(ts, '10 seconds'[, slide])``
and ``session_window(ts, gap)`` read as a struct column of ``start`` and
``end``; ``GROUP BY`` expressions; Spark's ``%`` with literal divisors. Exact
against DuckDB on the same rows (or a plain-Python reference for sessions)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import (
    SESSION_GAP_MS,
    assert_refused,
    duck,
    run,
    same_rows,
    session_view,
    sessions,
)


def timed(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )


def test_spark_tumbling_window_matches_duckdb(env: ed.StreamEnvironment, events: pa.Table) -> None:
    timed(env, events)
    query = """
        SELECT k, window.start AS ws, window.end AS we, count(*) AS n, sum(v) AS total
        FROM events WHERE v > -10
        GROUP BY window(t, '10 seconds'), k
    """
    want = duck(
        """SELECT k, t - t % 10000 AS ws, t - t % 10000 + 10000 AS we, count(*) AS n,
                  sum(v) AS total
           FROM events WHERE v > -10 GROUP BY ALL""",
        events=events,
    )
    same_rows(run(env, env.sql(query)), want)


def test_spark_sliding_window_matches_duckdb(env: ed.StreamEnvironment, events: pa.Table) -> None:
    timed(env, events)
    query = """
        SELECT e.k, window.start AS ws, max(e.v) AS top
        FROM events AS e
        GROUP BY e.k, window(e.t, '15 seconds', '5 seconds')
    """
    want = duck(
        """SELECT k, ws, max(v) AS top
           FROM (SELECT *, unnest(generate_series(t - t % 5000 - 10000, t - t % 5000, 5000))
                 AS ws FROM events)
           GROUP BY ALL""",
        events=events,
    )
    same_rows(run(env, env.sql(query)), want)


def test_the_window_column_is_a_struct_of_start_and_end(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    timed(env, events)
    out = env.sql("SELECT window, count(*) AS n FROM events GROUP BY window(t, '20 seconds')")
    assert out.schema.field("window").type == pa.struct(
        [("start", pa.int64()), ("end", pa.int64())]
    )
    want = duck(
        """SELECT {'start': t - t % 20000, 'end': t - t % 20000 + 20000} AS window,
                  count(*) AS n
           FROM events GROUP BY ALL""",
        events=events,
    )
    same_rows(run(env, out), want)


def test_spark_session_window_matches_reference(env: ed.StreamEnvironment) -> None:
    rows = session_view(env)
    query = """
        SELECT k, session_window.start AS ws, session_window.end AS we, count(*) AS n
        FROM s GROUP BY k, session_window(t, '3 seconds')
    """
    want = [
        {"k": k, "ws": s[0]["t"], "we": s[-1]["t"] + SESSION_GAP_MS, "n": len(s)}
        for k, s in sessions(rows)
    ]
    same_rows(run(env, env.sql(query)), want)


def test_group_by_expressions_match_duckdb(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.from_arrow(events).create_temporary_view("events")
    query = """
        SELECT v % 3 AS m, upper(k) AS uk, count(*) AS n, sum(x) AS sx
        FROM events GROUP BY v % 3, upper(k)
    """
    got = run(env, env.sql(query))
    last: dict[tuple[Any, Any], dict[str, Any]] = {}
    for row in got:
        key = (row["m"], row["uk"])
        if key not in last or row["n"] > last[key]["n"]:
            last[key] = row
    want = duck(query, events=events)
    assert len(want) == 35
    same_rows(
        [{**r, "sx": round(r["sx"], 6)} for r in last.values()],
        [{**r, "sx": round(r["sx"], 6)} for r in want],
    )


def test_windowed_group_by_expression_matches_duckdb(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    timed(env, events)
    query = """
        SELECT window_start, v % 2 = 0 AS even, count(*) AS n
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '30' SECOND))
        GROUP BY window_start, window_end, v % 2 = 0
    """
    want = duck(
        "SELECT t - t % 30000 AS window_start, v % 2 = 0 AS even, count(*) AS n "
        "FROM events GROUP BY ALL",
        events=events,
    )
    same_rows(run(env, env.sql(query)), want)


def test_remainder_by_literals_keeps_the_dividends_sign(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    env.from_arrow(events).create_temporary_view("events")
    query = "SELECT v, v % 7 AS a, v % -7 AS b, v % 0 AS c, x % 3 AS d FROM events"
    got = run(env, env.sql(query))
    assert any(r["a"] < 0 for r in got) and all(r["c"] is None for r in got)
    # Spark's remainder by zero is null; DuckDB's is an error unless inside TRY.
    same_rows(got, duck(query.replace("v % 0", "TRY(v % 0)"), events=events))


@pytest.mark.parametrize(
    ("query", "match"),
    [
        (
            "SELECT count(*) FROM t GROUP BY window(ts, '1 second', '1 second', '0 seconds')",
            "startTime",
        ),
        ("SELECT count(*) FROM t GROUP BY window(ts, 'soon')", "milliseconds"),
        ("SELECT count(*) FROM t GROUP BY window(v, '1 second')", "event-time column"),
        (
            "SELECT count(*) FROM t "
            "GROUP BY window(ts, '1 second'), session_window(ts, '1 second')",
            "one window",
        ),
        ("SELECT count(*) FROM t, t AS u GROUP BY window(t.ts, '1 second')", "one table"),
    ],
)
def test_bad_spark_windows_are_errors_naming_them(query: str, match: str) -> None:
    env = ed.StreamEnvironment()
    env.from_collection([{"k": "a", "v": 1, "ts": 5}]).assign_timestamps(
        "ts"
    ).create_temporary_view("t")
    assert_refused(env, query, "window", match)
