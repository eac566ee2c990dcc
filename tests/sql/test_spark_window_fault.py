"""Spark's windowed results used downstream, under SIGKILL and ``restore_from="latest"``
at another parallelism (TESTING.md "Faults to inject"): sliding-window counts grouped
again by their ``window`` and joined back to it on equal windows (Nexmark q5 in Spark's
spelling) restore their windows, regrouped windows and join state into 3 or 1
subtasks, and the exactly-once Parquet output holds every row once."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from .kill import Killed, assert_restored_exact

N = 20_000
SIZE_MS, SLIDE_MS = 2_000, 1_000

BODY = """
view("numbers", n)
counts = (
    "SELECT window, k, count(*) AS c, sum(value) AS s "
    "FROM (SELECT value, value % 7 AS k FROM numbers WHERE value % 5 <> 0) AS r "
    "GROUP BY window(value, '2 seconds', '1 second'), k"
)
sink(
    "tops",
    f"SELECT window.start AS ws, max(s) AS top, sum(c) AS n FROM ({counts}) AS x "
    "GROUP BY window",
)
sink(
    "best",
    f"WITH counts AS ({counts}) "
    "SELECT x.k, x.window.start AS ws, x.s FROM counts AS x "
    "JOIN (SELECT window, max(s) AS top FROM counts GROUP BY window) AS m "
    "ON x.window = m.window AND x.s = m.top",
)
"""


def expected(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of ``tops`` and ``best``: per sliding window and key the count and
    sum of the values kept, per window the top sum and the count, and the keys with
    the top sum."""
    sums: dict[tuple[int, int], int] = defaultdict(int)
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for v in range(n):
        if v % 5 == 0:
            continue
        last = v - v % SLIDE_MS
        for start in range(last, v - SIZE_MS, -SLIDE_MS):
            sums[(start, v % 7)] += v
            counts[(start, v % 7)] += 1
    top: dict[int, int] = {}
    total: dict[int, int] = defaultdict(int)
    for (start, _), s in sums.items():
        top[start] = max(top.get(start, s), s)
    for (start, _), c in counts.items():
        total[start] += c
    tops = [{"ws": ws, "top": t, "n": total[ws]} for ws, t in top.items()]
    best = [{"k": k, "ws": ws, "s": s} for (ws, k), s in sums.items() if s == top[ws]]
    return tops, best


@pytest.mark.timeout(300)
def test_spark_window_results_after_sigkill_and_rescale_are_exact(killed: Killed) -> None:
    # No row was late (dropped) at a window or the join, so the output is exact.
    out, stdout = killed(BODY, N)
    tops, best = expected(N)
    assert_restored_exact(out, stdout, N, tops=tops, best=best)
