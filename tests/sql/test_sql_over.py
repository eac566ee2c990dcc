"""Over windows (docs/API.md "Over windows"): ``keyed.over_rows(...)``,
``keyed.over_range(...)`` and SQL's ``agg(col) OVER (PARTITION BY k ORDER BY ts
ROWS|RANGE BETWEEN n|INTERVAL|UNBOUNDED PRECEDING AND CURRENT ROW)`` against DuckDB's
window functions on random rows with event-time ties, nulls and late rows, at
parallelism 1 to 3; the SQL plan against its DSL twin; and the shapes a stream
cannot run, each a named ``SqlError``."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F
from eddyline.config import parse_duration

from .conftest import assert_refused, assert_twin_plans, duck, run, same_rows

ROUNDS = 12
ROUND_ROWS = 40
BATCH = 16
BOUND_MS = 1_000

SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("ts", pa.int64()),
        ("u", pa.int64()),
        ("v", pa.int64()),
        ("x", pa.float64()),
    ]
)


def random_rows(rng: random.Random) -> tuple[list[dict[str, Any]], int]:
    """Rows in rounds of 1 s of event time, shuffled within a round (on time under
    an out-of-orderness bound of 1 s), few keys and times (ties of event time and of
    whole rows), null values; after each round from the fourth a few late rows of
    three rounds before (the watermark has passed them: they come ``BATCH`` rows or
    more after the round that moved it). Returns the rows and how many are late."""
    rows: list[dict[str, Any]] = []
    late = 0

    def row(t: int) -> dict[str, Any]:
        return {
            "k": f"k{rng.randrange(4)}",
            "ts": t,
            "u": rng.randrange(3),
            "v": rng.choice([None, *range(-5, 20)]),
            "x": rng.choice([None, 0.5, 1.25, -2.0, 8.0]),
        }

    for r in range(ROUNDS):
        batch = [row(r * 1_000 + rng.choice([0, 10, 500, 999])) for _ in range(ROUND_ROWS)]
        rng.shuffle(batch)
        rows.extend(batch)
        if r >= 3:
            for _ in range(rng.randrange(3)):
                rows.append({**row((r - 3) * 1_000 + rng.randrange(1_000)), "late": True})
                late += 1
    return rows, late


AGGS = (
    "sum(v) OVER w AS s, count(1) OVER w AS n, count(v) OVER w AS nv, "
    "avg(v) OVER w AS a, min(x) OVER w AS lo, max(v) OVER w AS hi"
)
"""The aggregates every DuckDB comparison here selects over ``WINDOW w``."""


def reference(rows: list[dict[str, Any]], preceding: int | str) -> list[dict[str, Any]]:
    """DuckDB's window functions over the rows that are not late, ties ordered as
    the over window orders them (``u``, then the other columns, nulls first), over
    ``preceding`` rows or ``UNBOUNDED``."""
    return reference_framed(
        rows,
        "PARTITION BY k ORDER BY ts, u, v NULLS FIRST, x NULLS FIRST "
        f"ROWS BETWEEN {preceding} PRECEDING AND CURRENT ROW",
    )


def reference_framed(rows: list[dict[str, Any]], frame: str) -> list[dict[str, Any]]:
    """DuckDB's window functions of the ``WINDOW w AS (frame)`` over the rows that
    are not late."""
    table = pa.Table.from_pylist([r for r in rows if "late" not in r], schema=SCHEMA)
    return duck(
        f"""
        SELECT k, ts, u, v, x, {AGGS}
        FROM t WINDOW w AS ({frame})
        """,
        t=table,
    )


def source(env: ed.StreamEnvironment, rows: list[dict[str, Any]]) -> ed.DataStream:
    """The rows in order from one source subtask, timed by ``ts`` with a bound of 1 s."""
    plain = [{k: v for k, v in r.items() if k != "late"} for r in rows]
    table = pa.Table.from_pylist(plain, schema=SCHEMA)
    stream = env.from_arrow(table).set_parallelism(1)
    timed = stream.assign_timestamps("ts", max_out_of_orderness=f"{BOUND_MS}ms")
    return timed.set_parallelism(1)


def viewed(parallelism: int, seed: int) -> tuple[ed.StreamEnvironment, list[dict[str, Any]]]:
    """An environment of ``parallelism`` whose view ``t`` is ``source`` of
    ``random_rows`` drawn from ``seed``, and those rows."""
    rows, _ = random_rows(random.Random(seed))
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=BATCH)
    source(env, rows).create_temporary_view("t")
    return env, rows


def normalized(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Averages rounded to 9 digits (DuckDB may sum in another order)."""
    return [{**r, "a": None if r["a"] is None else round(r["a"], 9)} for r in rows]


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_over_rows_equals_duckdb_on_random_rows_with_ties_and_late_rows(
    parallelism: int, seed: int
) -> None:
    rng = random.Random(seed)
    rows, late = random_rows(rng)
    preceding = rng.choice([0, 1, 3, 9])
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=BATCH)
    over = (
        source(env, rows)
        .key_by("k")
        .over_rows(
            F.sum("v").alias("s"),
            F.count("*").alias("n"),
            F.count("v").alias("nv"),
            F.avg("v").alias("a"),
            F.min("x").alias("lo"),
            F.max("v").alias("hi"),
            preceding=preceding,
            order_by="u",
        )
        .name("over")
    )
    handle = over.collect()
    result = env.execute("over")
    assert late > 0
    assert result.metrics["operators"]["over"]["late_records"] == late
    same_rows(normalized(handle.to_pylist()), normalized(reference(rows, preceding)))


