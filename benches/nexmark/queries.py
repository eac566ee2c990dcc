"""Nexmark queries on eddyline, each paired with the same query in DuckDB SQL.

The queries follow the nexmark-flink project's SQL (``queries/q*.sql``) over
the tables of :mod:`generator` (columns ``snake_case``: ``date_time``, not
``dateTime``):

- ``q0`` passthrough: every bid's ``auction, bidder, price, date_time, extra``;
- ``q1`` currency conversion: the same with ``price * 908 // 1000`` (dollars to
  euros in integer arithmetic; nexmark-flink multiplies by the decimal 0.908);
- ``q2`` selection: ``auction, price`` of the bids with ``auction % 123 == 0``;
- ``q5`` hot items: per sliding window of 10 s every 2 s (epoch-aligned, on
  the bids' event time), the auction(s) with the most bids (ties all kept):
  ``auction, num, window_start, window_end``. nexmark-flink's SQL outputs
  ``auction, num`` only; the window bounds are kept here so that the rows can
  be compared exactly.

q5 is faithful (the auctions of the largest count per window, ties
included) but built differently from the SQL, as eddyline has no join yet
(the SQL takes the max per window and joins it back): a native sliding-window
count per auction; a vectorised ``map_batches`` combiner that drops, within
each batch, the rows below their window's largest count in that batch; then,
with the window start as a new event time, one 2 s tumbling window per
sliding window (keyed by its start) whose Python ``apply`` function keeps the
rows of the largest count.

The other Nexmark queries are not here yet: q3, q4, q6, q7, q8, q9 and q10+
need joins (streaming, interval or window joins), session windows (q11) or
processing-time windows (q12), none of which eddyline has so far.

Every ``qN(source, parallelism)`` runs the query with eddyline and returns the
collected rows as a ``pyarrow.Table``; ``duckdb_query(name, bid)`` runs the SQL;
:func:`compare` checks the two as multisets of rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import eddyline as ed

__all__ = [
    "QUERIES",
    "SQL",
    "build_q0",
    "build_q1",
    "build_q2",
    "build_q5",
    "compare",
    "duckdb_query",
    "q0",
    "q1",
    "q2",
    "q5",
    "run_query",
]

Source: TypeAlias = pa.Table | str
"""A query's input: the ``bid`` table, or the path of ``bid.parquet``."""

Q5_SIZE = "10s"
Q5_SLIDE = "2s"
_TS = pa.timestamp("ms")

# ---- the queries as eddyline streams -------------------------------------------------------


def build_q0(bids: ed.DataStream) -> ed.DataStream:
    """q0 passthrough: ``SELECT auction, bidder, price, date_time, extra FROM bid``."""
    return bids.select("auction", "bidder", "price", "date_time", "extra")


