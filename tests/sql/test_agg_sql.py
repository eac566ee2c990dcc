"""env.sql GROUP BY with several aggregates and every aggregate of
``eddyline.functions`` (avg, count(col), count(DISTINCT), approx_count_distinct,
approx_percentile, stddev, variance, first/last, collect_list/collect_set),
running and over TUMBLE/HOP windows, exact against DuckDB on the same rows (or
a plain-Python reference where the result depends on arrival order); the SQL
and its DSL twin ``keyed.agg(...)`` explain the same plan."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F

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


def rounded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with floats to 9 significant digits and whole decimals as ints
    (DuckDB sums bigints to HUGEINT), so exact results compare across engines."""

    def fix(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.9g}")
        if type(v).__name__ == "Decimal" and v == int(v):
            return int(v)
        return v

    return [{k: fix(v) for k, v in row.items()} for row in rows]


def last_per_key(rows: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """The current row per key of an upsert stream whose column ``n`` is
    ``count(*)`` (it grows with every update of the key)."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        if key not in groups or row["n"] > groups[key]["n"]:
            groups[key] = row
    return list(groups.values())


RUNNING = """
    SELECT k, count(*) AS n, sum(v) AS total, avg(x) AS mean, min(v) AS lo, max(x) AS hi,
           count(x) AS xs, count(DISTINCT s) AS kinds, stddev(x) AS sd, variance(v) AS var,
           stddev_pop(x) AS sdp, var_pop(v) AS vp, sum(v * 2 + 1) AS expr
    FROM events WHERE v > -15 GROUP BY k
"""
RUNNING_DUCK = RUNNING.replace("stddev(x)", "stddev_samp(x)").replace("variance(v)", "var_samp(v)")


def test_running_several_aggregates_match_duckdb(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    env.from_arrow(events).create_temporary_view("events")
    got = run(env, env.sql(RUNNING))
    assert len(got) > 7  # an upsert stream: updates, not only final values
    same_rows(rounded(last_per_key(got, ["k"])), rounded(duck(RUNNING_DUCK, events=events)))


def test_having_and_an_aggregate_only_in_having(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    env.from_arrow(events).create_temporary_view("events")
    query = (
        "SELECT k, count(*) AS n, avg(v) AS mean FROM events GROUP BY k HAVING max(v) > 79 "
        "AND count(*) > 50"
    )
    want = duck(query, events=events)
    assert 0 < len(want) < 7
    same_rows(rounded(last_per_key(run(env, env.sql(query)), ["k"])), rounded(want))


def within_a_rank(estimate: float, values: list[float], q: float) -> bool:
    """Whether ``estimate`` lies between the order statistics next to the
    ``q``-quantile's rank (``q * (n - 1)`` to ``q * n``, 0-based: the
    conventions differ by less than one rank)."""
    ordered = sorted(values)
    n = len(ordered)
    low = ordered[max(0, math.floor(q * (n - 1)) - 1)]
    high = ordered[min(n - 1, math.ceil(q * n))]
    return low <= estimate <= high


def test_approximate_aggregates_on_small_groups(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    # With at most 13 values per key, HyperLogLog counts exactly (its exact
    # range) and the t-digest (100 centroids) keeps every value as a centroid of
    # its own: its estimate is an interpolation between the two values next to
    # the percentile's rank (docs/API.md "Aggregates": a value not always an
    # element of the input), where DuckDB's quantile_cont interpolates at rank
    # q * (n - 1); so the percentiles are checked to lie within one rank.
    env.from_arrow(events).create_temporary_view("events")
    query = """
        SELECT k, count(*) AS n, approx_count_distinct(v) AS d,
               approx_percentile(x, 0.5) AS med, percentile_approx(v, 0.9, 100) AS p90
        FROM events WHERE t < 90000 GROUP BY k
    """
    got = last_per_key(run(env, env.sql(query)), ["k"])
    want = duck(
        """SELECT k, count(*) AS n, count(DISTINCT v) AS d,
                  list(x) FILTER (WHERE x IS NOT NULL) AS xs, list(v) AS vs
           FROM events WHERE t < 90000 GROUP BY k""",
        events=events,
    )
    assert len(got) == len(want) == 7
    same_rows(
        [{"k": r["k"], "n": r["n"], "d": r["d"]} for r in got],
        [{"k": r["k"], "n": r["n"], "d": r["d"]} for r in want],
    )
    by_key = {r["k"]: r for r in want}
    for row in got:
        assert within_a_rank(row["med"], by_key[row["k"]]["xs"], 0.5), row
        assert within_a_rank(row["p90"], by_key[row["k"]]["vs"], 0.9), row


def test_order_dependent_aggregates_follow_arrival_order(events: pa.Table) -> None:
    env = ed.StreamEnvironment(parallelism=1, batch_size=32)
    env.from_arrow(events).create_temporary_view("events")
    query = """
        SELECT k, count(*) AS n, first(v) AS f, last(s) AS l, collect_list(s) AS xs,
               collect_set(v % 3) AS ys
        FROM events GROUP BY k
    """
    got = last_per_key(run(env, env.sql(query)), ["k"])
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in events.to_pylist():
        groups[row["k"]].append(row)
    want = [
        {
            "k": k,
            "n": len(rows),
            "f": rows[0]["v"],
            "l": rows[-1]["s"],
            "xs": [r["s"] for r in rows if r["s"] is not None],
            "ys": sorted({r["v"] - 3 * int(r["v"] / 3) for r in rows}),
        }
        for k, rows in groups.items()
    ]
    for row in got:
        row["ys"] = sorted(row["ys"])
    same_rows(got, want)


def test_default_names_are_sparks(events: pa.Table) -> None:
    env = ed.StreamEnvironment()
    env.from_arrow(events).create_temporary_view("events")
    out = env.sql(
        "SELECT k, avg(v), count(*), count(DISTINCT s), approx_percentile(v, 0.5), "
        "collect_list(s) FROM events GROUP BY k"
    )
    assert out.schema.names == [
        "k",
        "avg(v)",
        "count(1)",
        "count(DISTINCT s)",
        "approx_percentile(v, 0.5, 10000)",
        "collect_list(s)",
    ]


TUMBLE = """
    SELECT k, window_start, window_end, count(*) AS n, avg(v) AS mean, count(s) AS ss,
           max(x) AS hi, variance(x) AS var, count(DISTINCT v % 4) AS d
    FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
    WHERE v > -10
    GROUP BY k, window_start, window_end
