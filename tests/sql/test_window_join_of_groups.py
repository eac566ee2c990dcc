"""Two windowed GROUP BYs over TUMBLE windows of one size, inner-joined on their
window bounds (Nexmark q8's persons and sellers): eddyline/sql.py runs the join as
a window join of the grouped rows timed by their ``window_start`` (the windows'
equal ends bound the join to 0 ms; equal ends of one size are equal windows).
A GROUP BY without aggregates stays a DISTINCT per window: a row twice in a window
joins once. Exact against DuckDB at parallelism 1 and 3."""

from __future__ import annotations

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import duck, run, same_rows

SIZE_MS = 10_000


@pytest.fixture
def people() -> pa.Table:
    """Persons registering: (1, "ann") twice in one window, id 2 under two names in
    one window, id 3 in two windows, id 4 opens no auction in its window."""
    rows = [
        (1, "ann", 1_000),
        (2, "bob", 1_500),
        (1, "ann", 4_000),
        (2, "bo", 6_000),
        (3, "cy", 9_999),
        (4, "di", 10_000),
        (3, "cy", 12_000),
        (5, "ed", 21_000),
        (5, "ed", 29_000),
        (6, "fay", 33_000),
    ]
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "t": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


@pytest.fixture
def auctions() -> pa.Table:
    """Auctions: sellers 1 and 5 open two in their window, seller 4 one in the
    window after its registration's, seller 6 one in the window before its."""
    rows = [(1, 2_000), (1, 3_000), (2, 8_000), (3, 9_000), (3, 15_000)]
    rows += [(4, 21_000), (5, 22_000), (5, 28_500), (6, 25_000), (7, 35_000)]
    return pa.table(
        {
            "seller": pa.array([r[0] for r in rows], pa.int64()),
            "t": pa.array([r[1] for r in rows], pa.int64()),
        }
    )


def views(env: ed.StreamEnvironment, people: pa.Table, auctions: pa.Table) -> None:
    for name, table in (("person", people), ("auction", auctions)):
        stream = env.from_arrow(table).assign_timestamps("t", max_out_of_orderness="3s")
        stream.create_temporary_view(name)


PERSONS = """
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(t), INTERVAL '10' SECOND))
    GROUP BY id, name, window_start, window_end
"""
SELLERS = """
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(t), INTERVAL '10' SECOND))
    GROUP BY seller, window_start, window_end
"""
DUCK_PERSONS = f"""
    SELECT id, name, t - t % {SIZE_MS} AS starttime, t - t % {SIZE_MS} + {SIZE_MS} AS endtime
    FROM person GROUP BY ALL
"""
DUCK_SELLERS = f"""
    SELECT seller, t - t % {SIZE_MS} AS starttime, t - t % {SIZE_MS} + {SIZE_MS} AS endtime
    FROM auction GROUP BY ALL
"""
ON = {
    "bounds": "P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
    "ends": "P.id = A.seller AND P.endtime = A.endtime",
}


def q8(on: str, select: str = "P.id, P.name, P.starttime") -> tuple[str, str]:
    """The query in eddyline's SQL and in DuckDB's."""
    sql = f"SELECT {select} FROM ({PERSONS}) AS P JOIN ({SELLERS}) AS A ON {on}"
    return sql, f"SELECT {select} FROM ({DUCK_PERSONS}) AS P JOIN ({DUCK_SELLERS}) AS A ON {on}"


@pytest.mark.parametrize("on", sorted(ON))
def test_distinct_persons_join_sellers_once_per_window(
    env: ed.StreamEnvironment, people: pa.Table, auctions: pa.Table, on: str
) -> None:
    views(env, people, auctions)
    sql, reference = q8(ON[on])
    want = duck(reference, person=people, auction=auctions)
    # One row for (1, "ann") of window 0, though it registered twice there; both of
    # id 2's names.
    assert sorted((r["id"], r["name"], r["starttime"]) for r in want) == [
        (1, "ann", 0),
        (2, "bo", 0),
        (2, "bob", 0),
        (3, "cy", 0),
        (3, "cy", 10_000),
        (5, "ed", 20_000),
    ]
    same_rows(run(env, env.sql(sql)), want)


