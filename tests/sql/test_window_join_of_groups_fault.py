"""Two windowed GROUP BYs without aggregates joined on their TUMBLE windows' bounds
(Nexmark q8's shape, run as a window join of the grouped rows by eddyline/sql.py)
under SIGKILL and ``restore_from="latest"`` at another parallelism (TESTING.md
"Faults to inject"): the open windows of both GROUP BYs and the window join's kept
rows restore from the latest checkpoint into 3 or 1 subtasks, and the exactly-once
Parquet output holds each (key, window) once, though every key comes many times in
each window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir

from .kill import run_killed

N = 20_000
"""Rows of each sequence (event time: the value, in ms)."""

BODY = """
for name in ("a", "b"):
    view(name, n)
env.sql("SELECT value, value % 7 AS k FROM a").create_temporary_view("persons")
env.sql("SELECT value, value % 5 AS s FROM b WHERE value % 3 = 0").create_temporary_view(
    "sellers"
)
joined = env.sql(
    "SELECT P.k, P.ws FROM ("
    "  SELECT k, window_start AS ws, window_end AS we"
    "  FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(value), INTERVAL '0.1' SECOND))"
    "  GROUP BY k, window_start, window_end"
    ") AS P JOIN ("
    "  SELECT s, window_start AS ws, window_end AS we"
    "  FROM TABLE(TUMBLE(TABLE sellers, DESCRIPTOR(value), INTERVAL '0.1' SECOND))"
    "  GROUP BY s, window_start, window_end"
    ") AS B ON P.k = B.s AND P.ws = B.ws AND P.we = B.we"
)
joined.sink_to(ed.ParquetSink(out)).uid("q8_files")
"""


def expected(n: int) -> list[dict[str, Any]]:
    rows = []
    for start in range(0, n, 100):
        values = range(start, min(start + 100, n))
        keys = {v % 7 for v in values} & {v % 5 for v in values if v % 3 == 0}
        rows += [{"k": k, "ws": start} for k in sorted(keys)]
    return rows


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("first", "later"), [(2, 3), (3, 1)])
def test_sql_window_join_of_groups_after_sigkill_and_rescale_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, first: int, later: int
) -> None:
    # No row of the last run was late (dropped): every window joined all its rows.
    out, _ = run_killed(BODY, N, tmp_path, monkeypatch, seed, first, later)
    want = expected(N)
    assert len(want) == 5 * N // 100
    assert_same_rows(read_parquet_dir(out).to_pylist(), want)
