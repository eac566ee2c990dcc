"""env.sql reads only the columns a query uses: a view's other columns are
dropped right after its stream, and over ``from_parquet`` (timed by
``assign_timestamps`` or not) never even read from the file.

The proof is a file whose unused column chunk is garbage: reading it fails, and a
query that never reads that column succeeds on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed

from .conftest import assert_twin_plans, same_rows, write_broken

N = 3_000


@pytest.fixture
def broken_extra(tmp_path: Path) -> Path:
    """Bids whose ``extra`` column cannot be decoded."""
    table = pa.table(
        {
            "bidder": pa.array([i % 13 for i in range(N)], pa.int64()),
            "extra": pa.array([f"padding-{i}-" * 8 for i in range(N)]),
            "price": pa.array([i * 7 % 1000 for i in range(N)], pa.int64()),
            "date_time": pa.array([i * 100 for i in range(N)], pa.int64()),
        }
    )
    return write_broken(tmp_path / "bid.parquet", table, "extra", row_group_size=1_000)


def reference(path: Path, query: str) -> list[dict[str, Any]]:
    readable = pq.read_table(path, columns=["bidder", "price", "date_time"])
    con = duckdb.connect()
    con.register("bid", readable)
    rows: list[dict[str, Any]] = con.sql(query).to_arrow_table().to_pylist()
    con.close()
    return rows


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_windowed_query_over_a_timed_parquet_view_reads_only_its_columns(
    broken_extra: Path, parallelism: int
) -> None:
    env = ed.StreamEnvironment(parallelism)
    env.from_parquet(broken_extra).assign_timestamps("date_time").create_temporary_view("bid")
    query = """
        SELECT bidder, count(*) AS n, window_start
        FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' SECOND))
        GROUP BY bidder, window_start, window_end
    """
    out = env.sql(query).collect()
    env.execute("pruned")
    # Bids of one bidder are 1.3 s apart: every bid is a session of its own.
    want = reference(
        broken_extra,
        "SELECT bidder, count(*) AS n, date_time AS window_start FROM bid GROUP BY ALL",
    )
    same_rows(out.to_pylist(), want)


def test_a_running_aggregate_over_a_parquet_view_reads_only_its_columns(
    broken_extra: Path,
) -> None:
    env = ed.StreamEnvironment(2)
    env.from_parquet(broken_extra).create_temporary_view("bid")
    query = "SELECT bidder, max(price) AS top FROM bid WHERE price > 500 GROUP BY bidder"
    out = env.sql(query).collect()
    env.execute("pruned")
    final: dict[int, int] = {}
    for row in out.to_pylist():
        final[row["bidder"]] = max(final.get(row["bidder"], row["top"]), row["top"])
    got = [{"bidder": b, "top": t} for b, t in final.items()]
    same_rows(got, reference(broken_extra, query))


def test_the_pruned_plan_is_the_dsl_job_that_selects_first() -> None:
    assert_twin_plans(
        [{"k": "a", "wide": "x" * 10, "v": 1, "t": 5}],
        "SELECT k, sum(v) AS s FROM r WHERE v > 0 GROUP BY k",
        lambda rows: (
            rows.select("k", "v")
            .filter(ed.col("v") > 0)
            .key_by("k")
            .sum("v")
            .select("k", ed.col("v").alias("s"))
        ),
    )
