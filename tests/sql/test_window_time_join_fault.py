"""Joins bounded by Spark's ``window_time(w)`` under SIGKILL and
``restore_from="latest"`` at another parallelism (TESTING.md "Faults to inject"):
two window aggregates joined on equal window times, and a stream joined with a
window aggregate in an interval of its window time. The open windows and both
interval joins' kept rows restore into 3 or 1 subtasks, no row is late, and the
exactly-once Parquet output holds every joined row once."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from .kill import Killed, assert_restored_exact

N = 20_000

BODY = """
view("a", n)
view("b", n)
env.sql("SELECT value, value % 7 AS k FROM a").create_temporary_view("ka")
env.sql("SELECT value, value % 5 AS k FROM b WHERE value % 3 = 0").create_temporary_view("kb")
env.sql("SELECT value, value % 7 AS k FROM b WHERE value % 500 = 0").create_temporary_view("marks")
counts = "SELECT window, k, count(*) AS c FROM ka GROUP BY window(value, '1 second'), k"
sums = (
    "SELECT window, k, sum(value) AS s FROM kb "
    "GROUP BY window(value, '2 seconds', '1 second'), k"
)
sink(
    "windows",
    f"SELECT x.k, window_time(x.window) AS wt, x.c, y.s FROM ({counts}) AS x "
    f"JOIN ({sums}) AS y ON x.k = y.k AND window_time(x.window) = window_time(y.window)",
)
sink(
    "events",
    f"SELECT e.value, x.c FROM marks AS e JOIN ({counts}) AS x ON e.k = x.k "
    "AND e.value BETWEEN window_time(x.window) - 999 AND window_time(x.window)",
)
"""


def expected(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of ``windows`` (per key and 1 s window's last millisecond: the
    count of ``a`` and the sum of ``b``'s sliding window ending with it) and of
    ``events`` (each 500th value of ``b`` with the count of its key's 1 s window)."""
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for v in range(n):
        counts[(v % 7, v - v % 1000 + 1000)] += 1
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for v in range(0, n, 3):
        for end in (v - v % 1000 + 1000, v - v % 1000 + 2000):
            sums[(v % 5, end)] += v
    windows = [
        {"k": k, "wt": end - 1, "c": c, "s": sums[(k, end)]}
        for (k, end), c in counts.items()
        if (k, end) in sums
    ]
    events = [{"value": v, "c": counts[(v % 7, v - v % 1000 + 1000)]} for v in range(0, n, 500)]
    return windows, events


@pytest.mark.timeout(300)
def test_joins_bounded_by_window_time_after_sigkill_and_rescale_are_exact(
    killed: Killed,
) -> None:
    out, stdout = killed(BODY, N)
    windows, events = expected(N)
    assert len(events) == N // 500 and len(windows) > N // 1000
    # Two views of N rows: the sources read 2 * N records without a restore.
    assert_restored_exact(out, stdout, 2 * N, windows=windows, events=events)
