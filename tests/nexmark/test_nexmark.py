"""The Nexmark generator (benches/nexmark/generator.py), the queries on eddyline against
the same queries in DuckDB (benches/nexmark/queries.py), and the harness's JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# duckdb is in the test extra: a missing install fails here, it never skips.
import duckdb  # noqa: F401
import numpy as np
import pyarrow as pa
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benches" / "nexmark"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import generator as gen  # noqa: E402
import queries  # noqa: E402

N = 20_000
EPS = 1_000  # 20 s of event time: several q5 windows
SLOW_EPS = 100


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return gen.generate(N, seed=7, events_per_second=EPS)


def _ms(column: pa.ChunkedArray) -> np.ndarray:
    return column.cast(pa.int64()).to_numpy()


def test_same_seed_same_tables_other_seed_differs() -> None:
    a = gen.generate(5_000, seed=1)
    b = gen.generate(5_000, seed=1)
    c = gen.generate(5_000, seed=2)
    for name in ("person", "auction", "bid"):
        assert a[name].equals(b[name]), name
        assert not a[name].equals(c[name]), name


def test_schemas(tables: dict[str, pa.Table]) -> None:
    assert tables["person"].schema.equals(gen.PERSON_SCHEMA)
    assert tables["auction"].schema.equals(gen.AUCTION_SCHEMA)
    assert tables["bid"].schema.equals(gen.BID_SCHEMA)
    assert tables["bid"].schema.field("date_time").type == pa.timestamp("ms")


def test_proportion_and_id_ranges(tables: dict[str, pa.Table]) -> None:
    person, auction, bid = tables["person"], tables["auction"], tables["bid"]
    assert (person.num_rows, auction.num_rows, bid.num_rows) == (N // 50, 3 * N // 50, 46 * N // 50)
    ids = person.column("id").to_numpy()
    assert np.array_equal(ids, np.arange(1000, 1000 + person.num_rows))
    ids = auction.column("id").to_numpy()
    assert np.array_equal(ids, np.arange(1000, 1000 + auction.num_rows))
    last_person, last_auction = 1000 + person.num_rows - 1, 1000 + auction.num_rows - 1
    for column, last in (("auction", last_auction), ("bidder", last_person)):
        values = bid.column(column).to_numpy()
        assert values.min() >= 1000 and values.max() <= last + 10, column  # ids may lead by 10
    sellers = auction.column("seller").to_numpy()
    assert sellers.min() >= 1000 and sellers.max() <= last_person + 10
    categories = set(auction.column("category").to_pylist())
    assert categories <= set(range(10, 15))
    prices = bid.column("price").to_numpy()
    assert prices.min() >= 100 and prices.max() <= 100_000_000
    reserve, initial = auction.column("reserve").to_numpy(), auction.column("initial_bid")
    assert (reserve > initial.to_numpy()).all()
    # Hot auctions: about half the bids go to the first auction of the latest batch of 100.
    hot = np.isin(bid.column("auction").to_numpy() - 1000, np.arange(0, 2000, 100))
    assert 0.45 < hot.mean() < 0.6
    assert set(person.column("state").to_pylist()) <= set(gen.US_STATES)
    assert set(person.column("city").to_pylist()) <= set(gen.US_CITIES)


def test_timestamps_follow_the_event_number(tables: dict[str, pa.Table]) -> None:
    person, auction, bid = tables["person"], tables["auction"], tables["bid"]
    for name, table in tables.items():
        assert (np.diff(_ms(table.column("date_time"))) >= 0).all(), name
    # Event e happens at BASE + e * 1000 // rate; person i is event 50 * i.
    events = 50 * (person.column("id").to_numpy() - 1000)
    assert np.array_equal(_ms(person.column("date_time")), gen.BASE_TIME_MS + events * 1000 // EPS)
    last = gen.BASE_TIME_MS + (N - 1) * 1000 // EPS
    assert _ms(bid.column("date_time")).max() <= last
    assert (_ms(auction.column("expires")) > _ms(auction.column("date_time"))).all()


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("name", ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q11"])
def test_query_matches_duckdb(tables: dict[str, pa.Table], name: str, parallelism: int) -> None:
    got = queries.QUERIES[name](tables, parallelism, events_per_second=EPS)
    expected = queries.duckdb_query(name, tables)
    assert expected.num_rows > 0
    assert queries.compare(got, expected) == "ok"


def test_q5_small_batches_from_parquet(tables: dict[str, pa.Table], tmp_path: Path) -> None:
    paths = gen.write_parquet(tables, str(tmp_path))
    got = queries.run_query("q5", paths["bid"], parallelism=2, batch_size=500)
    expected = queries.duckdb_query("q5", paths["bid"])
    assert queries.compare(got, expected) == "ok"
    # one or more rows (ties) per sliding window holding bids: 20 s of bids, 2 s slide
    assert len(set(expected.column("window_start").to_pylist())) >= 12


@pytest.fixture(scope="module")
def slow_tables() -> dict[str, pa.Table]:
    """200 s of event time (10 ms between events): 20 q7 windows, sparser q11 sessions."""
    return gen.generate(N, seed=11, events_per_second=SLOW_EPS)


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("name", ["q3", "q4", "q7", "q8", "q11"])
def test_joins_and_sessions_from_parquet_small_batches(
    slow_tables: dict[str, pa.Table], tmp_path: Path, name: str, parallelism: int
) -> None:
    paths = gen.write_parquet(slow_tables, str(tmp_path))
    got = queries.run_query(
        name, paths, parallelism=parallelism, batch_size=300, events_per_second=SLOW_EPS
    )
    expected = queries.duckdb_query(name, paths)
    assert queries.compare(got, expected) == "ok"
    if name == "q7":  # at least one highest bid per window
        windows = set(_ms(expected.column("date_time")) // queries.Q7_SIZE_MS)
        assert len(windows) == 20
    if name == "q11":  # the hot bidder's long sessions and the others' short ones
        assert expected.num_rows > 1000
        assert max(expected.column("bid_count").to_pylist()) > 100


def _bids(rows: list[tuple[int, int, int]]) -> pa.Table:
    """A ``bid`` table from ``(bidder, price, ms after BASE_TIME_MS)`` rows."""
    n = len(rows)
    return pa.table(
        {
            "auction": pa.array(range(1000, 1000 + n), pa.int64()),
            "bidder": pa.array([r[0] for r in rows], pa.int64()),
            "price": pa.array([r[1] for r in rows], pa.int64()),
            "channel": pa.array(["Google"] * n),
            "url": pa.array(["https://www.nexmark.com/a/b/c/item.htm?query=1"] * n),
            "date_time": pa.array([gen.BASE_TIME_MS + r[2] for r in rows]).cast(pa.timestamp("ms")),
            "extra": pa.array([""] * n),
        },
        schema=gen.BID_SCHEMA,
    )


Q7_EDGES = [  # (bidder, price, ms): windows of 10 s from BASE_TIME_MS (a multiple of 10 s)
    (1, 5, 100),
    (1, 7, 200),  # window 0's max (a tie)
    (1, 7, 9_999),  # window 0's max, and window 1's: its last ms is window 1's rowtime - 10 s
    (2, 3, 10_000),
    (2, 7, 15_000),  # window 1's max (a tie)
    (2, 7, 19_999),  # window 1's max; window 2's max differs
    (3, 2, 20_000),
    (3, 8, 29_999),  # window 2's max, and window 3's (the same price)
    (4, 8, 30_000),  # window 3's max (a tie)
    (4, 1, 30_001),
    (5, 8, 45_000),  # window 4's max only: window 3's bids are more than 10 s before its rowtime
]


@pytest.mark.parametrize("parallelism", [1, 2])
def test_q7_window_edges_and_ties(parallelism: int) -> None:
    """nexmark-flink's q7 condition, rowtime - 10 s <= bid time <= rowtime (rowtime: the
    window's last ms), on hand-made bids; the SQL is checked against the same rows."""
    bids = _bids(Q7_EDGES)
    got = queries.q7(bids, parallelism)
    expected = queries.duckdb_query("q7", bids)
    assert queries.compare(got, expected) == "ok"
    ms = sorted(int(t) - gen.BASE_TIME_MS for t in _ms(got.column("date_time")))
    assert ms == [200, 9_999, 9_999, 15_000, 19_999, 29_999, 29_999, 30_000, 45_000]


