"""env.sql prunes each join input to the columns read above the join (its keys,
its event time, what the query selects or filters on after it), as a
hand-written job selects before it joins: the join's state and exchanges carry
no other column, and over ``from_parquet`` the others are never read.

The proof is a pair of files whose unused column chunks are garbage: reading them
fails, and a join that never reads those columns succeeds on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import duck, same_rows, write_broken

N = 2_000


AUCTIONS = pa.table(
    {
        "id": pa.array(range(N), pa.int64()),
        "extra": pa.array([f"auction-padding-{i}-" * 6 for i in range(N)]),
        "seller": pa.array([i * 7 % 300 for i in range(N)], pa.int64()),
        "category": pa.array([i % 13 for i in range(N)], pa.int64()),
    }
)
PERSONS = pa.table(
    {
        "id": pa.array(range(300), pa.int64()),
        "name": pa.array([f"p{i}" for i in range(300)]),
        "extra": pa.array([f"person-padding-{i}-" * 6 for i in range(300)]),
        "city": pa.array([f"city{i % 17}" for i in range(300)]),
        "state": pa.array([("OR", "ID", "CA", "WA", "NY")[i % 5] for i in range(300)]),
    }
)
Q3 = """
    SELECT P.name, P.city, P.state, A.id
    FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
    WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
"""


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_join_over_parquet_views_reads_only_the_columns_it_uses(
    tmp_path: Path, parallelism: int
) -> None:
    auctions = write_broken(tmp_path / "auction.parquet", AUCTIONS, "extra", row_group_size=500)
    persons = write_broken(tmp_path / "person.parquet", PERSONS, "extra", row_group_size=500)
    env = ed.StreamEnvironment(parallelism, batch_size=128)
    env.from_parquet(auctions).create_temporary_view("auction")
    env.from_parquet(persons).create_temporary_view("person")
    out = env.sql(Q3).collect()
    env.execute("pruned join")
    want = duck(
        Q3,
        auction=AUCTIONS.drop_columns(["extra"]),
        person=PERSONS.drop_columns(["extra"]),
    )
    assert len(want) > 50
    same_rows(out.to_pylist(), want)


def test_the_pruned_join_is_the_dsl_job_that_selects_first() -> None:
    def job(use_sql: bool) -> str:
        env = ed.StreamEnvironment(parallelism=2)
        auctions = env.from_arrow(AUCTIONS)
        persons = env.from_arrow(PERSONS)
        if use_sql:
            auctions.create_temporary_view("auction")
            persons.create_temporary_view("person")
            out = env.sql(
                "SELECT P.name, A.id FROM auction AS A JOIN person AS P ON A.seller = P.id "
                "WHERE A.category = 10 AND P.state = 'OR'"
            )
        else:
            items = (
                auctions.select("id", "seller", "category")
                .filter(ed.col("category") == 10)
                .select("id", "seller")
            )
            sellers = (
                persons.select("id", "name", "state")
                .filter(ed.col("state") == "OR")
                .select("id", "name")
            )
            out = items.join(sellers, left_on="seller", right_on="id").select("name", "id")
        out.collect()
        return env.explain()

    assert job(True) == job(False)


@pytest.fixture(params=[1, 3], ids=lambda p: f"p{p}")
def env(request: pytest.FixtureRequest) -> ed.StreamEnvironment:
    return ed.StreamEnvironment(parallelism=request.param, batch_size=16)


def run(env: ed.StreamEnvironment, query: str) -> list[dict[str, Any]]:
    out = env.sql(query).collect()
    env.execute("sql")
    return out.to_pylist()


LEFT = pa.table(
    {
        "k": pa.array([i % 9 for i in range(120)], pa.int64()),
        "x": pa.array([f"left{i}" for i in range(120)]),
        "y": pa.array(range(120), pa.int64()),
        "pad": pa.array(["p" * 20] * 120),
    }
)
RIGHT = pa.table(
    {
        "k": pa.array([i % 11 for i in range(40)], pa.int64()),
        "x": pa.array([f"right{i}" for i in range(40)]),
        "w": pa.array([i * 3 for i in range(40)], pa.int64()),
    }
)


def test_a_right_column_named_as_an_unread_left_one_matches_duckdb(
    env: ed.StreamEnvironment,
) -> None:
    # The join names the right's x x_right because the left has an x; the query
    # reads only the right's, and pruning the left's would rename it.
    env.from_arrow(LEFT).create_temporary_view("a")
    env.from_arrow(RIGHT).create_temporary_view("b")
    query = "SELECT b.x AS bx, a.y FROM a JOIN b ON a.k = b.k WHERE b.w > 20"
    same_rows(run(env, query), duck(query, a=LEFT, b=RIGHT))


def test_a_left_join_reads_only_used_columns_and_matches_duckdb(
    env: ed.StreamEnvironment,
) -> None:
    # An outer join carries the right's keys as copies (null without a match).
    timed = {"t": pa.array([1_000 * i for i in range(120)], pa.int64())}
    left = LEFT.append_column("t", timed["t"])
    right = RIGHT.append_column("t", pa.array([3_000 * i for i in range(40)], pa.int64()))
    env.from_arrow(left).assign_timestamps("t").create_temporary_view("a")
    env.from_arrow(right).assign_timestamps("t").create_temporary_view("b")
    query = (
        "SELECT a.y, b.k AS bk, b.w FROM a LEFT JOIN b "
        "ON a.k = b.k AND b.t BETWEEN a.t - 5000 AND a.t + 5000"
    )
    same_rows(run(env, query), duck(query, a=left, b=right))
