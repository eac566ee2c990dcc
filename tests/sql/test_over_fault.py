"""Over windows (``agg(col) OVER (PARTITION BY k ORDER BY ts ROWS|RANGE ...)``,
docs/API.md "Over windows") under SIGKILL and ``restore_from="latest"`` at another
parallelism (TESTING.md "Faults to inject"): the rows waiting for the watermark and each
key's last rows, running aggregates or rows of the last interval restore by key group
into 3 or 1 subtasks, and the exactly-once Parquet output holds every row once with its
frame's aggregates."""

from __future__ import annotations

from typing import Any

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir

from .kill import Killed, assert_restored_exact

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


RANGE_MS = 20

FRAMES_BODY = f"""
view("events", n)
keyed = "SELECT value, value % {KEYS} AS k FROM events"
sink(
    "running",
    "SELECT k, value, sum(value) OVER w AS s, count(*) OVER w AS c, min(value) OVER w AS m "
    f"FROM ({{keyed}}) WINDOW w AS (PARTITION BY k ORDER BY value ROWS UNBOUNDED PRECEDING)",
)
sink(
    "range",
    "SELECT k, value, sum(value) OVER w AS s, count(*) OVER w AS c, avg(value) OVER w AS a "
    f"FROM ({{keyed}}) WINDOW w AS (PARTITION BY k ORDER BY value "
    "RANGE BETWEEN {RANGE_MS} PRECEDING AND CURRENT ROW)",
)
"""


def expected_frames(n: int) -> dict[str, list[dict[str, Any]]]:
    """Each sink's rows: the running aggregates of every row of a key so far, and
    the aggregates of a key's rows of the last ``RANGE_MS`` ms (values are times)."""
    running, ranged = [], []
    for v in range(n):
        k = v % KEYS
        # Rows of key k up to v: k, k + KEYS, ..., v.
        c = v // KEYS + 1
        running.append({"k": k, "value": v, "s": c * (k + v) // 2, "c": c, "m": k})
        frame = [w for w in range(v, max(v - RANGE_MS, 0) - 1, -KEYS) if w >= v - RANGE_MS]
        ranged.append(
            {"k": k, "value": v, "s": sum(frame), "c": len(frame), "a": sum(frame) / len(frame)}
        )
    return {"running": running, "range": ranged}


@pytest.mark.timeout(300)
def test_sql_over_unbounded_and_range_frames_after_sigkill_and_rescale_are_exact(
    killed: Killed,
) -> None:
    # The running aggregates (a few words per key) and the range frames' rows of
    # the last 20 ms restore by key group; no row of the last run was late.
    out, stdout = killed(FRAMES_BODY, N)
    assert_restored_exact(out, stdout, N, **expected_frames(N))
