"""env.sql joins: equi-joins (with state_ttl), interval joins, window joins and
temporal joins, lowered to the DSL's joins, exact against DuckDB on the same rows;
what a stream cannot join is a named SqlError."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline._specs import JoinSpec

from .conftest import assert_refused, duck, same_rows

BASE = datetime(2024, 3, 1, 12, 0, 0)


def at(ms: int) -> datetime:
    return BASE + timedelta(milliseconds=ms)


@pytest.fixture
def orders() -> pa.Table:
    """Orders of customers c0..c12 (some without one), out of order by up to 3 s."""
    n = 240
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "k": pa.array([None if i % 17 == 0 else f"c{i % 13}" for i in range(n)]),
            "amount": pa.array([(i * 37) % 50 for i in range(n)], pa.int64()),
            "ts": pa.array(
                [at(1_000 * i + (i * 7919) % 3_000) for i in range(n)], pa.timestamp("ms")
            ),
        }
    )


@pytest.fixture
def customers() -> pa.Table:
    """Customers c0..c14 (c13, c14 never order), several rows per key over time."""
    n = 60
    return pa.table(
        {
            "k": pa.array([None if j % 23 == 5 else f"c{j % 15}" for j in range(n)]),
            "name": pa.array([f"n{j}" for j in range(n)]),
            "score": pa.array([(j * 11) % 40 for j in range(n)], pa.int64()),
            "ts": pa.array(
                [at(4_000 * j + (j * 3371) % 2_000) for j in range(n)], pa.timestamp("ms")
            ),
        }
    )


@pytest.fixture(params=[1, 3], ids=lambda p: f"p{p}")
def env(request: pytest.FixtureRequest) -> ed.StreamEnvironment:
    return ed.StreamEnvironment(parallelism=request.param, batch_size=16)


def views(env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table) -> None:
    """Registers both tables as views with event time ``ts`` (3 s out of order)."""
    for name, table in (("orders", orders), ("customers", customers)):
        stream = env.from_arrow(table).assign_timestamps("ts", max_out_of_orderness="3s")
        env.create_temporary_view(name, stream)


def run(env: ed.StreamEnvironment, stream: ed.DataStream) -> list[dict[str, Any]]:
    handle = stream.collect()
    env.execute("sql-join")
    return handle.to_pylist()


def matches_duckdb(
    env: ed.StreamEnvironment,
    query: str,
    orders: pa.Table,
    customers: pa.Table,
    *,
    at_least: int = 1,
) -> None:
    """Registers the views, runs ``query`` and checks its rows are DuckDB's (at
    least ``at_least`` of them, so the check is not vacuous)."""
    views(env, orders, customers)
    want = duck(query, orders=orders, customers=customers)
    assert len(want) >= at_least
    same_rows(run(env, env.sql(query)), want)


def join_specs(env: ed.StreamEnvironment) -> list[JoinSpec]:
    return [n.spec for n in env._graph.nodes if isinstance(n.spec, JoinSpec)]


# ---- equi-joins ----------------------------------------------------------------


def test_inner_equi_join_matches_duckdb(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table
) -> None:
    query = "SELECT o.id, o.k, o.amount, c.name FROM orders o JOIN customers c ON o.k = c.k"
    matches_duckdb(env, query, orders, customers, at_least=501)


def test_select_star_names_a_taken_right_column_with_suffix(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table
) -> None:
    views(env, orders, customers)
    out = env.sql("SELECT * FROM orders AS o JOIN customers AS c ON o.k = c.k")
    assert out.schema.names == ["id", "k", "amount", "ts", "k_right", "name", "score", "ts_right"]
    want = duck(
        "SELECT o.*, c.k AS k_right, c.name, c.score, c.ts AS ts_right "
        "FROM orders o JOIN customers c ON o.k = c.k",
        orders=orders,
        customers=customers,
    )
    same_rows(run(env, out), want)


def test_equi_join_conditions_before_and_after_the_join(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table
) -> None:
    # One-sided conditions filter an input; the two-sided one runs after the join.
    query = (
        "SELECT o.id, c.name, o.amount - c.score AS margin FROM orders o JOIN customers c "
        "ON o.k = c.k AND o.amount > c.score WHERE o.amount % 2 = 0 AND c.name <> 'n3'"
    )
    matches_duckdb(env, query, orders, customers, at_least=101)


def test_comma_join_with_where_equality(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table
) -> None:
    query = "SELECT o.id, c.name FROM orders o, customers c WHERE o.k = c.k AND o.id < 50"
    matches_duckdb(env, query, orders, customers)


def test_join_of_subqueries_and_a_key_with_two_columns(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table
) -> None:
    query = (
        "WITH a AS (SELECT k, amount % 4 AS bucket, id FROM orders), "
        "b AS (SELECT k AS ck, score % 4 AS bucket, name FROM customers) "
        "SELECT a.id, a.bucket, b.name FROM a JOIN b ON a.k = b.ck AND b.bucket = a.bucket"
    )
    matches_duckdb(env, query, orders, customers)


def test_state_ttl_of_views_and_query() -> None:
    def ttl(view_ttls: dict[str, str], query_ttl: str | None) -> int | None:
        env = ed.StreamEnvironment()
        for name in ("a", "b"):
            rows = env.from_collection([{"k": 1, "t": 0}]).assign_timestamps("t")
            env.create_temporary_view(name, rows, state_ttl=view_ttls.get(name))
        env.sql("SELECT a.k FROM a JOIN b ON a.k = b.k", state_ttl=query_ttl)
        [spec] = join_specs(env)
        return spec.state_ttl_ms

    assert ttl({}, None) is None
    assert ttl({}, "1 hour") == 3_600_000
    assert ttl({"a": "10s"}, None) is None  # b keeps its rows: the join keeps them
    assert ttl({"a": "10s"}, "1s") == 10_000  # the larger: each view's rows live as long
    assert ttl({"a": "10s", "b": "2min"}, "1s") == 120_000


def test_equi_join_sql_and_dsl_twin_explain_the_same() -> None:
    def job(use_sql: bool) -> str:
        env = ed.StreamEnvironment(parallelism=2)
        a = env.from_collection([{"k": 1, "v": 2, "t": 0}]).assign_timestamps("t")
        b = env.from_collection([{"id": 1, "w": 3, "t": 0}]).assign_timestamps("t")
        if use_sql:
            a.create_temporary_view("a", state_ttl="1min")
            b.create_temporary_view("b", state_ttl="1min")
            out = env.sql("SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.id WHERE b.w > 0")
        else:
            out = a.join(b.filter(ed.col("w") > 0), left_on="k", right_on="id", state_ttl="1min")
            out = out.select("k", "v", "w")
        out.collect()
        return env.explain()

    assert job(True) == job(False)


# ---- interval joins ------------------------------------------------------------

INTERVAL_CONDITIONS = {
    "between": "o.ts BETWEEN c.ts - INTERVAL '5' SECOND AND c.ts + INTERVAL '10' SECOND",
    "compare": "o.ts >= c.ts - INTERVAL '5' SECOND AND c.ts + INTERVAL '10' SECOND >= o.ts",
    "strict": "c.ts < o.ts + INTERVAL '5' SECOND AND o.ts - INTERVAL '10' SECOND < c.ts",
}


@pytest.mark.parametrize("how", ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL OUTER JOIN"])
@pytest.mark.parametrize("spelling", sorted(INTERVAL_CONDITIONS))
def test_interval_join_matches_duckdb(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table, how: str, spelling: str
) -> None:
    views(env, orders, customers)
    query = (
        f"SELECT o.id, o.k, c.k AS ck, c.name, c.ts AS cts FROM orders o {how} customers c "
        f"ON o.k = c.k AND {INTERVAL_CONDITIONS[spelling]}"
    )
    got = run(env, env.sql(query))
    want = duck(query, orders=orders, customers=customers)
    assert any(r["name"] is None for r in want) == (how in ("LEFT JOIN", "FULL OUTER JOIN"))
    assert any(r["id"] is None for r in want) == (how in ("RIGHT JOIN", "FULL OUTER JOIN"))
    same_rows(got, want)


def test_interval_bounds_reach_the_dsl_join(orders: pa.Table, customers: pa.Table) -> None:
    env = ed.StreamEnvironment()
    views(env, orders, customers)
    for condition, within in [
        (INTERVAL_CONDITIONS["between"], (-10_000, 5_000)),
        (INTERVAL_CONDITIONS["strict"], (-9_999, 4_999)),
    ]:
        env.sql(f"SELECT o.id FROM orders o JOIN customers c ON o.k = c.k AND {condition}")
        assert join_specs(env)[-1].within == within, condition


def test_interval_join_on_int64_milliseconds(env: ed.StreamEnvironment) -> None:
    a = [{"k": i % 5, "t": 700 * i, "x": i} for i in range(120)]
    b = [{"k": j % 5, "t": 1_100 * j, "y": j} for j in range(80)]
    env.from_collection(a).assign_timestamps("t").create_temporary_view("a")
    env.from_collection(b).assign_timestamps("t").create_temporary_view("b")
    query = "SELECT a.x, b.y FROM a JOIN b ON a.k = b.k AND b.t BETWEEN a.t - 1500 AND a.t + 500"
    got = run(env, env.sql(query))
    want = duck(query, a=pa.Table.from_pylist(a), b=pa.Table.from_pylist(b))
    assert len(want) > 20
    same_rows(got, want)


# ---- window joins --------------------------------------------------------------


@pytest.mark.parametrize(
    "tvf",
    [
        "TUMBLE(TABLE {t}, DESCRIPTOR(ts), INTERVAL '10' SECOND)",
        "HOP(TABLE {t}, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '15' SECOND)",
    ],
    ids=["tumble", "hop"],
)
def test_window_join_matches_duckdb(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table, tvf: str
) -> None:
    views(env, orders, customers)
    query = (
        # R.window_end is named window_end_right (L's has the name); AS names it.
        "SELECT L.id, L.k, R.name, L.window_start, R.window_end AS we "
        f"FROM (SELECT * FROM TABLE({tvf.format(t='orders')})) L "
        "JOIN (SELECT k, name, window_start, window_end "
        f"FROM TABLE({tvf.format(t='customers')})) R "
        "ON L.k = R.k AND L.window_start = R.window_start AND L.window_end = R.window_end"
    )
    got = run(env, env.sql(query))
    hop = tvf.startswith("HOP")
    size, slide = (15_000, 5_000) if hop else (10_000, 10_000)
    want = _window_join_reference(orders, customers, size, slide)
    assert len(want) > 20  # 31 pairs for TUMBLE, more for HOP
    same_rows(got, want)


def _window_join_reference(
    orders: pa.Table, customers: pa.Table, size: int, slide: int
) -> list[dict[str, Any]]:
    """DuckDB: each row in its windows (epoch-aligned, as Flink's), then an equi-join."""

    def windows(t: str) -> str:
        return (
            f"(SELECT *, to_timestamp(0)::TIMESTAMP + to_milliseconds(s) AS window_start, "
            f"to_timestamp(0)::TIMESTAMP + to_milliseconds(s + {size}) AS window_end FROM "
            f"(SELECT *, unnest(range(ms - ms % {slide} - {size} + {slide}, "
            f"ms - ms % {slide} + 1, {slide})) AS s "
            # DuckDB 2.0 takes no epoch_ms of an Arrow timestamp[ms]: via TIMESTAMP
            f"FROM (SELECT *, epoch_ms(ts::TIMESTAMP) AS ms FROM {t})))"
        )

    return duck(
        f"SELECT L.id, L.k, R.name, L.window_start, R.window_end AS we FROM {windows('orders')} L "
        f"JOIN {windows('customers')} R ON L.k = R.k AND L.window_start = R.window_start",
        orders=orders,
        customers=customers,
    )


# ---- temporal joins ------------------------------------------------------------


@pytest.mark.parametrize("how", ["JOIN", "LEFT JOIN"])
def test_temporal_join_matches_duckdb_asof(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table, how: str
) -> None:
    views(env, orders, customers)
    query = (
        f"SELECT o.id, o.k, c.name, c.score FROM orders AS o {how} customers "
        "FOR SYSTEM_TIME AS OF o.ts AS c ON o.k = c.k"
    )
    got = run(env, env.sql(query))
    asof = "ASOF LEFT JOIN" if how == "LEFT JOIN" else "ASOF JOIN"
    want = duck(
        f"SELECT o.id, o.k, c.name, c.score FROM orders o {asof} customers c "
        "ON o.k = c.k AND o.ts >= c.ts",
        orders=orders,
        customers=customers,
    )
    assert len([r for r in want if r["name"] is not None]) > 100
    same_rows(got, want)


def test_temporal_join_without_alias_keeps_the_view_name(
    env: ed.StreamEnvironment, orders: pa.Table, customers: pa.Table
) -> None:
    views(env, orders, customers)
    query = (
        "SELECT orders.id, customers.name FROM orders JOIN customers FOR SYSTEM_TIME AS OF "
        "orders.ts ON orders.k = customers.k WHERE orders.amount > 20"
    )
    want = duck(
        "SELECT o.id, c.name FROM orders o ASOF JOIN customers c ON o.k = c.k AND o.ts >= c.ts "
        "WHERE o.amount > 20",
        orders=orders,
        customers=customers,
    )
    same_rows(run(env, env.sql(query)), want)


# ---- what a stream cannot join -------------------------------------------------


@pytest.mark.parametrize(
    ("query", "construct", "match"),
    [
        ("SELECT o.id FROM orders o JOIN customers c ON o.amount > c.score", "JOIN", "equality"),
        ("SELECT o.id FROM orders o LEFT JOIN customers c ON o.k = c.k", "JOIN", "time bound"),
        (
            "SELECT o.id FROM orders o JOIN customers c ON o.k = c.k AND o.ts >= c.ts",
            "JOIN",
            "lower and an upper bound",
        ),
        (
            "SELECT o.id FROM orders o LEFT JOIN customers c ON o.k = c.k AND "
            "o.ts BETWEEN c.ts AND c.ts + INTERVAL '1' SECOND AND o.amount > c.score",
            "JOIN",
            "outer join",
        ),
        ("SELECT o.id FROM orders o CROSS JOIN customers c", "JOIN", "equality"),
        (
            "SELECT o.id FROM orders o LEFT SEMI JOIN customers c ON o.k = c.k",
            "JOIN",
            "not supported",
        ),
        (
            "SELECT o.id FROM orders o JOIN customers FOR SYSTEM_TIME AS OF o.id AS c ON o.k = c.k",
            "FOR SYSTEM_TIME AS OF",
            "event-time column",
        ),
        (
            "SELECT o.id FROM orders o FULL JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c "
            "ON o.k = c.k",
            "JOIN",
            "inner or LEFT",
        ),
        (
            "SELECT L.id FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' SECOND)) L "
            "JOIN customers c ON L.k = c.k",
            "JOIN",
            "only one",
        ),
        (
            "SELECT L.id FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' SECOND)) L "
            "JOIN TABLE(TUMBLE(TABLE customers, DESCRIPTOR(ts), INTERVAL '2' SECOND)) R "
            "ON L.k = R.k AND L.window_start = R.window_start AND L.window_end = R.window_end",
            "JOIN",
            "same windowing",
        ),
        (
            "SELECT L.id FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' SECOND)) L "
            "JOIN TABLE(TUMBLE(TABLE customers, DESCRIPTOR(ts), INTERVAL '1' SECOND)) R "
            "ON L.k = R.k",
            "JOIN",
            "window_start",
        ),
    ],
)
def test_joins_a_stream_cannot_run_are_named_errors(
    orders: pa.Table, customers: pa.Table, query: str, construct: str, match: str
) -> None:
    env = ed.StreamEnvironment()
    views(env, orders, customers)
    assert_refused(env, query, construct, match)


def test_interval_on_a_column_that_is_not_event_time_is_not_a_time_bound() -> None:
    env = ed.StreamEnvironment()
    rows = [{"k": 1, "t": 0, "u": 0}]
    env.from_collection(rows).assign_timestamps("t").create_temporary_view("a")
    env.from_collection(rows).assign_timestamps("t").create_temporary_view("b")
    # u is not the event time: an inner join keeps the condition as a filter.
    env.sql("SELECT a.k FROM a JOIN b ON a.k = b.k AND a.u BETWEEN b.u - 5 AND b.u + 5")
    assert join_specs(env)[-1].within is None
    with pytest.raises(ed.SqlError, match="outer join"):
        env.sql("SELECT a.k FROM a LEFT JOIN b ON a.k = b.k AND a.u BETWEEN b.u - 5 AND b.u + 5")
