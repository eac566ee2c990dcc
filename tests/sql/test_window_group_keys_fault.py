"""A windowed ``GROUP BY`` without aggregates on an integer and a string key, nulls
in both (Nexmark q8's persons' shape; core keeps such keys in one table per window
and writes them into per-key-group blobs), under SIGKILL and
``restore_from="latest"`` at another parallelism (TESTING.md "Faults to inject"):
the open windows restore from the latest checkpoint into 3 or 1 subtasks, and the
exactly-once Parquet output holds each (id, name, window) once, though each comes
many times in its window."""

from __future__ import annotations

from typing import Any

import pytest

from .kill import Killed, assert_restored_exact

N = 20_000
"""Rows of the sequence (event time: the value, in ms)."""

BODY = """
view("a", n)
env.sql(
    "SELECT value, "
    "CASE WHEN value % 13 = 0 THEN NULL ELSE value % 7 END AS id, "
    "CASE WHEN value % 11 = 0 THEN NULL ELSE CAST(value % 3 AS STRING) END AS name "
    "FROM a"
).create_temporary_view("persons")
sink(
    "distinct",
    "SELECT id, name, window_start AS ws"
    " FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(value), INTERVAL '0.1' SECOND))"
    " GROUP BY id, name, window_start, window_end",
)
"""


def expected(n: int) -> list[dict[str, Any]]:
    keys = set()
    for v in range(n):
        key = (None if v % 13 == 0 else v % 7, None if v % 11 == 0 else str(v % 3))
        keys.add((*key, v - v % 100))
    return [{"id": i, "name": s, "ws": ws} for i, s, ws in keys]


@pytest.mark.timeout(300)
def test_window_group_by_int_and_string_keys_after_sigkill_and_rescale_is_exact(
    killed: Killed,
) -> None:
    out, stdout = killed(BODY, N)
    want = expected(N)
    assert len(want) > N // 100 * 21  # every window: 7 ids x 3 names and some nulls
    assert_restored_exact(out, stdout, N, distinct=want)
