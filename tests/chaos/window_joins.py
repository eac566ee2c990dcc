"""Nexmark q8's and q7's shapes over the hand-made rows of ``hand.py`` (docs/CHAOS.md,
window results downstream): the stages, the columns the tests read and their answers,
the same in the Flink spelling (test_chaos_window_results.py) and Spark's
(test_chaos_sql_spark_results.py).

hand.ROWS in tumbling windows of 1 s: key 0 has [0, 1000) with v 1 and 6 and
[3000, 4000) with v 2; key 1 has [1000, 2000) with v 5 and [2000, 3000) with v 8.
hand.RIGHT: key 0 has [0, 1000) with v 3; key 1 has [0, 1000) with v 4 and
[2000, 3000) with v 7."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib.case import Stage


def q8(how: str) -> Stage:
    """The sums of ``t`` and the counts of ``u`` per key and tumbling window of 1 s,
    joined (``how``) on the key and the window."""
    return Stage(
        "sql", agg="sum", form="wrjoin", right="s1", size_ms=1_000, slide_ms=1_000, how=how,
        exprs=[["ragg", "count"]],
    )  # fmt: skip


Q8 = ["k", "window_start", "v", "k_right", "ws_right", "w"]

Q8_ROWS = {
    "inner": [(0, 0, 7, 0, 0, 1), (1, 2_000, 8, 1, 2_000, 1)],
    "left": [
        (0, 0, 7, 0, 0, 1),
        (0, 3_000, 2, -1, -1, -1),
        (1, 1_000, 5, -1, -1, -1),
        (1, 2_000, 8, 1, 2_000, 1),
    ],
    "right": [(-1, -1, -1, 1, 0, 1), (0, 0, 7, 0, 0, 1), (1, 2_000, 8, 1, 2_000, 1)],
    "outer": [
        (-1, -1, -1, 1, 0, 1),
        (0, 0, 7, 0, 0, 1),
        (0, 3_000, 2, -1, -1, -1),
        (1, 1_000, 5, -1, -1, -1),
        (1, 2_000, 8, 1, 2_000, 1),
    ],
}
"""The ``Q8`` cells of ``q8(how)`` per join type; an outer side's unmatched window
once, with nulls (-1)."""

Q7 = ["id", "ws", "we"]

Q7_ROWS = {
    "max": [(2, 0, 1_000), (3, 1_000, 2_000), (4, 2_000, 3_000), (5, 3_000, 4_000)],
    "min": [(1, 0, 1_000), (3, 1_000, 2_000), (4, 2_000, 3_000), (5, 3_000, 4_000)],
}
"""The ``Q7`` cells of each row whose ``v`` is the max (min) of its tumbling window
of 1 s, per key or over all keys alike on these rows."""
