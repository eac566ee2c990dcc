"""The Nexmark queries written in SQL (benches/nexmark/sql/) equal DuckDB's result
at parallelism 1 to 3 (``run.py --frontend sql --check``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import eddyline as ed

from .conftest import duck, same_rows

RUN = Path(__file__).resolve().parents[2] / "benches" / "nexmark" / "run.py"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness's cache of generated events, shared by its runs here."""
    return tmp_path_factory.mktemp("nexmark-data")


@pytest.mark.parametrize("parallelism", [1, 2, 3])
@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q11"])
def test_nexmark_sql_equals_duckdb(data_dir: Path, query: str, parallelism: int) -> None:
    command = [sys.executable, str(RUN), "--query", query, "--events", "20000", "--check"]
    command += ["--frontend", "sql", "--parallelism", str(parallelism)]
    command += ["--data-dir", str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["frontend"] == "sql"
    assert line["rows_out"] > 0
    assert line["check"] == "ok"


def test_frontend_sql_q4_refuses_another_event_rate(data_dir: Path) -> None:
    """sql/q4.sql bounds an auction's time for the generator's default rate: at
    another rate its bound could drop bids, so the harness refuses."""
    command = [sys.executable, str(RUN), "--query", "q4", "--frontend", "sql"]
    command += ["--events", "1000", "--events-per-second", "1000"]
    command += ["--data-dir", str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "sql/q4.sql bounds an auction's time" in done.stderr


Q4 = """
    SELECT Q.category, avg(Q.final) AS avg
    FROM (
        SELECT max(B.price) AS final, A.category
        FROM auction AS A, bid AS B
        WHERE A.id = B.auction AND B.date_time >= A.date_time AND B.date_time <= A.expires
        GROUP BY A.id, A.category
    ) AS Q
    GROUP BY Q.category
"""
"""Nexmark q4's reference SQL (the BETWEEN written as its two comparisons)."""

BOUND = "B.date_time <= A.date_time + INTERVAL '10' SECOND"
"""A constant bound of the bids' time: every auction below runs at most 10 s."""


def auctions_and_bids(env: ed.StreamEnvironment) -> tuple[pa.Table, pa.Table]:
    """Registers ``auction`` and ``bid`` views timed by ``date_time`` (ms), and returns
    the tables: auctions of 1 to 8 s, each with bids before, within, exactly at and
    after its ``expires``, some auctions without a bid in their time."""
    ms = pa.timestamp("ms")
    auctions: dict[str, list[int]] = {"id": [], "category": [], "date_time": [], "expires": []}
    bids: dict[str, list[int]] = {"auction": [], "price": [], "date_time": []}
    for i in range(60):
        start = 500 * i
        auctions["id"].append(i)
        auctions["category"].append(10 + i % 4)
        auctions["date_time"].append(start)
        auctions["expires"].append(start + 1000 * (1 + i % 8))
    # bids in time order, one every 40 ms
    for j in range(600):
        t = 40 * j
        # an auction opened up to 3.5 s before, or (every 11th bid) one not open yet
        auction = t // 500 - j % 7 + (1 if j % 11 == 0 else 0)
        bids["auction"].append(auction)
        bids["price"].append((j * 7919) % 997)
        bids["date_time"].append(t)
    auction = pa.table(
        {
            "id": pa.array(auctions["id"], pa.int64()),
            "category": pa.array(auctions["category"], pa.int64()),
            "date_time": pa.array(auctions["date_time"], ms),
            "expires": pa.array(auctions["expires"], ms),
        }
    )
    bid = pa.table(
        {
            "auction": pa.array(bids["auction"], pa.int64()),
            "price": pa.array(bids["price"], pa.int64()),
            "date_time": pa.array(bids["date_time"], ms),
        }
    )
    env.from_arrow(auction).assign_timestamps("date_time").create_temporary_view("auction")
    env.from_arrow(bid).assign_timestamps("date_time").create_temporary_view("bid")
    return auction, bid


def test_q4_reference_sql_asks_for_a_constant_bound() -> None:
    """The reference SQL bounds the bids' time by each auction's own ``expires`` only:
    nothing bounds how long the join keeps an auction, so the SQL is refused, naming
    the bound and asking for a constant one (also written as a BETWEEN)."""
    env = ed.StreamEnvironment()
    auctions_and_bids(env)
    wanted = r"B.date_time <= A.expires: a bound of the event time by a column of each row"
    with pytest.raises(ed.SqlError, match=wanted) as raised:
        env.sql(Q4)
    assert "add a constant bound" in str(raised.value)
    assert raised.value.construct == "JOIN"
    between = Q4.replace(
        "B.date_time >= A.date_time AND B.date_time <= A.expires",
        "B.date_time BETWEEN A.date_time AND A.expires",
    )
    with pytest.raises(ed.SqlError, match=r"B.date_time BETWEEN A.date_time AND A.expires: a"):
        env.sql(between)


def test_q4_grouped_without_expires_is_running_and_named() -> None:
    """With a constant bound but without ``expires`` among the inner keys the maxes are
    a running aggregate's updates: grouping them again is refused, telling to group by
    ``expires``."""
    env = ed.StreamEnvironment()
    auctions_and_bids(env)
    query = Q4.replace("B.date_time <= A.expires", f"B.date_time <= A.expires AND {BOUND}")
    with pytest.raises(ed.SqlError, match=r"GROUP BY over a running GROUP BY") as raised:
        env.sql(query)
    assert "with expires among its keys each group closes" in str(raised.value)


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_q4_groups_close_at_expires_once_and_exact(parallelism: int) -> None:
    """Grouped by the auction and its ``expires``, each auction's max is emitted once,
    when the watermark passes its ``expires`` (bids at ``expires`` count, later ones
    not), in small batches at any parallelism; the averages over them per category
    equal DuckDB's."""
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=16)
    auction, bid = auctions_and_bids(env)
    closed = env.sql(
        f"""
        SELECT A.id, max(B.price) AS final, count(*) AS bids
        FROM auction AS A JOIN bid AS B ON A.id = B.auction
        WHERE B.date_time BETWEEN A.date_time AND A.expires AND {BOUND}
        GROUP BY A.id, A.expires
        """
    )
    averages = env.sql(
        f"""
        SELECT Q.category, avg(Q.final) AS avg, count(*) AS num
        FROM (
            SELECT max(B.price) AS final, A.category
            FROM auction AS A, bid AS B
            WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
              AND {BOUND}
            GROUP BY A.id, A.category, A.expires
        ) AS Q
        GROUP BY Q.category
        """
    )
    closed_rows = closed.collect()
    average_rows = averages.collect()
    env.execute("q4-closing")
    got = closed_rows.to_arrow().to_pylist()
    want = duck(
        """
        SELECT A.id, max(B.price) AS final, count(*) AS bids
        FROM auction AS A JOIN bid AS B ON A.id = B.auction
        WHERE B.date_time BETWEEN A.date_time AND A.expires
        GROUP BY A.id
        """,
        auction=auction,
        bid=bid,
    )
    assert len(want) > 20
    assert any(r["bids"] > 1 for r in want)
    # once per auction: a running max would emit an update per batch
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in want)
    same_rows(got, want)
    table = average_rows.to_arrow()
    last = table.group_by("category").aggregate([("num", "max")])
    final = table.join(
        last, keys=["category", "num"], right_keys=["category", "num_max"], join_type="inner"
    )
    want_avg = duck(
        """
        SELECT Q.category, avg(Q.final) AS avg, count(*) AS num FROM (
            SELECT A.id, A.category, max(B.price) AS final
            FROM auction AS A JOIN bid AS B ON A.id = B.auction
            WHERE B.date_time BETWEEN A.date_time AND A.expires
            GROUP BY A.id, A.category
        ) AS Q GROUP BY Q.category
        """,
        auction=auction,
        bid=bid,
    )
    same_rows(final.select(["category", "avg", "num"]).to_pylist(), want_avg)


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_q6_over_the_closed_auctions_equals_duckdb(parallelism: int) -> None:
    """Nexmark q6's shape: an ``OVER`` window (the last 3 closed auctions per
    category, in closing order) over q4's closing GROUP BY, whose rows are final and
    timed by ``expires``: one row per closed auction, as DuckDB's window function."""
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=16)
    auction, bid = auctions_and_bids(env)
    over = """
        SELECT Q.category, Q.id, avg(Q.final) OVER (
            PARTITION BY Q.category ORDER BY Q.expires, Q.id
            ROWS BETWEEN 2 PRECEDING AND CURRENT ROW
        ) AS avg
        FROM ({closed}) AS Q
    """
    closed = f"""
        SELECT max(B.price) AS final, A.category, A.expires, A.id
        FROM auction AS A, bid AS B
        WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
          AND {BOUND}
        GROUP BY A.id, A.category, A.expires
    """
    rows = env.sql(over.format(closed=closed)).collect()
    env.execute("q6-shape")
    duck_closed = """
        SELECT max(B.price) AS final, A.category, A.expires, A.id
        FROM auction AS A JOIN bid AS B ON A.id = B.auction
        WHERE B.date_time BETWEEN A.date_time AND A.expires
        GROUP BY A.id, A.category, A.expires
    """
    want = duck(over.format(closed=duck_closed), auction=auction, bid=bid)
    assert want
    same_rows(rows.to_pylist(), want)
