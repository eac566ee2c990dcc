"""env.sql: SELECT, WHERE, expressions, aliases, UNION ALL, WITH and
subqueries in FROM, exact against DuckDB; composition with the DSL and sinks."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import eddyline as ed

from .conftest import assert_refused, assert_twin_plans, duck, same_rows


def run(env: ed.StreamEnvironment, stream: ed.DataStream) -> list[dict[str, object]]:
    handle = stream.collect()
    env.execute("sql")
    return handle.to_pylist()


@pytest.fixture(params=[1, 3], ids=lambda p: f"p{p}")
def env(request: pytest.FixtureRequest) -> ed.StreamEnvironment:
    return ed.StreamEnvironment(parallelism=request.param, batch_size=64)


def test_select_where_expressions_match_duckdb(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.from_arrow(events).create_temporary_view("events")
    query = """
        SELECT k, v * 2 + 1 AS w, v % 7 AS m, x / 2 AS half, upper(s) AS us,
               length(s) AS len, abs(v) AS a, CAST(v AS DOUBLE) AS vd,
               CASE WHEN v > 50 THEN 'big' WHEN v < 0 THEN 'neg' ELSE 'small' END AS size,
               coalesce(s, 'none') AS sn, s || '!' AS bang
        FROM events
        WHERE (v BETWEEN -5 AND 60 OR k IN ('k1', 'k2')) AND s LIKE 'Item-1%'
              AND x IS NOT NULL
    """
    got = run(env, env.sql(query))
    assert len(got) > 10
    same_rows(got, duck(query, events=events))


def test_select_star_and_is_null(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.create_temporary_view("e", env.from_arrow(events))
    query = "SELECT * FROM e WHERE s IS NULL OR x IS NULL"
    got = run(env, env.sql(query))
    assert got and set(got[0]) == {"k", "v", "x", "s", "t"}
    same_rows(got, duck(query, e=events))


def test_union_all_with_and_subquery(env: ed.StreamEnvironment, events: pa.Table) -> None:
    env.from_arrow(events).create_temporary_view("events")
    query = """
        WITH big AS (SELECT k, v FROM events WHERE v > 70),
             small AS (SELECT k AS key, v - 100 AS value FROM events WHERE v < -15)
        SELECT k, v FROM big
        UNION ALL
        SELECT key, value FROM small
        UNION ALL
        SELECT k, w FROM (SELECT k, v * 10 AS w FROM events WHERE k = 'k3') AS sub WHERE w > 500
    """
    got = run(env, env.sql(query))
    want = duck(query, events=events)
    assert len(want) > 20
    same_rows(got, want)


def test_sql_composes_with_the_dsl_and_sinks(tmp_path: object, events: pa.Table) -> None:
    env = ed.StreamEnvironment(parallelism=2, batch_size=64)
    # A view over a DSL stream, the query's result feeding DSL operators and a file sink.
    dsl = env.from_arrow(events).filter(ed.col("v") > 0).with_columns(v3=ed.col("v") * 3)
    dsl.create_temporary_view("pos")
    result = env.sql("SELECT k, v3 FROM pos WHERE v3 % 2 = 0")
    doubled = result.with_columns(v6=ed.col("v3") * 2).filter(ed.col("k") != "k0")
    handle = doubled.collect()
    out = str(tmp_path)
    result.sink_to(ed.ParquetSink(out))
    env.execute("sql-dsl")
    want = duck(
        "SELECT k, v * 3 AS v3, v * 6 AS v6 FROM e WHERE v > 0 AND (v * 3) % 2 = 0 AND k <> 'k0'",
        e=events,
    )
    same_rows(handle.to_pylist(), want)
    files = ds.dataset(out).to_table().to_pylist()
    same_rows(files, duck("SELECT k, v * 3 AS v3 FROM e WHERE v > 0 AND (v * 3) % 2 = 0", e=events))


def test_sql_and_dsl_twin_explain_the_same() -> None:
    # The query reads k and v only: SQL drops t at the source (column pruning).
    assert_twin_plans(
        [{"k": "a", "v": 1, "t": 5}],
        "SELECT k, v + 1 AS w FROM r WHERE v > 0",
        lambda rows: (
            rows.select("k", "v").filter(ed.col("v") > 0).select("k", (ed.col("v") + 1).alias("w"))
        ),
    )


def test_projection_over_a_wider_view_is_one_select() -> None:
    # The view's columns the projection reads are not picked by a select of their own.
    assert_twin_plans(
        [{"a": 1, "b": 10, "c": "x", "d": 0.5}],
        "SELECT a, b * 2 AS b2 FROM r",
        lambda rows: rows.select("a", (ed.col("b") * 2).alias("b2")),
    )


def test_view_needs_a_stream_of_this_environment() -> None:
    env = ed.StreamEnvironment()
    other = ed.StreamEnvironment()
    with pytest.raises(ed.GraphError, match="another StreamEnvironment"):
        env.create_temporary_view("t", other.from_sequence(0, 3))
    env.create_temporary_view("t", env.from_sequence(0, 3))
    with pytest.raises(ed.GraphError, match="already exists"):
        env.from_sequence(0, 3).create_temporary_view("t")


@pytest.mark.parametrize(
    ("query", "construct", "match"),
    [
        ("SELECT v FROM t ORDER BY v", "ORDER BY", "global ORDER BY"),
        ("SELECT v FROM t LIMIT 3", "LIMIT", "LIMIT"),
        ("SELECT v FROM nowhere", "table", "nowhere"),
        ("SELECT nope FROM t", "column", "nope"),
        ("SELECT a.v FROM t a JOIN t b ON a.v < b.v", "JOIN", "join"),
        ("SELECT DISTINCT v FROM t", "DISTINCT", "DISTINCT"),
        ("SELECT v FROM t UNION SELECT v FROM t", "DISTINCT", "UNION"),
        ("SELECT 1", "FROM", "FROM"),
        ("SELECT v, sum(v) OVER (PARTITION BY v) FROM t", "OVER", "OVER"),
        ("SELECT v FROM t; SELECT v FROM t", "statement", "one query"),
        ("SELEC v FROM t", "syntax", "SELEC"),
        ("SELECT no_such_function(v) FROM t", "function", "no_such_function"),
        ("SELECT v FROM t WHERE v IN (SELECT v FROM t)", "subquery expression", "subquer"),
    ],
)
def test_unsupported_sql_is_an_error_naming_the_construct(
    query: str, construct: str, match: str
) -> None:
    env = ed.StreamEnvironment()
    env.from_sequence(0, 3).select(ed.col("value").alias("v")).create_temporary_view("t")
    assert_refused(env, query, construct, match)
