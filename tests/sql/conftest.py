"""Helpers of the SQL tests: the DuckDB reference and exact comparisons (over the
events timed by ``t`` too), a query's plan against its DSL twin's, reference session
windows, unreadable Parquet columns, a Spark session for PySpark's reference runs, and
the kill tests' killed and restored run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# These suites need the native extension: a missing build must fail, never skip.
import eddyline as ed
import eddyline._core
from support.parquet import corrupt_column

from .kill import Killed, run_killed


def duck(query: str, **tables: pa.Table) -> list[dict[str, Any]]:
    """``query`` run by DuckDB over the given Arrow tables, as rows."""
    con = duckdb.connect()
    try:
        for name, table in tables.items():
            con.register(name, table)
        result: list[dict[str, Any]] = con.sql(query).to_arrow_table().to_pylist()
        return result
    finally:
        con.close()


def _sortable(value: Any) -> tuple[Any, ...]:
    """``value`` as a sort key: None after every value, structs (dicts) by their
    fields, lists by their items, so rows holding them sort."""
    if value is None:
        return (1,)
    if isinstance(value, dict):
        return (0, tuple((k, _sortable(v)) for k, v in sorted(value.items())))
    if isinstance(value, list | tuple):
        return (0, tuple(_sortable(v) for v in value))
    return (0, value)


def rows_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """A sort key for rows holding None, structs and lists."""
    return tuple(_sortable(v) for v in row.values())


def same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Asserts two row lists are equal as multisets, column names included."""
    assert sorted(got, key=rows_key) == sorted(want, key=rows_key)


@pytest.fixture
def events() -> pa.Table:
    """Events with a key, values (negative and null ones too), text and time (ms)."""
    n = 400
    return pa.table(
        {
            "k": pa.array([f"k{i % 7}" for i in range(n)], pa.string()),
            "v": pa.array([(i * 37) % 101 - 20 for i in range(n)], pa.int64()),
            "x": pa.array([None if i % 11 == 0 else i / 4 for i in range(n)], pa.float64()),
            "s": pa.array([f"Item-{i % 13}" if i % 9 else None for i in range(n)], pa.string()),
            "t": pa.array([1_000 * i + (i * 7919) % 3_000 for i in range(n)], pa.int64()),
        }
    )


@pytest.fixture(params=[1, 3], ids=lambda p: f"p{p}")
def env(request: pytest.FixtureRequest) -> ed.StreamEnvironment:
    """An environment at parallelism 1 and 3, in small batches (a test module
    that needs others defines its own)."""
    return ed.StreamEnvironment(parallelism=request.param, batch_size=32)


def run(env: ed.StreamEnvironment, stream: ed.DataStream) -> list[dict[str, Any]]:
    """Collects ``stream``, runs the job, returns the rows."""
    handle = stream.collect()
    env.execute("sql")
    return handle.to_pylist()


def timed(env: ed.StreamEnvironment, events: pa.Table) -> None:
    """``events`` as view ``events``, timed by ``t`` (3 s out of order)."""
    env.from_arrow(events).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "events"
    )


def assert_timed_as_duck(
    env: ed.StreamEnvironment, events: pa.Table, query: str, reference: str
) -> list[dict[str, Any]]:
    """Asserts that ``query`` over ``events`` (:func:`timed`) gives, as a multiset, the
    rows DuckDB gives for ``reference`` over the same rows; returns those rows (for a
    test's checks that the comparison is not vacuous)."""
    timed(env, events)
    want = duck(reference, events=events)
    same_rows(run(env, env.sql(query)), want)
    return want


def assert_twin_plans(
    rows: list[dict[str, Any]],
    query: str,
    dsl: Callable[[ed.DataStream], ed.DataStream],
    *,
    time_column: str | None = None,
) -> None:
    """Asserts that ``query`` over ``rows`` as the view ``r`` (with event time
    ``time_column``) plans as its DSL twin ``dsl`` of the same stream: equal
    ``explain()`` text, operators, partitioning and schemas included."""

    def plan(use_sql: bool) -> str:
        env = ed.StreamEnvironment(parallelism=2)
        stream = env.from_collection(rows)
        if time_column is not None:
            stream = stream.assign_timestamps(time_column)
        if use_sql:
            stream.create_temporary_view("r")
            out = env.sql(query)
        else:
            out = dsl(stream)
        out.collect()
        return env.explain()

    assert plan(True) == plan(False)


def assert_refused(env: ed.StreamEnvironment, query: str, construct: str, match: str) -> None:
    """Asserts that ``env.sql(query)`` fails at once with the ``SqlError`` (an
    ``EddylineError``) of ``construct``, its message naming it and matching ``match``."""
    with pytest.raises(ed.SqlError, match=match) as info:
        env.sql(query)
    assert info.value.construct == construct
    assert isinstance(info.value, ed.EddylineError)
    assert str(info.value).startswith(f"SQL {construct}")


SESSION_GAP_MS = 3_000


def session_view(env: ed.StreamEnvironment) -> list[dict[str, Any]]:
    """Rows of two keys in sessions of gap 3 s (some exactly 3 s apart, so in two
    sessions), out of order within 60 s, registered as the view ``s`` with event
    time ``t``; returns the rows."""
    times = [0, 1000, 2500, 9000, 9500, 20000, 20100, 26000, 40000]
    rows = [{"k": f"k{i % 2}", "t": t + i % 2, "v": i} for i, t in enumerate(times * 3)]
    env.from_collection(rows).assign_timestamps(
        "t", max_out_of_orderness="60s"
    ).create_temporary_view("s")
    return rows


def sessions(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The reference session windows of ``rows`` (gap ``SESSION_GAP_MS``): per key,
    each session's rows by time; a row ``SESSION_GAP_MS`` after the last starts a
    new one."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for key in sorted({r["k"] for r in rows}):
        session: list[dict[str, Any]] = []
        for row in sorted((r for r in rows if r["k"] == key), key=lambda r: r["t"]):
            if session and row["t"] - session[-1]["t"] >= SESSION_GAP_MS:
                out.append((key, session))
                session = []
            session.append(row)
        out.append((key, session))
    return out


def write_broken(path: Path, table: pa.Table, column: str, *, row_group_size: int) -> Path:
    """``table`` as an uncompressed Parquet file whose ``column`` cannot be decoded:
    a query that reads it fails, one that never reads it does not."""
    pq.write_table(table, path, row_group_size=row_group_size, compression="none")
    corrupt_column(path, column)
    with pytest.raises(Exception):  # noqa: B017 - the premise: the column is unreadable
        pq.read_table(path)
    return path


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A local[2] Spark session (batch SQL over a test's rows), times in UTC, one per
    test module that asks for it."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName(f"eddyline-{request.module.__name__.rsplit('.', 1)[-1]}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(params=[(2, 3), (3, 1)], ids=lambda p: f"p{p[0]}-p{p[1]}")
def killed(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> Killed:
    """A kill test's run (``kill.run_killed``): its job ``body`` over sequences of
    ``n``, SIGKILLed at parallelism 2 and restored at 3, and at 3 and restored at 1;
    returns the output directory and the last run's stdout."""
    first, later = request.param

    def run(body: str, n: int) -> tuple[Path, str]:
        return run_killed(body, n, tmp_path, monkeypatch, seed, first, later)

    return run