"""


def test_tumble_with_several_aggregates_matches_duckdb(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )
    got = run(env, env.sql(TUMBLE))
    want = duck(
        """SELECT k, t - t % 10000 AS window_start, t - t % 10000 + 10000 AS window_end,
                  count(*) AS n, avg(v) AS mean, count(s) AS ss, max(x) AS hi,
                  var_samp(x) AS var, count(DISTINCT v % 4) AS d
           FROM events WHERE v > -10 GROUP BY ALL""",
        events=events,
    )
    same_rows(rounded(got), rounded(want))


def test_hop_with_several_aggregates_matches_duckdb(
    env: ed.StreamEnvironment, events: pa.Table
) -> None:
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )
    query = """
        SELECT window_start, window_end, k, sum(v) AS total, stddev_pop(v) AS sd, min(s) AS lo
        FROM TABLE(HOP(TABLE events, DESCRIPTOR(t), INTERVAL '5' SECOND, INTERVAL '15' SECOND))
        GROUP BY window_start, window_end, k
    """
    got = run(env, env.sql(query))
    want = duck(
        """SELECT ws AS window_start, ws + 15000 AS window_end, k, sum(v) AS total,
                  stddev_pop(v) AS sd, min(s) AS lo
           FROM (SELECT *, unnest(generate_series(t - t % 5000 - 10000, t - t % 5000, 5000))
                 AS ws FROM events)
           GROUP BY ALL""",
        events=events,
    )
    same_rows(rounded(got), rounded(want))


def test_session_with_several_aggregates_matches_reference(env: ed.StreamEnvironment) -> None:
    rows = session_view(env)
    query = """
        SELECT k, window_start, window_end, max(v) AS top, count(*) AS n, avg(v) AS mean,
               count(DISTINCT t) AS ts
        FROM TABLE(SESSION(TABLE s, DESCRIPTOR(t), INTERVAL '3' SECOND))
        GROUP BY k, window_start, window_end
    """
    want = []
    for k, session in sessions(rows):
        values = [r["v"] for r in session]
        want.append(
            {
                "k": k,
                "window_start": session[0]["t"],
                "window_end": session[-1]["t"] + SESSION_GAP_MS,
                "top": max(values),
                "n": len(values),
                "mean": sum(values) / len(values),
                "ts": len({r["t"] for r in session}),
            }
        )
    assert len(want) == 10
    same_rows(rounded(run(env, env.sql(query))), rounded(want))


ONE_ROW = [{"k": "a", "v": 1, "x": 1.0, "t": 5}]


def test_running_sql_and_dsl_twin_explain_the_same() -> None:
    assert_twin_plans(
        ONE_ROW,
        "SELECT k, avg(x), count(*) AS n, count(DISTINCT v), max(t) FROM r GROUP BY k",
        lambda rows: rows.key_by("k").agg(
            F.avg("x"), F.count("*").alias("n"), F.count_distinct("v"), F.max("t")
        ),
        time_column="t",
    )


def test_window_sql_and_dsl_twin_explain_the_same() -> None:
    assert_twin_plans(
        ONE_ROW,
        "SELECT k, window_start, window_end, max(x) AS hi, approx_percentile(v, 0.25) AS q "
        "FROM TABLE(HOP(TABLE r, DESCRIPTOR(t), INTERVAL '1' SECOND, INTERVAL '2' SECOND)) "
        "GROUP BY k, window_start, window_end",
        lambda rows: (
            rows.key_by("k")
            .window(ed.Sliding("2s", "1s"))
            .agg(F.max("x").alias("hi"), F.approx_percentile("v", 0.25).alias("q"))
        ),
        time_column="t",
    )


@pytest.mark.parametrize(
    ("query", "construct", "match"),
    [
        ("SELECT k, sum(DISTINCT v) FROM t GROUP BY k", "DISTINCT aggregate", "sum"),
        ("SELECT k, approx_percentile(v, 2) FROM t GROUP BY k", "aggregate", "percentage"),
        ("SELECT k, approx_percentile(v, 0.5, 0) FROM t GROUP BY k", "aggregate", "accuracy"),
        ("SELECT k, median(v) FROM t GROUP BY k", "function", "median"),
        (
            "SELECT k, count(v) FILTER (WHERE v > 0) FROM t GROUP BY k",
            "aggregate FILTER / ORDER BY",
            "FILTER",
        ),
    ],
)
def test_unsupported_aggregates_are_errors_naming_them(
    query: str, construct: str, match: str
) -> None:
    env = ed.StreamEnvironment()
    env.from_collection([{"k": "a", "v": 1}]).create_temporary_view("t")
    assert_refused(env, query, construct, match)