def build_q1(bids: ed.DataStream) -> ed.DataStream:
    """q1 currency conversion: the price in euros, ``price * 908 // 1000``."""
    return bids.select(
        "auction",
        "bidder",
        (ed.col("price") * 908 // 1000).alias("price"),
        "date_time",
        "extra",
    )


def build_q2(bids: ed.DataStream) -> ed.DataStream:
    """q2 selection: ``SELECT auction, price FROM bid WHERE auction % 123 = 0``."""
    return bids.filter(ed.col("auction") % 123 == 0).select("auction", "price")


Q5_SCHEMA = pa.schema(
    [
        ("starttime", _TS),
        ("window_start", _TS),
        ("window_end", _TS),
        ("auction", pa.int64()),
        ("num", pa.int64()),
        ("endtime", _TS),
    ]
)
"""The second stage's output: the key (``starttime``), its 2 s window, then the fields."""


def _hottest(key: Any, window: ed.TimeWindow, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of one sliding window with the largest bid count (all of them on a tie)."""
    top = max(row["num"] for row in rows)
    return [
        {"auction": row["auction"], "num": row["num"], "endtime": row["endtime"]}
        for row in rows
        if row["num"] == top
    ]


def _batch_top(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Keeps the rows whose count is the largest of their window within this batch.

    A combiner: a count below its window's largest in one batch is below the
    window's overall largest, so dropping it changes no result.
    """
    if batch.num_rows == 0:
        return batch
    start = batch.column("starttime").cast(pa.int64()).to_numpy()
    num = batch.column("num").to_numpy()
    windows, index = np.unique(start, return_inverse=True)
    top = np.zeros(len(windows), dtype=num.dtype)
    np.maximum.at(top, index, num)
    return batch.filter(pa.array(num == top[index]))


def build_q5(bids: ed.DataStream) -> ed.DataStream:
    """q5 hot items: per sliding window (10 s, every 2 s) the auction(s) with the most bids."""
    counts = (
        bids.select("auction", "date_time")
        .assign_timestamps("date_time")
        .key_by("auction")
        .window(ed.Sliding(Q5_SIZE, Q5_SLIDE))
        .count()
        .name("q5_bids_per_auction")
    )
    # One row per (auction, sliding window), emitted in window order by each subtask once
    # the watermark passes the window's end. Their window start is the event time of the
    # second stage: a 2 s tumbling window holds exactly one sliding window's rows. The bound
    # only adds slack (each window subtask emits its windows in order).
    per_window = counts.select(
        "auction",
        ed.col("count").alias("num"),
        ed.col("window_start").alias("starttime"),
        ed.col("window_end").alias("endtime"),
    )
    per_window = per_window.map_batches(_batch_top, schema=per_window.schema).name("q5_batch_top")
    per_window = per_window.assign_timestamps("starttime", max_out_of_orderness=Q5_SIZE)
    hottest = (
        per_window.key_by("starttime")
        .window(ed.Tumbling(Q5_SLIDE))
        .apply(_hottest, schema=Q5_SCHEMA)
        .name("q5_max_per_window")
    )
    return hottest.select(
        "auction",
        "num",
        ed.col("starttime").alias("window_start"),
        ed.col("endtime").alias("window_end"),
    )


BUILDERS: dict[str, Callable[[ed.DataStream], ed.DataStream]] = {
    "q0": build_q0,
    "q1": build_q1,
    "q2": build_q2,
    "q5": build_q5,
}


def run_query(name: str, bid: Source, parallelism: int = 1, batch_size: int = 8192) -> pa.Table:
    """Runs query ``name`` on eddyline over ``bid`` and returns the collected rows."""
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=batch_size)
    source = env.from_parquet(bid) if isinstance(bid, str) else env.from_arrow(bid)
    handle = BUILDERS[name](source).collect()
    env.execute(f"nexmark-{name}")
    return handle.to_arrow()


def q0(bid: Source, parallelism: int = 1) -> pa.Table:
    """q0 on eddyline (see :func:`build_q0`)."""
    return run_query("q0", bid, parallelism)


def q1(bid: Source, parallelism: int = 1) -> pa.Table:
    """q1 on eddyline (see :func:`build_q1`)."""
    return run_query("q1", bid, parallelism)


def q2(bid: Source, parallelism: int = 1) -> pa.Table:
    """q2 on eddyline (see :func:`build_q2`)."""
    return run_query("q2", bid, parallelism)


def q5(bid: Source, parallelism: int = 1) -> pa.Table:
    """q5 on eddyline (see :func:`build_q5`)."""
    return run_query("q5", bid, parallelism)


QUERIES: dict[str, Callable[[Source, int], pa.Table]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q5": q5,
}

# ---- the same queries in DuckDB SQL --------------------------------------------------------

SQL: dict[str, str] = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": """
        SELECT auction, bidder, price * 908 // 1000 AS price, date_time, extra FROM bid
    """,
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    # HOP(size 10 s, slide 2 s): a bid at t ms is in the 5 windows starting at
    # t - t % 2000 - i * 2000 for i in 0..4.
    "q5": """
        WITH hops AS (
            SELECT auction, epoch_ms(date_time::TIMESTAMP) AS t FROM bid
        ),
        counts AS (
            SELECT auction, t - t % 2000 - i * 2000 AS ws, count(*) AS num
            FROM hops, range(0, 5) AS r(i)
            GROUP BY ALL
        ),
        maxes AS (
            SELECT ws, max(num) AS maxn FROM counts GROUP BY ws
        )
        SELECT c.auction, c.num,
               epoch_ms(c.ws)::TIMESTAMP_MS AS window_start,
               epoch_ms(c.ws + 10000)::TIMESTAMP_MS AS window_end
        FROM counts AS c JOIN maxes AS m ON c.ws = m.ws AND c.num >= m.maxn
    """,
}


def duckdb_query(name: str, bid: Source) -> pa.Table:
    """Runs query ``name`` in DuckDB over ``bid`` (a table or a Parquet path)."""
    import duckdb

    con = duckdb.connect()
    try:
        if isinstance(bid, str):
            escaped = bid.replace("'", "''")
            con.execute(f"CREATE VIEW bid AS SELECT * FROM read_parquet('{escaped}')")
        else:
            con.register("bid", bid)
        return con.sql(SQL[name]).to_arrow_table()
    finally:
        con.close()


# ---- comparing results ---------------------------------------------------------------------


def _canonical(table: pa.Table) -> pa.Table:
    """Timestamps as int64 ms, integers as int64, rows sorted by every column."""
    columns = []
    for column in table.columns:
        t = column.type
        if pa.types.is_timestamp(t):
            column = pc.cast(column, _TS).cast(pa.int64())
        elif pa.types.is_integer(t):
            column = column.cast(pa.int64())
        columns.append(column)
    canonical = pa.table(columns, names=table.column_names).combine_chunks()
    return canonical.sort_by([(name, "ascending") for name in canonical.column_names])


def compare(got: pa.Table, expected: pa.Table) -> str:
    """``"ok"`` when the tables hold the same rows (any order, same column names), else
    ``"MISMATCH ..."`` saying how they differ."""
    if got.column_names != expected.column_names:
        return f"MISMATCH columns {got.column_names} != {expected.column_names}"
    if got.num_rows != expected.num_rows:
        return f"MISMATCH rows {got.num_rows} != {expected.num_rows}"
    a, b = _canonical(got), _canonical(expected)
    for name in a.column_names:
        x, y = a.column(name), b.column(name)
        if not x.equals(y):
            differs = pc.invert(pc.fill_null(pc.equal(x, y), False))
            first = pc.index(differs, True).as_py()
            return (
                f"MISMATCH column {name!r} at sorted row {first}: "
                f"{a.slice(first, 1).to_pylist()} != {b.slice(first, 1).to_pylist()}"
            )
    return "ok"
