"""A GROUP BY that closes its groups by a per-row bound of a join (Nexmark q4's
auctions closing at their ``expires``) under SIGKILL and ``restore_from="latest"`` at
another parallelism (TESTING.md "Faults to inject"): the interval join's kept rows and
the open groups restore from the latest checkpoint into 3 or 1 subtasks, and the
exactly-once Parquet output holds each auction's final max once."""

from __future__ import annotations

from typing import Any

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir

from .kill import Killed

N = 5_000
"""Auctions; four bids each (``4 * N`` rows of each sequence)."""

BODY = """
for name in ("auctions", "bids"):
    view(name, 4 * n)
# auction v (v % 4 = 0) opens at v and expires v % 5 ms later; its bids come at
# v .. v + 3 (integers: `/` divides as a double, as Spark's)
closed = env.sql(
    "SELECT A.id, max(B.price) AS final, count(*) AS bids "
    "FROM (SELECT value AS t, value AS id, value + value % 5 AS expires "
    "      FROM auctions WHERE value % 4 = 0) AS A "
    "JOIN (SELECT value AS t, value - value % 4 AS auction, value * 7919 % 1000 AS price "
    "      FROM bids) AS B "
    "ON A.id = B.auction AND B.t BETWEEN A.t AND A.expires AND B.t <= A.t + 4 "
    "GROUP BY A.id, A.expires"
)
closed.sink_to(ed.ParquetSink(out)).uid("closed_files")
"""


def expected(n: int) -> list[dict[str, Any]]:
    rows = []
    for v in range(0, 4 * n, 4):
        prices = [w * 7919 % 1000 for w in range(v, v + min(v % 5, 3) + 1)]
        rows.append({"id": v, "final": max(prices), "bids": len(prices)})
    return rows


@pytest.mark.timeout(300)
def test_sql_closing_groups_after_sigkill_and_rescale_are_exact(killed: Killed) -> None:
    # No row of the last run was late (dropped): every group closed with all its rows.
    out, _ = killed(BODY, N)
    assert_same_rows(read_parquet_dir(out).to_pylist(), expected(N))