@pytest.mark.parametrize("parallelism", [1, 3])
def test_sql_over_equals_duckdb_and_names_aggregates_by_alias(parallelism: int, seed: int) -> None:
    env, rows = viewed(parallelism, seed)
    query = f"""
        SELECT k, ts, u, v, x, {AGGS}
        FROM t
        WINDOW w AS (PARTITION BY k ORDER BY ts, u ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)
    """
    got = run(env, env.sql(query))
    same_rows(normalized(got), normalized(reference(rows, 2)))


def test_sql_over_without_alias_is_named_as_f_names_it() -> None:
    env = ed.StreamEnvironment(batch_size=BATCH)
    rows = [{"k": "a", "t": t, "v": t * 2} for t in range(5)]
    env.from_collection(rows).assign_timestamps("t").create_temporary_view("r")
    out = env.sql(
        "SELECT k, t, avg(v) OVER (PARTITION BY k ORDER BY t ROWS 1 PRECEDING), "
        "count(*) OVER (PARTITION BY k ORDER BY t ROWS 1 PRECEDING) FROM r"
    )
    assert out.schema.names == ["k", "t", "avg(v)", "count(1)"]
    got = run(env, out)
    assert sorted((r["t"], r["avg(v)"], r["count(1)"]) for r in got) == [
        (0, 0.0, 1),
        (1, 1.0, 2),
        (2, 3.0, 2),
        (3, 5.0, 2),
        (4, 7.0, 2),
    ]


def test_sql_over_plans_as_its_dsl_twin() -> None:
    rows = [{"k": f"k{i % 3}", "t": i * 10, "v": i} for i in range(30)]
    query = (
        "SELECT k, t, avg(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING "
        "AND CURRENT ROW) AS m FROM r"
    )

    def dsl(stream: ed.DataStream) -> ed.DataStream:
        keyed = stream.key_by("k")
        return keyed.over_rows(F.avg("v").alias("m"), preceding=2).select("k", "t", "m")

    assert_twin_plans(rows, query, dsl, time_column="t")


def test_sql_over_reads_closed_groups_and_window_results() -> None:
    env = ed.StreamEnvironment(parallelism=2, batch_size=8)
    rows = [{"k": f"k{i % 2}", "t": i * 100, "v": i} for i in range(60)]
    env.from_collection(rows).assign_timestamps("t").create_temporary_view("r")
    out = env.sql(
        """
        SELECT k, window_end, sum(c) OVER (PARTITION BY k ORDER BY window_end
                                          ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS two
        FROM (SELECT k, window_start, window_end, count(*) AS c
              FROM TABLE(TUMBLE(TABLE r, DESCRIPTOR(t), INTERVAL '1' SECOND))
              GROUP BY k, window_start, window_end)
        """
    )
    got = run(env, out)
    # Per key 5 rows a second: each window's count plus the one before.
    assert sorted((r["k"], r["window_end"], r["two"]) for r in got) == sorted(
        (f"k{k}", (s + 1) * 1000, 5 if s == 0 else 10) for k in range(2) for s in range(6)
    )


