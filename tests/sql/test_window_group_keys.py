"""A windowed ``GROUP BY`` without aggregates on an integer and a string key
(Nexmark q8's persons: ``GROUP BY id, name, window_start, window_end``), the keys
core's window keeps in arrow's row format, one table per window: a row twice in
a window, one id under two names, nulls in either key column, several windows,
``TUMBLE`` and ``HOP``. Exact against DuckDB at parallelism 1 and 3; a late row is
dropped as every window drops it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import duck, run, same_rows

ROWS: list[tuple[int | None, str | None, int]] = [
    (1, "ann", 1_000),
    (2, "bob", 1_500),
    (1, "ann", 4_000),
    (2, "bo", 6_000),
    (None, "nobody", 6_500),
    (None, "nobody", 7_000),
    (7, None, 7_500),
    (None, None, 8_000),
    (None, None, 9_000),
    (3, "cy", 9_999),
    (3, "cy", 10_000),
    (7, None, 12_000),
    (2, "bob", 14_000),
    (1, "ann", 21_000),
    (1, "ann", 29_000),
    (4, "a name longer than the row format's first block of 32 bytes", 30_000),
    (4, "a name longer than the row format's first block of 32 bytes", 31_000),
    (4, "a name longer than the row format's first block of 32 bytes, too", 31_500),
]


def people(rows: list[tuple[int | None, str | None, int]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "t": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


TUMBLE = """
    SELECT id, name, window_start AS ws, window_end AS we
    FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(t), INTERVAL '10' SECOND))
    GROUP BY id, name, window_start, window_end
"""
DUCK_TUMBLE = """
    SELECT id, name, t - t % 10000 AS ws, t - t % 10000 + 10000 AS we
    FROM person GROUP BY ALL
"""


def test_window_group_by_int_and_string_keys_matches_duckdb(
    env: ed.StreamEnvironment,
) -> None:
    table = people(ROWS)
    env.from_arrow(table).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "person"
    )
    want = duck(DUCK_TUMBLE, person=table)
    # Not vacuous: duplicates collapse, nulls and both names of id 2 stay apart.
    assert len(want) == 13 < len(ROWS)
    assert {"id": None, "name": None, "ws": 0, "we": 10_000} in want
    same_rows(run(env, env.sql(TUMBLE)), want)


def test_hop_group_by_int_and_string_keys_matches_duckdb(env: ed.StreamEnvironment) -> None:
    table = people(ROWS)
    env.from_arrow(table).assign_timestamps("t", max_out_of_orderness="3s").create_temporary_view(
        "person"
    )
    query = """
        SELECT id, name, window_start AS ws
        FROM TABLE(HOP(TABLE person, DESCRIPTOR(t), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
        GROUP BY id, name, window_start, window_end
    """
    want = duck(
        """SELECT DISTINCT id, name, ws
           FROM (SELECT *, unnest(generate_series(t - t % 5000 - 5000, t - t % 5000, 5000))
                 AS ws FROM person)""",
        person=table,
    )
    same_rows(run(env, env.sql(query)), want)


def test_window_group_by_int_and_string_keys_drops_a_late_row() -> None:
    # One subtask, two rows a batch: the watermark has passed the window
    # [0, 10 s) when (5, "late", 2 s) comes, after rows at 30 s.
    rows = [*ROWS, (5, "late", 2_000)]
    env = ed.StreamEnvironment(parallelism=1, batch_size=2)
    env.from_arrow(people(rows)).assign_timestamps(
        "t", max_out_of_orderness="3s"
    ).create_temporary_view("person")
    handle = env.sql(TUMBLE).name("persons").collect()
    result = env.execute("late")
    late = sum(int(m.get("late_records", 0)) for m in result.metrics["operators"].values())
    assert late == 1
    got: list[dict[str, Any]] = handle.to_pylist()
    assert not [r for r in got if r["name"] == "late"]
    same_rows(got, duck(DUCK_TUMBLE, person=people(ROWS)))


@pytest.mark.parametrize("parallelism", [1, 2])
def test_window_group_by_keys_plans_a_window_count_keyed_by_both(parallelism: int) -> None:
    env = ed.StreamEnvironment(parallelism=parallelism)
    env.from_arrow(people(ROWS)).assign_timestamps("t").create_temporary_view("person")
    env.sql(TUMBLE).collect()
    plan = env.explain()
    assert "hash(id, name)" in plan
    assert "window 'window_count_" in plan
