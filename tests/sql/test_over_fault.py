"""An over window (``agg(col) OVER (PARTITION BY k ORDER BY ts ROWS ...)``, docs/API.md
"Over windows") under SIGKILL and ``restore_from="latest"`` at another parallelism
(TESTING.md "Faults to inject"): the rows waiting for the watermark and each key's last
rows restore by key group into 3 or 1 subtasks, and the exactly-once Parquet output
holds every row once with its frame's aggregates."""

from __future__ import annotations

from typing import Any

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir

from .kill import Killed

N = 20_000
KEYS = 7
PRECEDING = 4

BODY = f"""
view("events", n)
over = env.sql(
    "SELECT k, value, sum(value) OVER w AS s, count(*) OVER w AS c, max(value) OVER w AS m "
    "FROM (SELECT value, value % {KEYS} AS k FROM events) "
    "WINDOW w AS (PARTITION BY k ORDER BY value ROWS BETWEEN {PRECEDING} PRECEDING AND "
    "CURRENT ROW)"
)
over.sink_to(ed.ParquetSink(out)).uid("over_files")
"""


def expected(n: int) -> list[dict[str, Any]]:
    rows = []
    for v in range(n):
        frame = [w for w in range(v - PRECEDING * KEYS, v + 1, KEYS) if w >= 0]
        rows.append({"k": v % KEYS, "value": v, "s": sum(frame), "c": len(frame), "m": v})
    return rows


@pytest.mark.timeout(300)
def test_sql_over_after_sigkill_and_rescale_is_exact(killed: Killed) -> None:
    # No row of the last run was late (dropped): every row has its whole frame.
    out, _ = killed(BODY, N)
    assert_same_rows(read_parquet_dir(out).to_pylist(), expected(N))