AGGREGATES = (
    F.sum("v").alias("s"),
    F.count("*").alias("n"),
    F.count("v").alias("nv"),
    F.avg("v").alias("a"),
    F.min("x").alias("lo"),
    F.max("v").alias("hi"),
)


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_over_rows_unbounded_equals_duckdb_on_random_rows(parallelism: int, seed: int) -> None:
    rng = random.Random(seed)
    rows, late = random_rows(rng)
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=BATCH)
    keyed = source(env, rows).key_by("k")
    over = keyed.over_rows(*AGGREGATES, preceding=None, order_by="u").name("over")
    handle = over.collect()
    result = env.execute("over")
    assert result.metrics["operators"]["over"]["late_records"] == late > 0
    same_rows(normalized(handle.to_pylist()), normalized(reference(rows, "UNBOUNDED")))


RANGES: list[str | None] = ["1s", "500ms", "0ms", None]


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_over_range_equals_duckdb_on_random_rows_with_peers(parallelism: int, seed: int) -> None:
    rng = random.Random(seed)
    rows, late = random_rows(rng)
    preceding = rng.choice(RANGES)
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=BATCH)
    over = source(env, rows).key_by("k").over_range(*AGGREGATES, preceding=preceding)
    handle = over.name("over").collect()
    result = env.execute("over")
    assert result.metrics["operators"]["over"]["late_records"] == late > 0
    bound = "UNBOUNDED" if preceding is None else round(parse_duration(preceding) * 1000)
    frame = f"PARTITION BY k ORDER BY ts RANGE BETWEEN {bound} PRECEDING AND CURRENT ROW"
    got = handle.to_pylist()
    same_rows(normalized(got), normalized(reference_framed(rows, frame)))
    # Rows of one key and time (peers) came, so their shared frame was tested.
    assert len({(r["k"], r["ts"]) for r in got}) < len(got)


SQL_FRAMES = [
    ("ORDER BY ts, u ROWS UNBOUNDED PRECEDING", "ORDER BY ts, u, v NULLS FIRST, x NULLS FIRST "),
    (
        "ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
        "ORDER BY ts, u, v NULLS FIRST, x NULLS FIRST ",
    ),
    ("ORDER BY ts", "ORDER BY ts "),
    ("ORDER BY ts RANGE UNBOUNDED PRECEDING", "ORDER BY ts "),
    ("ORDER BY ts RANGE BETWEEN 1000 PRECEDING AND CURRENT ROW", "ORDER BY ts "),
    ("ORDER BY ts RANGE BETWEEN 10 PRECEDING AND CURRENT ROW", "ORDER BY ts "),
]


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize(("frame", "order"), SQL_FRAMES)
def test_sql_over_unbounded_and_range_frames_equal_duckdb(
    parallelism: int, frame: str, order: str, seed: int
) -> None:
    env, rows = viewed(parallelism, seed)
    select = f"""
        SELECT k, ts, u, v, x, {AGGS}
        FROM t WINDOW w AS (PARTITION BY k {{}})
    """
    got = run(env, env.sql(select.format(frame)))
    # DuckDB's frame: the same, its ROWS ties ordered as the over window orders them.
    duck_frame = frame.replace("ORDER BY ts, u ", "ORDER BY ts ").replace("ORDER BY ts ", order)
    if frame == "ORDER BY ts":
        duck_frame = "ORDER BY ts"
    same_rows(normalized(got), normalized(reference_framed(rows, f"PARTITION BY k {duck_frame}")))


