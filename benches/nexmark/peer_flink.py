"""Nexmark q0, q1, q2 and q5 on PyFlink's SQL engine, run by ``run.py --engine flink``.

Flink's Table API / SQL in *batch* mode (``EnvironmentSettings.in_batch_mode()``,
``parallelism.default`` P, the local mini-cluster that PyFlink starts in its JVM, its
default memory configuration), all in the JVM: no Python UDFs. The input is the
same bids, but as CSV: the ``apache-flink`` wheel ships no Parquet format
(``pyflink/lib`` holds the CSV and JSON formats only, ``pyflink/opt`` neither), so
``run.py`` writes ``bid.parquet`` once as a directory of headerless CSV files
(``bid.csv/part-*.csv``, cached beside the Parquet file) and the filesystem connector
reads that directory (``'connector' = 'filesystem', 'format' = 'csv'``).

The SQL follows nexmark-flink's ``q*.sql`` and ``queries.SQL``: q1 as
``price * 908 / 1000`` (integer division of BIGINTs), q5 with the windowing TVF
``HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)``,
the largest count per window, and the join of the two.

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
        extra STRING
    ) WITH (
        'connector' = 'filesystem',
        'path' = '{path}',
        'format' = 'csv'
    )
"""
"""The bids, as the columns of ``generator.BID_SCHEMA`` in order (the CSV has no header)."""

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
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--query", choices=sorted(SQL), required=True)
    ap.add_argument("--input", required=True, help="the directory of the bids' CSV files")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--report", required=True, help="where to write the JSON report")
    ap.add_argument("--result", help="also write the collected rows to this Parquet file")
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyflink.table import EnvironmentSettings, TableDescriptor, TableEnvironment

    t0 = time.perf_counter()
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    config = t_env.get_config()
    config.set("parallelism.default", str(args.parallelism))
    config.set("table.exec.resource.default-parallelism", str(args.parallelism))
    t_env.execute_sql(BID_DDL.format(path=os.path.abspath(args.input).replace("'", "''")))
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
        "mode": "Flink SQL batch, filesystem connector, CSV",
    }
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
