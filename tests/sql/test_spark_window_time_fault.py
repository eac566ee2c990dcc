"""Spark's windows chained on ``window_time(window)`` and regrouped by
``window.start``, under SIGKILL and ``restore_from="latest"`` at another
parallelism (TESTING.md "Faults to inject"): the windows, the chained windows
and the regrouped 1 ms windows restore into 3 or 1 subtasks, no row is late,
and the exactly-once Parquet output holds every row once."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from .kill import Killed, assert_restored_exact

N = 20_000

BODY = """
view("numbers", n)
rows = "SELECT value, value % 7 AS k FROM numbers WHERE value % 5 <> 0"
tumbling = (
    f"SELECT window, k, count(*) AS c, sum(value) AS s FROM ({rows}) AS r "
    "GROUP BY window(value, '1 second'), k"
)
sink(
    "chained",
    f"SELECT window.start AS ws, sum(c) AS n, max(s) AS top FROM ({tumbling}) AS x "
    "GROUP BY window(window_time(window), '3 seconds')",
)
sliding = (
    f"SELECT window, k, sum(value) AS s FROM ({rows}) AS r "
    "GROUP BY window(value, '2 seconds', '1 second'), k"
)
sink(
    "starts",
    f"SELECT window.start AS ws, sum(s) AS total, count(*) AS keys FROM ({sliding}) AS x "
    "GROUP BY window.start",
)
"""


def expected(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of ``chained`` (per 3 s window of the 1 s windows' last millisecond:
    the count and the top sum per key and 1 s window) and of ``starts`` (per
    sliding window start: the sum of its values and its keys)."""
    kept = [v for v in range(n) if v % 5 != 0]
    sums: dict[tuple[int, int], int] = defaultdict(int)
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for v in kept:
        sums[(v - v % 1000, v % 7)] += v
        counts[(v - v % 1000, v % 7)] += 1
    chained: dict[int, dict[str, int]] = {}
    for (start, k), s in sums.items():
        last = start + 1000 - 1
        ws = last - last % 3000
        row = chained.setdefault(ws, {"ws": ws, "n": 0, "top": s})
        row["n"] += counts[(start, k)]
        row["top"] = max(row["top"], s)
    total: dict[int, int] = defaultdict(int)
    keys: dict[int, set[int]] = defaultdict(set)
    for v in kept:
        for start in (v - v % 1000, v - v % 1000 - 1000):
            total[start] += v
            keys[start].add(v % 7)
    starts = [{"ws": ws, "total": t, "keys": len(keys[ws])} for ws, t in total.items()]
    return list(chained.values()), starts


@pytest.mark.timeout(300)
def test_windows_chained_on_window_time_after_sigkill_and_rescale_are_exact(killed: Killed) -> None:
    out, stdout = killed(BODY, N)
    chained, starts = expected(N)
    assert_restored_exact(out, stdout, N, chained=chained, starts=starts)
