"""Nexmark q1 and q5 on Spark SQL, run by ``run.py --engine spark`` in a child process.

This is Spark's *batch* engine (``spark.read.parquet`` of the same ``bid.parquet`` that
eddyline reads, ``local[P]`` master, default configuration otherwise: adaptive query
execution on, 200 shuffle partitions coalesced by it, 1 GiB driver heap), not
Structured Streaming: the whole file is one bounded input, and q5's windows are a
plain ``GROUP BY window(date_time, '10 seconds', '2 seconds')`` with no watermark.

- q1: ``price * 908 DIV 1000`` (integer division, as DuckDB's ``//``); the 9.2 M
  rows of a 10 M-event run are not collected but written to Spark's ``noop`` sink
  (every row is computed, nothing is kept); ``--result`` collects them in a second,
  untimed run, so use it for small runs only;
- q5: the count per auction and sliding window, the largest count per window, and the
  join of the two (the nexmark-flink SQL, keeping the window bounds as
  ``queries.SQL["q5"]`` does); the result (a few thousand rows) is collected with
  ``DataFrame.toArrow()`` inside the timed part.

``seconds`` times the query only (reading the file included); starting the session
(the JVM) is ``startup_s``. ``peak_rss_mb`` is the sum of the ``VmHWM`` of this
process and its descendants (the JVM) read right after the timed part, before any
``--result`` collection (see :mod:`rss`). The report is one JSON object written to
``--report``.

    python benches/nexmark/peer_spark.py --query q5 --input bid.parquet --report r.json
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

SQL: dict[str, str] = {
    "q1": """
        SELECT auction, bidder, price * 908 DIV 1000 AS price, date_time, extra FROM bid
    """,
    "q5": """
        WITH counts AS (
            SELECT auction, window.start AS ws, window.end AS we, count(*) AS num
            FROM bid
            GROUP BY auction, window(date_time, '10 seconds', '2 seconds')
        ),
        maxes AS (
            SELECT ws, max(num) AS maxn FROM counts GROUP BY ws
        )
        SELECT c.auction, c.num, c.ws AS window_start, c.we AS window_end
        FROM counts AS c JOIN maxes AS m ON c.ws = m.ws AND c.num >= m.maxn
    """,
}
COLLECTED = {"q5"}
"""The queries whose timed run collects the result (the others go to the noop sink)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--query", choices=sorted(SQL), required=True)
    ap.add_argument("--input", required=True, help="bid.parquet")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--report", required=True, help="where to write the JSON report")
    ap.add_argument("--result", help="also write the collected rows to this Parquet file")
    args = ap.parse_args()

    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(f"local[{args.parallelism}]")
        .appName(f"nexmark-{args.query}")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0

    t1 = time.perf_counter()
    spark.read.parquet(args.input).createOrReplaceTempView("bid")
    out = spark.sql(SQL[args.query])
    result = None
    if args.query in COLLECTED:
        result = out.toArrow()
        sink = "collect"
    else:
        out.write.format("noop").mode("overwrite").save()
        sink = "noop"
    seconds = time.perf_counter() - t1
    rss = tree_peak_rss_mb()

    if args.result:
        if result is None:
            result = spark.sql(SQL[args.query]).toArrow()
        pq.write_table(result, args.result)
    spark.stop()
    report = {
        "seconds": seconds,
        "startup_s": startup,
        "rows_out": None if result is None else result.num_rows,
        "peak_rss_mb": rss,
        "sink": sink,
        "mode": "Spark SQL batch, spark.read.parquet",
    }
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