Q11_EDGES = [  # (bidder, price, ms)
    (1, 1, 0),
    (2, 1, 5_000),
    (2, 1, 5_000),  # the same ms: one session of 2
    (1, 1, 9_999),  # 9,999 ms after the last: the same session
    (2, 1, 15_000),  # exactly 10 s after the last: a new session
    (1, 1, 19_999),  # exactly 10 s after the last: a new session
    (1, 1, 29_998),  # 9,999 ms after the last: the same session
    (3, 1, 40_000),
]


@pytest.mark.parametrize("parallelism", [1, 2])
def test_q11_session_gap_edges(parallelism: int) -> None:
    """Bids closer than 10 s share a session, bids exactly 10 s apart do not (eddyline's
    ``ed.Session``; Flink's sessions would merge them); the SQL is checked too."""
    bids = _bids(Q11_EDGES)
    got = queries.q11(bids, parallelism)
    expected = queries.duckdb_query("q11", bids)
    assert queries.compare(got, expected) == "ok"
    start = _ms(got.column("starttime")) - gen.BASE_TIME_MS
    end = _ms(got.column("endtime")) - gen.BASE_TIME_MS
    bidders, counts = got.column("bidder").to_pylist(), got.column("bid_count").to_pylist()
    rows = zip(bidders, counts, start, end, strict=True)
    assert sorted(rows) == [
        (1, 2, 0, 19_999),
        (1, 2, 19_999, 39_998),
        (2, 1, 15_000, 25_000),
        (2, 2, 5_000, 15_000),
        (3, 1, 40_000, 50_000),
    ]