def test_every_column_of_both_sides_survives_the_window_join(
    env: ed.StreamEnvironment, people: pa.Table, auctions: pa.Table
) -> None:
    """``SELECT *``: the right's start (a key the window join needs not compare) and
    end keep their SQL names, the window join's own bounds are not among them."""
    views(env, people, auctions)
    sql, _ = q8(ON["bounds"], "*")
    # DuckDB names both inputs' columns alike: the right's renamed by hand.
    right = "A.seller, A.starttime AS starttime_right, A.endtime AS endtime_right"
    _, reference = q8(ON["bounds"], f"P.*, {right}")
    stream = env.sql(sql)
    assert stream.schema is not None
    assert stream.schema.names == [
        "id",
        "name",
        "starttime",
        "endtime",
        "seller",
        "starttime_right",
        "endtime_right",
    ]
    same_rows(run(env, stream), duck(reference, person=people, auction=auctions))


def test_the_join_of_two_tumbles_plans_as_a_window_join(
    people: pa.Table, auctions: pa.Table
) -> None:
    """Keyed by the id alone (the windows pair the starts), with the window join's
    bounds in its output; a LEFT join stays an interval join (it emits unmatched
    rows, which a window join does not)."""

    def join_lines(how: str) -> list[str]:
        env = ed.StreamEnvironment(parallelism=2)
        views(env, people, auctions)
        sql = f"SELECT P.id FROM ({PERSONS}) AS P {how} ({SELLERS}) AS A ON {ON['bounds']}"
        lines = env.sql(sql).explain().splitlines()
        at = next(i for i, line in enumerate(lines) if " join '" in line)
        # the join's inputs, then its event time and schema
        return [line.strip() for line in lines[at + 1 : at + 5]]

    inner = join_lines("JOIN")
    assert inner[0].endswith("hash(id)") and inner[1].endswith("hash(seller)")
    assert inner[3].startswith("schema: id: int64, window_start: int64, window_end: int64")
    left = join_lines("LEFT JOIN")
    assert left[0].endswith("hash(id, starttime)")
    assert left[3].startswith("schema: id: int64, starttime: int64, endtime: int64")


def test_windows_of_other_sizes_stay_an_interval_join(
    env: ed.StreamEnvironment, people: pa.Table, auctions: pa.Table
) -> None:
    """Ends of windows of 10 s and 5 s are equal where the windows are not: a join
    of the ends keeps the interval join, and its rows are DuckDB's."""
    views(env, people, auctions)
    sellers = SELLERS.replace("INTERVAL '10' SECOND", "INTERVAL '5' SECOND")
    sql = f"SELECT P.id, P.starttime FROM ({PERSONS}) AS P JOIN ({sellers}) AS A ON {ON['ends']}"
    duck_sellers = DUCK_SELLERS.replace(f"{SIZE_MS}", "5000")
    reference = (
        f"SELECT P.id, P.starttime FROM ({DUCK_PERSONS}) AS P JOIN ({duck_sellers}) AS A "
        f"ON {ON['ends']}"
    )
    want = duck(reference, person=people, auction=auctions)
    assert want
    same_rows(run(env, env.sql(sql)), want)


def test_a_windowed_group_by_joins_itself_on_its_windows(
    env: ed.StreamEnvironment, people: pa.Table, auctions: pa.Table
) -> None:
    """A ``WITH`` read by both sides of the join: each side is timed by its start on
    a node of its own."""
    views(env, people, auctions)
    on = "a.id = b.id AND a.name <> b.name AND a.endtime = b.endtime"
    columns = "a.id, a.name, a.starttime, b.name AS other, b.starttime AS other_start"
    select = f"SELECT {columns} FROM p AS a JOIN p AS b ON {on}"
    query, reference = f"WITH p AS ({PERSONS}) {select}", f"WITH p AS ({DUCK_PERSONS}) {select}"
    stream = env.sql(query)
    lines = [line.strip() for line in stream.explain().splitlines()]
    join = next(i for i, line in enumerate(lines) if " join '" in line)
    # a window join: keyed by the id alone, its output starts with the windows' bounds
    assert lines[join + 1].endswith("hash(id)")
    assert lines[join + 4].startswith("schema: id: int64, window_start: int64")
    want = duck(reference, person=people, auction=auctions)
    assert len(want) == 2
    same_rows(run(env, stream), want)
