"""SQL joins under SIGKILL and ``restore_from="latest"`` at another parallelism
(TESTING.md "Faults to inject"): an unbounded equi-join and a LEFT interval join
restore their kept rows from the latest checkpoint into 3 or 1 subtasks, and the
exactly-once Parquet output holds every pair (and every unmatched row) once."""

from __future__ import annotations

from typing import Any

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir

from .kill import Killed

N = 20_000

BODY = """
for name in ("a", "b"):
    view(name, n)
equi = env.sql(
    "SELECT a.value AS l, h.value AS r FROM a "
    "JOIN (SELECT value, floor(value / 2) AS half FROM b) AS h ON a.value = h.half"
)
equi.sink_to(ed.ParquetSink(out + "/equi")).uid("equi_files")
interval = env.sql(
    "SELECT x.value AS l, y.value AS r FROM (SELECT value, value % 2 AS k FROM a) AS x "
    "LEFT JOIN (SELECT value, value % 2 AS k FROM b WHERE value % 3 = 0) AS y "
    "ON x.k = y.k AND y.value BETWEEN x.value - 3 AND x.value + 2"
)
interval.sink_to(ed.ParquetSink(out + "/interval")).uid("interval_files")
"""


def expected(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    equi = [{"l": r // 2, "r": r} for r in range(n)]
    interval: list[dict[str, Any]] = []
    for v in range(n):
        matches = [w for w in range(v - 3, v + 3) if 0 <= w < n and w % 3 == 0 and w % 2 == v % 2]
        interval += [{"l": v, "r": w} for w in matches] or [{"l": v, "r": None}]
    return equi, interval


@pytest.mark.timeout(300)
def test_sql_joins_after_sigkill_and_rescale_are_exact(killed: Killed) -> None:
    # No row of the last run was late (dropped), so the interval join's output is exact.
    out, _ = killed(BODY, N)
    want_equi, want_interval = expected(N)
    assert any(r["r"] is None for r in want_interval)
    assert_same_rows(read_parquet_dir(out / "equi").to_pylist(), want_equi)
    assert_same_rows(read_parquet_dir(out / "interval").to_pylist(), want_interval)