def test_inputs_name_the_missing_table(tables: dict[str, pa.Table]) -> None:
    with pytest.raises(ValueError, match=r"q3 reads the tables \['auction', 'person'\]"):
        queries.run_query("q3", tables["bid"])


def test_compare_reports_a_mismatch() -> None:
    a = pa.table({"x": [1, 2, 3]})
    assert queries.compare(a, pa.table({"x": [3, 1, 2]})) == "ok"
    assert queries.compare(a, pa.table({"x": [1, 2, 4]})).startswith("MISMATCH")
    assert queries.compare(a, pa.table({"x": [1, 2]})).startswith("MISMATCH")
    assert queries.compare(a, pa.table({"y": [1, 2, 3]})).startswith("MISMATCH")


def test_parse_count() -> None:
    assert gen.parse_count("10M") == 10_000_000
    assert gen.parse_count("1M") == 1_000_000
    assert gen.parse_count("100k") == 100_000
    assert gen.parse_count("20000") == 20_000


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness's cache of generated events, shared by its runs here."""
    return tmp_path_factory.mktemp("nexmark-data")


@pytest.mark.parametrize(("query", "rows_in"), [("q5", 18_400), ("q3", 400 + 1_200)])
def test_harness_json_line(data_dir: Path, query: str, rows_in: int) -> None:
    command = [sys.executable, str(BENCH / "run.py"), "--query", query, "--events", "20000"]
    command += ["--check", "--parallelism", "2", "--data-dir", str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    line = json.loads(lines[0])
    assert line["engine"] == "eddyline"
    assert line["workload"] == f"nexmark-{query}"
    assert line["n"] == 20_000
    assert line["rows_in"] == rows_in  # q5 reads the bids, q3 the persons and auctions
    assert line["check"] == "ok"
    for field in ("seconds", "events_per_s", "peak_rss_mb", "rows_out"):
        assert line[field] > 0, field
    assert (data_dir / "events20000-seed42-eps10000" / "bid.parquet").exists()


def test_tree_peak_rss_counts_a_child() -> None:
    """The peers' peak RSS (benches/nexmark/rss.py) adds their children's, the JVM's."""
    import os

    import rss

    # The child holds 64 MiB until its stdin closes (no sleep: the kill ends it).
    code = "import sys; b = b'x' * (64 << 20); print('up', flush=True); sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "up"
            assert child.pid in rss.descendants(os.getpid())
            own = rss.vm_hwm_kb(os.getpid()) / 1024.0
            assert rss.tree_peak_rss_mb() >= own + 60
        finally:
            child.kill()


def test_cached_csv_holds_the_bids(tables: dict[str, pa.Table], tmp_path: Path) -> None:
    """The CSV copy of bid.parquet that the Flink peer reads (benches/nexmark/run.py)."""
    import pyarrow.csv as pacsv
    import run

    gen.write_parquet(tables, str(tmp_path))
    out = run.cached_csv(str(tmp_path))
    assert run.cached_csv(str(tmp_path)) == out
    parts = sorted(Path(out).iterdir())
    assert len(parts) == run.CSV_PARTS
    read = pa.concat_tables(
        pacsv.read_csv(
            part,
            read_options=pacsv.ReadOptions(column_names=gen.BID_SCHEMA.names),
            convert_options=pacsv.ConvertOptions(
                column_types=gen.BID_SCHEMA, strings_can_be_null=False
            ),
        )
        for part in parts
    )
    assert read.equals(tables["bid"])
