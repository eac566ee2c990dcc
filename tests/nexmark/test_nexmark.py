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
@pytest.mark.parametrize("name", ["q0", "q1", "q2", "q5"])
def test_query_matches_duckdb(tables: dict[str, pa.Table], name: str, parallelism: int) -> None:
    bid = tables["bid"]
    got = queries.QUERIES[name](bid, parallelism)
    expected = queries.duckdb_query(name, bid)
    assert expected.num_rows > 0
    assert queries.compare(got, expected) == "ok"


def test_q5_small_batches_from_parquet(tables: dict[str, pa.Table], tmp_path: Path) -> None:
    paths = gen.write_parquet(tables, str(tmp_path))
    got = queries.run_query("q5", paths["bid"], parallelism=2, batch_size=500)
    expected = queries.duckdb_query("q5", paths["bid"])
    assert queries.compare(got, expected) == "ok"
    # one or more rows (ties) per sliding window holding bids: 20 s of bids, 2 s slide
    assert len(set(expected.column("window_start").to_pylist())) >= 12


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


def test_harness_json_line(tmp_path: Path) -> None:
    command = [sys.executable, str(BENCH / "run.py"), "--query", "q5", "--events", "20000"]
    command += ["--check", "--parallelism", "2", "--data-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    line = json.loads(lines[0])
    assert line["engine"] == "eddyline"
    assert line["workload"] == "nexmark-q5"
    assert line["n"] == 20_000
    assert line["check"] == "ok"
    for field in ("seconds", "events_per_s", "peak_rss_mb"):
        assert line[field] > 0, field
    assert (tmp_path / "events20000-seed42-eps10000" / "bid.parquet").exists()


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
