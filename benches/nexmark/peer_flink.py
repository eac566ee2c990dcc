"""Nexmark q0 to q5, q7, q8 and q11 on PyFlink's SQL engine, run by ``run.py --engine flink``.

Flink's Table API / SQL in *batch* mode (``EnvironmentSettings.in_batch_mode()``; q11 in
streaming mode, see :data:`STREAMING`; ``parallelism.default`` P, the local mini-cluster
that PyFlink starts in its JVM, its default memory configuration), all in the JVM: no
Python UDFs. The input is the same events, but as CSV: the ``apache-flink`` wheel ships no
Parquet format
(``pyflink/lib`` holds the CSV and JSON formats only, ``pyflink/opt`` neither), so
``run.py`` writes ``bid.parquet`` once as a directory of headerless CSV files
(``bid.csv/part-*.csv``, cached beside the Parquet file) and the filesystem connector
reads that directory (``'connector' = 'filesystem', 'format' = 'csv'``). q3 reads the
auctions and persons instead: this script writes ``auction.parquet`` and
``person.parquet`` (beside ``bid.csv``) once as ``auction.csv/`` and ``person.csv/`` the
same way, before the timed run.

The SQL follows nexmark-flink's ``q*.sql`` and ``queries.SQL``: q1 as
``price * 908 / 1000`` (integer division of BIGINTs), q5 with the windowing TVF
``HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)``,
the largest count per window, and the join of the two; q3 the inner join of the
category-10 auctions with their sellers in OR, ID or CA; q7 the windowing TVF
``TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)``'s max price per window
timed at ``window_end - 1 ms`` (nexmark-flink's ``TUMBLE_ROWTIME``), joined back to the bids
on the price within the 10 s before it (the older group-window form, ``GROUP BY
TUMBLE(date_time, ...)`` with ``TUMBLE_ROWTIME``, joined in batch mode returned 1 row where
there are 10 on 1 M events, so it is not used);
q11 the group window ``SESSION(date_time, INTERVAL '10' SECOND)`` per bidder with
``SESSION_START`` / ``SESSION_END``. Flink's session windows merge two windows that
only touch, so bids of one bidder exactly 10 s apart are one session there and two in
``queries.SQL`` and eddyline (see :mod:`queries`): q11's ``--check`` may then differ.

The timed run writes the result to a ``blackhole`` sink (``INSERT INTO``, waited for);
``seconds`` covers planning, the job and reading the CSV files. Creating the table
environment (starting the JVM) is ``startup_s``. ``--result`` then collects the rows
(``Table.to_pandas()``) in a second, untimed job, for ``--check`` on small runs.
``peak_rss_mb`` is the sum of the ``VmHWM`` of this process and its descendants (the
JVM) read right after the timed run, before the collection (see :mod:`rss`).

    python benches/nexmark/peer_flink.py --query q5 --input bid.csv --report r.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from rss import tree_peak_rss_mb  # noqa: E402

BID_DDL = """
    CREATE TABLE bid (
        auction BIGINT,
        bidder BIGINT,
        price BIGINT,
        channel STRING,
        url STRING,
        date_time TIMESTAMP(3),
        extra STRING{watermark}
    ) WITH (
        'connector' = 'filesystem',
        'path' = '{path}',
        'format' = 'csv'
    )
"""
"""The bids, as the columns of ``generator.BID_SCHEMA`` in order (the CSV has no header);
``{watermark}`` is empty, or the watermark declaration of a streaming query."""

STREAMING = frozenset({"q11"})
"""The queries run in *streaming* mode: Flink's batch mode has no session windows ("Unaligned
windows like session are not supported in batch mode yet", Flink 2.3), so q11 runs as
nexmark-flink runs it, on a watermark of the bids' time. Its delay (1 day) exceeds the span of
event time of any run here, so no bid is late and the sessions fire at the end of the input:
the two readers take the 8 CSV files in no fixed order, and with no delay the bids of a file
read after a later one were dropped as late (11,660 sessions instead of 19,916 on 1 M
events)."""

WATERMARK = ",\n        WATERMARK FOR date_time AS date_time - INTERVAL '1' DAY"

AUCTION_DDL = """
    CREATE TABLE auction (
        id BIGINT,
        item_name STRING,
        description STRING,
        initial_bid BIGINT,
        reserve BIGINT,
        date_time TIMESTAMP(3),
        expires TIMESTAMP(3),
        seller BIGINT,
        category BIGINT,
        extra STRING
    ) WITH (
        'connector' = 'filesystem',
        'path' = '{path}',
        'format' = 'csv'
    )
"""
"""The auctions, as the columns of ``generator.AUCTION_SCHEMA`` in order."""

PERSON_DDL = """
    CREATE TABLE person (
        id BIGINT,
        name STRING,
        email_address STRING,
        credit_card STRING,
        city STRING,
        state STRING,
        date_time TIMESTAMP(3),
        extra STRING
    ) WITH (
        'connector' = 'filesystem',
        'path' = '{path}',
        'format' = 'csv'
    )
