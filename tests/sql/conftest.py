"""Helpers of the SQL tests: the DuckDB reference and exact comparisons."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa
import pytest

# These suites need the native extension: a missing build must fail, never skip.
import eddyline as ed
import eddyline._core


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