@pytest.mark.parametrize("parallelism", [1, 3])
def test_sql_over_range_of_an_interval_over_a_timestamp_equals_duckdb(parallelism: int) -> None:
    rows = [
        {"k": f"k{i % 2}", "t": datetime(2024, 1, 1) + timedelta(milliseconds=i // 4 * 150)}
        for i in range(200)
    ]
    for i, r in enumerate(rows):
        r["v"] = None if i % 7 == 0 else i
    table = pa.Table.from_pylist(rows)
    table = table.set_column(1, "t", table.column("t").cast(pa.timestamp("ms")))
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=BATCH)
    env.from_arrow(table).assign_timestamps("t").create_temporary_view("r")
    query = """
        SELECT k, t, v, sum(v) OVER w AS s, count(*) OVER w AS n
        FROM r WINDOW w AS (PARTITION BY k ORDER BY t
                            RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW)
    """
    want = duck(query, r=table)
    assert max(w["n"] for w in want) > 10
    same_rows(run(env, env.sql(query)), want)


def test_sql_over_unbounded_and_range_frames_plan_as_their_dsl_twins() -> None:
    rows = [{"k": f"k{i % 3}", "t": i * 10, "v": i} for i in range(30)]

    def running(stream: ed.DataStream) -> ed.DataStream:
        keyed = stream.key_by("k")
        return keyed.over_rows(F.avg("v").alias("m"), preceding=None).select("k", "t", "m")

    def ranged(stream: ed.DataStream) -> ed.DataStream:
        keyed = stream.key_by("k")
        return keyed.over_range(F.avg("v").alias("m"), preceding="2s").select("k", "t", "m")

    def peers(stream: ed.DataStream) -> ed.DataStream:
        keyed = stream.key_by("k")
        return keyed.over_range(F.avg("v").alias("m"), preceding=None).select("k", "t", "m")

    over = "SELECT k, t, avg(v) OVER (PARTITION BY k ORDER BY t {}) AS m FROM r"
    assert_twin_plans(rows, over.format("ROWS UNBOUNDED PRECEDING"), running, time_column="t")
    assert_twin_plans(rows, over.format("RANGE 2000 PRECEDING"), ranged, time_column="t")
    assert_twin_plans(rows, over.format(""), peers, time_column="t")


@pytest.mark.parametrize("parallelism", [1, 3])
def test_sql_over_functions_of_different_overs_chain_and_equal_duckdb(
    parallelism: int, seed: int
) -> None:
    env, rows = viewed(parallelism, seed)
    # One ROWS frame (ties ordered as the over windows order them), the others
    # RANGE frames, whose rows of one time share their values: rows equal in
    # every column get equal values, so the comparison is exact.
    select = """
        SELECT k, ts, u, v, x,
               sum(v) OVER (PARTITION BY k ORDER BY ts, {ties} ROWS 2 PRECEDING) AS s,
               count(*) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN {ms} PRECEDING
                              AND CURRENT ROW) AS n,
               max(v) OVER (PARTITION BY u ORDER BY ts) AS hi,
               avg(v) OVER (PARTITION BY k ORDER BY ts RANGE UNBOUNDED PRECEDING) AS a
        FROM t
    """
    handle = env.sql(select.format(ties="u", ms=1000)).collect()
    text = env.explain()
    assert text.count("over_range '") == 3 and text.count("over_rows '") == 1, text
    env.execute("over")
    got = handle.to_pylist()
    want = duck(
        select.format(ties="u, v NULLS FIRST, x NULLS FIRST", ms=1000),
        t=pa.Table.from_pylist([r for r in rows if "late" not in r], schema=SCHEMA),
    )
    same_rows(normalized(got), normalized(want))


def test_over_range_explains_as_its_own_operator() -> None:
    env = ed.StreamEnvironment(parallelism=2)
    rows = [{"k": "a", "t": 1, "v": 2}]
    env.from_collection(rows).assign_timestamps("t").create_temporary_view("r")
    query = "SELECT k, t, sum(v) OVER (PARTITION BY k ORDER BY t RANGE 5 PRECEDING) AS s FROM r"
    env.sql(query).collect()
    text = env.explain()
    assert "over_range 'over_range_" in text, text
    assert "schema: k: string, t: int64, v: int64, s: int64" in text, text


REFUSED = [
    ("GROUPS", "sum(v) OVER (PARTITION BY k ORDER BY t GROUPS 1 PRECEDING)", "GROUPS frame"),
    ("RANGE", "sum(v) OVER (PARTITION BY k ORDER BY t, v)", "event time alone"),
    (
        "RANGE",
        "sum(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN INTERVAL '1' MONTH PRECEDING "
        "AND CURRENT ROW)",
        "INTERVAL of days",
    ),
    (
        "FOLLOWING",
        "sum(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)",
        "cannot wait for later rows",
    ),
    (
        "FOLLOWING",
        "sum(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN UNBOUNDED PRECEDING AND "
        "UNBOUNDED FOLLOWING)",
        "cannot wait for later rows",
    ),
    ("OVER", "sum(v) OVER (ORDER BY t ROWS 1 PRECEDING)", "without PARTITION BY"),
    ("OVER", "sum(v) OVER (ORDER BY t ROWS UNBOUNDED PRECEDING)", "without PARTITION BY"),
    ("ORDER BY", "sum(v) OVER (PARTITION BY k ORDER BY v ROWS 1 PRECEDING)", "event time 't'"),
    ("ORDER BY", "sum(v) OVER (PARTITION BY k ORDER BY t DESC ROWS 1 PRECEDING)", "ascending"),
    ("ORDER BY", "sum(v) OVER (PARTITION BY k ROWS 1 PRECEDING)", "without ORDER BY"),
    ("ORDER BY", "sum(v) OVER (PARTITION BY k)", "without ORDER BY"),
    ("OVER", "row_number() OVER (PARTITION BY k ORDER BY t)", "row_number"),
    ("OVER", "lag(v) OVER (PARTITION BY k ORDER BY t)", "lag"),
    (
        "OVER",
        "sum(v + 1) OVER (PARTITION BY k ORDER BY t ROWS 1 PRECEDING)",
        "aggregate a column",
    ),
]


@pytest.mark.parametrize(("construct", "select", "match"), REFUSED)
def test_sql_over_shapes_a_stream_cannot_run_are_named_errors(
    construct: str, select: str, match: str
) -> None:
    env = ed.StreamEnvironment()
    rows = [{"k": "a", "t": 1, "v": 2}]
    env.from_collection(rows).assign_timestamps("t").create_temporary_view("r")
    assert_refused(env, f"SELECT k, {select} FROM r", construct, match)


def test_sql_over_a_running_group_by_is_refused() -> None:
    env = ed.StreamEnvironment()
    rows = [{"k": "a", "t": 1, "v": 2}]
    env.from_collection(rows).assign_timestamps("t").create_temporary_view("r")
    query = (
        "SELECT k, sum(s) OVER (PARTITION BY k ORDER BY t ROWS 1 PRECEDING) AS m "
        "FROM (SELECT k, t, sum(v) AS s FROM r GROUP BY k, t)"
    )
    assert_refused(env, query, "OVER", "running GROUP BY")


def test_over_rows_bad_arguments_are_named_errors() -> None:
    env = ed.StreamEnvironment()
    rows = [{"k": "a", "t": 1, "v": 2, "s": "x"}]
    timed = env.from_collection(rows).assign_timestamps("t")
    keyed = timed.key_by("k")
    with pytest.raises(ed.GraphError, match="no event time"):
        env.from_collection(rows).key_by("k").over_rows(F.sum("v"), preceding=1)
    with pytest.raises(ed.GraphError, match="count_distinct"):
        keyed.over_rows(F.count_distinct("v"), preceding=1)
    with pytest.raises(ed.GraphError, match="one column as it is"):
        keyed.over_rows(F.sum(ed.col("v") + 1), preceding=1)
    with pytest.raises(ValueError, match="preceding"):
        keyed.over_rows(F.sum("v"), preceding=-1)
    with pytest.raises(TypeError, match=r"aggregates of eddyline\.functions"):
        keyed.over_rows("v", preceding=1)  # type: ignore[arg-type]
    with pytest.raises(ed.SchemaError, match="numeric column, but column 's'"):
        keyed.over_rows(F.avg("s"), preceding=1)
    with pytest.raises(ed.GraphError, match="name of another column"):
        keyed.over_rows(F.sum("v").alias("t"), preceding=1)
    with pytest.raises(ValueError, match="whole number of milliseconds"):
        keyed.over_range(F.sum("v"), preceding="0.5ms")
    with pytest.raises(ValueError, match="preceding"):
        keyed.over_range(F.sum("v"), preceding=-1)
    with pytest.raises(TypeError, match="duration or None"):
        keyed.over_range(F.sum("v"), preceding=True)
    with pytest.raises(ed.GraphError, match="no event time"):
        env.from_collection(rows).key_by("k").over_range(F.sum("v"), preceding="1s")
    with pytest.raises(ed.SchemaError, match="numeric column, but column 's'"):
        keyed.over_range(F.max("s"), preceding=None)