"""
"""The persons, as the columns of ``generator.PERSON_SCHEMA`` in order."""

TABLES: dict[str, tuple[str, ...]] = {
    "q3": ("auction", "person"),
    "q4": ("auction", "bid"),
    "q8": ("person", "auction"),
}
"""The tables a query reads when not the bids alone (as ``queries.TABLES``)."""

DDL = {"bid": BID_DDL, "auction": AUCTION_DDL, "person": PERSON_DDL}

SQL: dict[str, str] = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, price * 908 / 1000 AS price, date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    "q5": """
        WITH counts AS (
            SELECT auction, window_start, window_end, COUNT(*) AS num
            FROM TABLE(
                HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)
            )
            GROUP BY auction, window_start, window_end
        ),
        maxes AS (
            SELECT window_start, window_end, MAX(num) AS maxn
            FROM counts
            GROUP BY window_start, window_end
        )
        SELECT c.auction, c.num, c.window_start, c.window_end
        FROM counts AS c JOIN maxes AS m
        ON c.window_start = m.window_start AND c.window_end = m.window_end
           AND c.num >= m.maxn
    """,
    # nexmark-flink's q4 (an auction's closing price is its largest bid in its time)
    "q4": """
        SELECT Q.category, AVG(CAST(Q.final AS DOUBLE)) AS `avg`
        FROM (
            SELECT MAX(B.price) AS final, A.category
            FROM auction AS A, bid AS B
            WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
            GROUP BY A.id, A.category
        ) AS Q
        GROUP BY Q.category
    """,
    "q3": """
        SELECT P.name, P.city, P.state, A.id
        FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
        WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
    """,
    "q7": """
        SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
        FROM bid AS B
        JOIN (
            SELECT MAX(price) AS maxprice, window_end - INTERVAL '0.001' SECOND AS date_time
            FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
            GROUP BY window_start, window_end
        ) AS B1
        ON B.price = B1.maxprice
        WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time
    """,
    # nexmark-flink's q8 with windowing TVFs: the persons who opened an auction in the
    # tumbling 10 s window in which they registered
    "q8": """
        SELECT P.id, P.name, P.starttime
        FROM (
            SELECT id, name, window_start AS starttime
            FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
            GROUP BY id, name, window_start, window_end
        ) AS P
        JOIN (
            SELECT seller, window_start AS starttime
            FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
            GROUP BY seller, window_start, window_end
        ) AS A
        ON P.id = A.seller AND P.starttime = A.starttime
    """,
    "q11": """
        SELECT bidder, COUNT(*) AS bid_count,
               SESSION_START(date_time, INTERVAL '10' SECOND) AS starttime,
               SESSION_END(date_time, INTERVAL '10' SECOND) AS endtime
        FROM bid
        GROUP BY bidder, SESSION(date_time, INTERVAL '10' SECOND)
    """,
}


def cached_csv(parquet_path: str) -> str:
    """The directory ``<table>.csv`` beside ``<table>.parquet``: its rows as one headerless
    CSV file, written once (as ``run.cached_csv`` writes the bids)."""
    import tempfile

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    out = parquet_path[: -len(".parquet")] + ".csv"
    if os.path.isdir(out):
        return out
    tmp = tempfile.mkdtemp(prefix=".tmp-csv-", dir=os.path.dirname(out))
    parquet = pq.ParquetFile(parquet_path)
    options = pacsv.WriteOptions(include_header=False)
    with pacsv.CSVWriter(
        os.path.join(tmp, "part-00000.csv"), parquet.schema_arrow, write_options=options
    ) as writer:
        for batch in parquet.iter_batches(batch_size=65_536):
            writer.write_batch(batch)
    try:
        os.replace(tmp, out)
    except OSError:  # another run made it first
        if not os.path.isdir(out):
            raise
    return out


def table_paths(query: str, bid_csv: str) -> dict[str, str]:
    """The CSV directory of each table ``query`` reads; ``bid_csv`` is the bids' (``run.py``
    passes it), the others are made from the Parquet files beside it."""
    tables = TABLES.get(query, ("bid",))
    directory = os.path.dirname(os.path.abspath(bid_csv))
    return {
        table: bid_csv
        if table == "bid"
        else cached_csv(os.path.join(directory, f"{table}.parquet"))
        for table in tables
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--query", choices=sorted(SQL), required=True)
    ap.add_argument(
        "--input",
        required=True,
        help="the directory of the bids' CSV files (q3: beside auction.parquet, person.parquet)",
    )
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--report", required=True, help="where to write the JSON report")
    ap.add_argument("--result", help="also write the collected rows to this Parquet file")
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyflink.table import EnvironmentSettings, TableDescriptor, TableEnvironment

    paths = table_paths(args.query, args.input)  # before the clock: written once, cached
    t0 = time.perf_counter()
    streaming = args.query in STREAMING
    settings = EnvironmentSettings.in_streaming_mode() if streaming else None
    t_env = TableEnvironment.create(settings or EnvironmentSettings.in_batch_mode())
    config = t_env.get_config()
    config.set("parallelism.default", str(args.parallelism))
    config.set("table.exec.resource.default-parallelism", str(args.parallelism))
    for table, path in paths.items():
        escaped = os.path.abspath(path).replace("'", "''")
        watermark = WATERMARK if streaming else ""
        t_env.execute_sql(DDL[table].format(path=escaped, watermark=watermark))
    startup = time.perf_counter() - t0

    t1 = time.perf_counter()
    query = t_env.sql_query(SQL[args.query])
    query.execute_insert(TableDescriptor.for_connector("blackhole").build()).wait()
    seconds = time.perf_counter() - t1
    rss = tree_peak_rss_mb()

    rows_out = None
    if args.result:
        frame = t_env.sql_query(SQL[args.query]).to_pandas()
        result = pa.Table.from_pandas(frame, preserve_index=False)
        rows_out = result.num_rows
        pq.write_table(result, args.result)
    report = {
        "seconds": seconds,
        "startup_s": startup,
        "rows_out": rows_out,
        "peak_rss_mb": rss,
        "sink": "blackhole",
        "mode": f"Flink SQL {'streaming' if streaming else 'batch'}, filesystem connector, CSV",
    }
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
