"""env.sql GROUP BY: running aggregates (an upsert stream), windowing table
functions (TUMBLE, HOP, SESSION) and HAVING, exact against DuckDB or a
plain-Python reference; what a stream cannot group by yet is a named error."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import (
    SESSION_GAP_MS,
    assert_refused,
    assert_twin_plans,
    duck,
    run,
    same_rows,
    session_view,
    sessions,
)


def final_per_key(rows: list[dict[str, Any]], keys: list[str], pick: Any) -> list[dict[str, Any]]:
    """The current value per key of an upsert stream of a monotone aggregate."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[tuple(row[k] for k in keys)].append(row)
    return [pick(g) for g in groups.values()]


def test_running_group_by_is_an_upsert_stream_of_current_values(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    env.from_arrow(events).create_temporary_view("events")
    # Positive values: each key's sum only grows, so its last update is its largest.
    query = "SELECT k, sum(v) AS total FROM events WHERE v > 0 GROUP BY k"
    got = run(env, env.sql(query))
    assert len(got) > 7  # updates, not only final values
    final = final_per_key(got, ["k"], lambda g: max(g, key=lambda r: r["total"]))
    same_rows(final, duck(query, events=events))


@pytest.mark.parametrize("agg", ["count(*)", "min(v)", "max(v)"])
def test_running_count_min_max(env: ed.StreamEnvironment, events: pa.Table, agg: str) -> None:
    env.from_arrow(events).create_temporary_view("events")
    query = f"SELECT k, {agg} AS a FROM events GROUP BY k"
    got = run(env, env.sql(query))
    pick = min if agg.startswith("min") else max
    final = final_per_key(got, ["k"], lambda g: pick(g, key=lambda r: r["a"]))
    same_rows(final, duck(query, events=events))


def test_having_filters_groups(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.from_arrow(events).create_temporary_view("events")
    query = "SELECT k, count(*) AS n FROM events GROUP BY k HAVING count(*) > 57"
    got = run(env, env.sql(query))
    final = final_per_key(got, ["k"], lambda g: max(g, key=lambda r: r["n"]))
    want = duck(query, events=events)
    assert 0 < len(want) < 7
    same_rows(final, want)


def test_tumble_window_matches_duckdb(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )
    query = """
        SELECT k, window_start, window_end, sum(v) AS total
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
        WHERE v > -10
        GROUP BY k, window_start, window_end
    """
    got = run(env, env.sql(query))
    want = duck(
        """SELECT k, t - t % 10000 AS window_start, t - t % 10000 + 10000 AS window_end,
                  sum(v) AS total
           FROM events WHERE v > -10 GROUP BY ALL""",
        events=events,
    )
    same_rows(got, want)


def test_hop_window_matches_reference(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )
    query = """
        SELECT k, window_start, window_end, count(*) AS n
        FROM TABLE(HOP(TABLE events, DESCRIPTOR(t), INTERVAL '5' SECOND, INTERVAL '15' SECOND))
        GROUP BY window_start, window_end, k
    """
    got = run(env, env.sql(query))
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for row in events.to_pylist():
        last = row["t"] - row["t"] % 5000
        for start in range(last, last - 15000, -5000):
            counts[(row["k"], start)] += 1
    want = [
        {"k": k, "window_start": s, "window_end": s + 15000, "n": n} for (k, s), n in counts.items()
    ]
    same_rows(got, want)


def test_session_window_matches_reference(env: ed.StreamEnvironment) -> None:
    rows = session_view(env)
    query = """
        SELECT k, window_start, window_end, max(v) AS top
        FROM TABLE(SESSION(TABLE s, DESCRIPTOR(t), INTERVAL '3' SECOND))
        GROUP BY k, window_start, window_end
    """
    got = run(env, env.sql(query))
    want = [
        {
            "k": k,
            "window_start": s[0]["t"],
            "window_end": s[-1]["t"] + SESSION_GAP_MS,
            "top": max(r["v"] for r in s),
        }
        for k, s in sessions(rows)
    ]
    same_rows(got, want)


def test_group_by_without_keys_aggregates_all_rows(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )
    running = env.sql("SELECT max(v) AS top FROM events")
    windowed = env.sql(
        "SELECT window_start, count(*) AS n FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), "
        "INTERVAL '20' SECOND)) GROUP BY window_start, window_end"
    )
    handles = running.collect(), windowed.collect()
    env.execute("sql")
    got_running, got_windowed = (h.to_pylist() for h in handles)
    assert set(got_running[0]) == {"top"}
    assert max(r["top"] for r in got_running) == duck("SELECT max(v) AS m FROM e", e=events)[0]["m"]
    want = duck("SELECT t - t % 20000 AS window_start, count(*) AS n FROM e GROUP BY ALL", e=events)
    same_rows(got_windowed, want)


def test_window_sql_and_dsl_twin_explain_the_same() -> None:
    assert_twin_plans(
        [{"k": "a", "v": 1, "t": 5}],
        "SELECT k, window_start, window_end, sum(v) AS total FROM TABLE(TUMBLE(TABLE r, "
        "DESCRIPTOR(t), INTERVAL '10' SECOND)) GROUP BY k, window_start, window_end",
        lambda rows: (
            rows.key_by("k")
            .window(ed.Tumbling("10s"))
            .sum("v")
            .select("k", "window_start", "window_end", ed.col("v").alias("total"))
        ),
        time_column="t",
    )


@pytest.mark.parametrize(
    ("query", "construct", "match"),
    [
        (
            "SELECT k, sum(v) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
            "GROUP BY k",
            "TUMBLE",
            "window_start and window_end",
        ),
        (
            "SELECT window_start, v FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' "
            "SECOND))",
            "TUMBLE",
            "window_start",
        ),
        (
            "SELECT k, count(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(v), INTERVAL '1' SECOND)) "
            "GROUP BY k, window_start, window_end",
            "TUMBLE",
            "event-time column",
        ),
        (
            "SELECT count(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL 'x' SECOND)) "
            "GROUP BY window_start, window_end",
            "TUMBLE",
            "milliseconds",
        ),
    ],
)
def test_unsupported_group_by_is_an_error_naming_the_construct(
    query: str, construct: str, match: str
) -> None:
    env = ed.StreamEnvironment()
    env.from_collection([{"k": "a", "v": 1, "ts": 5}]).assign_timestamps(
        "ts"
    ).create_temporary_view("t")
    assert_refused(env, query, construct, match)
