"""W9 (BENCHMARKS.md): a JSON clickstream, parsed, normalised and windowed, on eddyline
(fully native), Spark and PyFlink SQL, in the same run, checked against DuckDB.

Events are JSON lines ``{"user", "url", "latency_ms", "ts"}`` (``ts`` in epoch
milliseconds, in time order give or take 5 s), generated from a seed and written once
as a directory of Parquet files holding one string column ``value`` (the JSON text, as a
Kafka topic's values would be), and the same lines as a directory of ``.json`` files for
PyFlink, whose wheel ships no Parquet format (``pyflink/lib`` has the CSV and JSON
formats only, as ``benches/nexmark/peer_flink.py`` found). The query, per engine:

- parse the JSON (eddyline and Spark: ``from_json`` with the schema
  ``user STRING, url STRING, latency_ms INT, ts BIGINT``; Flink: its ``json`` format);
- normalise the URL to its domain:
  ``regexp_extract(lower(url), '^[a-z]+://(?:www\\.)?([^/:?#]+)', 1)``;
- per domain and one-minute tumbling window of ``ts``: ``count(*)``,
  ``count(DISTINCT user)``, ``approx_percentile(latency_ms, 0.99)`` (Spark:
  ``percentile_approx``, accuracy 10,000; Flink SQL has no approximate percentile, so
  Flink computes the exact, interpolated ``PERCENTILE(latency_ms, 0.99)`` of Flink 2.x).

eddyline runs ``from_parquet`` -> ``select`` -> ``select`` -> ``with_watermark`` ->
``key_by(domain).window(Tumbling(1 min)).agg(...)`` -> ``collect`` at parallelism P;
Spark the same DataFrame query as a batch (``spark.read.parquet``, ``local[P]``,
``groupBy(window(...), domain)``, ``toArrow()``); Flink the same in SQL, batch mode,
``parallelism.default`` P. Spark and Flink run in child processes started once (their
JVMs stay up across runs, which only helps them: warm JIT); each run is timed inside the
engine's process, from reading the first file to the last result row; start-up is not
included. The engines alternate, ``--warmup`` untimed rounds (the JVMs' JIT) and then
``--repeat`` timed rounds; a round is reported with its load average.

``check`` is true for a run when its rows equal DuckDB's over the same Parquet files:
the same (domain, window) groups, ``count(*)`` and ``count(DISTINCT user)`` exactly, and
the percentile within a rank tolerance: with ``n`` latencies in the group, the fraction
of them below the value returned must be at most ``0.99 + 0.01`` and the fraction at or
below it at least ``0.99 - 0.01 - 1/n``. The 0.01 is the rank error eddyline's
t-digest (100 centroids) documents (docs/API.md "Aggregates"); ``1/n`` allows for an
interpolated value between two neighbouring latencies. Spark's accuracy 10,000 gives a
rank error of 1e-4, inside the same bound.

    python benches/python/bench_clickstream.py --n 2000000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
NEXMARK = os.path.join(os.path.dirname(HERE), "nexmark")
if NEXMARK not in sys.path:
    sys.path.insert(0, NEXMARK)

from rss import tree_peak_rss_mb  # noqa: E402

SCHEMA_DDL = "user STRING, url STRING, latency_ms INT, ts BIGINT"
DOMAIN_PATTERN = r"^[a-z]+://(?:www\.)?([^/:?#]+)"
Q = 0.99
WINDOW_MS = 60_000
FLINK_PYTHON = "/work/.cache/flink-venv/bin/python"
RESULT_COLUMNS = ("domain", "window_start", "clicks", "users", "p99")

# ---- data ---------------------------------------------------------------------------


def make_data(directory: str, n: int, files: int, seed: int) -> tuple[str, str]:
    """Writes ``n`` events once (skipped when present) as ``clicks.parquet/`` and
    ``clicks.json/``; returns both directories."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet_dir = os.path.join(directory, f"clicks-{n}-{seed}.parquet")
    json_dir = os.path.join(directory, f"clicks-{n}-{seed}.json")
    if os.path.isdir(parquet_dir) and os.path.isdir(json_dir):
        return parquet_dir, json_dir
    rng = np.random.default_rng(seed)
    domains = [f"shop{i}.example.com" for i in range(25)] + [
        f"news{i}.example.org" for i in range(15)
    ]
    # Spelled as users type them: any case, with or without www., and a port sometimes.
    spellings = []
    for d in domains:
        for host in (d, "www." + d, d.upper(), "WWW." + d.title()):
            for scheme in ("https://", "http://", "HTTPS://"):
                spellings.append(scheme + host)
    prefix = pa.array(spellings)
    which = rng.integers(0, len(domains), n) * (len(spellings) // len(domains))
    which += rng.integers(0, len(spellings) // len(domains), n)
    paths = rng.integers(0, 5_000, n)
    port = np.where(rng.random(n) < 0.1, ":8443", "")
    url = pc.binary_join_element_wise(
        pc.take(prefix, pa.array(which)),
        pa.array(port),
        "/Item/",
        pc.cast(pa.array(paths), pa.string()),
        "?Ref=",
        pc.cast(pa.array(rng.integers(0, 100, n)), pa.string()),
        "",
    )
    user = pc.binary_join_element_wise(
        "u", pc.cast(pa.array(rng.integers(0, 50_000, n)), pa.string()), ""
    )
    latency = np.minimum(rng.gamma(2.0, 40.0, n) * np.where(rng.random(n) < 0.02, 10, 1), 1e6)
    start = 1_764_316_800_000  # 2025-11-28T08:00:00Z
    span_ms = 60 * WINDOW_MS
    ts = start + np.arange(n, dtype=np.int64) * span_ms // n + rng.integers(-5_000, 5_000, n)
    esc = pc.replace_substring(url, '"', '\\"')
    line = pc.binary_join_element_wise(
        '{"user":"',
        user,
        '","url":"',
        esc,
        '","latency_ms":',
        pc.cast(pa.array(latency.astype(np.int32)), pa.string()),
        ',"ts":',
        pc.cast(pa.array(ts), pa.string()),
        "}",
        "",
    )
    os.makedirs(parquet_dir + ".tmp", exist_ok=True)
    os.makedirs(json_dir + ".tmp", exist_ok=True)
    for f in range(files):
        rows = pa.array(np.arange(f, n, files))
        part = pc.take(line, rows)
        pq.write_table(
            pa.table({"value": part}),
            os.path.join(parquet_dir + ".tmp", f"part-{f}.parquet"),
            row_group_size=65_536,
        )
        with open(os.path.join(json_dir + ".tmp", f"part-{f}.json"), "w") as out:
            out.write("\n".join(part.to_pylist()))
            out.write("\n")
    os.rename(parquet_dir + ".tmp", parquet_dir)
    os.rename(json_dir + ".tmp", json_dir)
    return parquet_dir, json_dir


# ---- eddyline -----------------------------------------------------------------------


def eddyline_run(parquet_dir: str, parallelism: int) -> tuple[float, list[dict[str, Any]]]:
    """One timed run of the query on eddyline; its seconds and rows."""
    import eddyline as ed
    import eddyline.functions as F

    env = ed.StreamEnvironment(parallelism=parallelism)
    events = (
        env.from_parquet(parquet_dir)
        .select(F.from_json("value", SCHEMA_DDL).alias("e"))
        .select(
            F.col("e.user").alias("user"),
            F.regexp_extract(F.lower(F.col("e.url")), DOMAIN_PATTERN, 1).alias("domain"),
            F.col("e.latency_ms").alias("latency_ms"),
            F.col("e.ts").alias("ts"),
        )
    )
    out = (
        events.with_watermark("ts", "10 seconds")
        .key_by("domain")
        .window(ed.Tumbling("1 minute"))
        .agg(
            F.count("*").alias("clicks"),
            F.count_distinct("user").alias("users"),
            F.approx_percentile("latency_ms", Q).alias("p99"),
        )
        .collect()
    )
    start = time.perf_counter()
    env.execute()
    seconds = time.perf_counter() - start
    rows = [
        {
            "domain": r["domain"],
            "window_start": int(r["window_start"]),
            "clicks": r["clicks"],
            "users": r["users"],
            "p99": r["p99"],
        }
        for r in out.to_pylist()
    ]
    return seconds, rows


# ---- Spark and Flink (child processes: one JVM each, kept across runs) ----------------


def spark_worker(parallelism: int) -> None:
    """Reads a Parquet directory per line of stdin, runs the query, prints the report."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master(f"local[{parallelism}]")
        .appName("clickstream")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    for path in sys.stdin:
        start = time.perf_counter()
        e = spark.read.parquet(path.strip()).select(F.from_json("value", SCHEMA_DDL).alias("e"))
        events = e.select(
            F.col("e.user").alias("user"),
            F.regexp_extract(F.lower(F.col("e.url")), DOMAIN_PATTERN, 1).alias("domain"),
            F.col("e.latency_ms").alias("latency_ms"),
            F.timestamp_millis(F.col("e.ts")).alias("t"),
        )
        out = (
            events.groupBy(F.window("t", "1 minute"), "domain")
            .agg(
                F.count("*").alias("clicks"),
                F.count_distinct("user").alias("users"),
                F.percentile_approx("latency_ms", Q, 10_000).alias("p99"),
            )
            .select(
                "domain",
                F.unix_millis(F.col("window.start")).alias("window_start"),
                "clicks",
                "users",
                "p99",
            )
            .toArrow()
        )
        seconds = time.perf_counter() - start
        report = {"seconds": seconds, "rows": out.to_pylist(), "peak_rss_mb": tree_peak_rss_mb()}
        print(json.dumps(report), flush=True)
    spark.stop()


FLINK_DDL = """
    CREATE TABLE clicks (
        `user` STRING,
        url STRING,
        latency_ms INT,
        ts BIGINT
    ) WITH (
        'connector' = 'filesystem',
        'path' = '{path}',
        'format' = 'json'
    )
"""

FLINK_SQL = f"""
    SELECT domain, ts - MOD(ts, {WINDOW_MS}) AS window_start, COUNT(*) AS clicks,
           COUNT(DISTINCT `user`) AS users, PERCENTILE(latency_ms, {Q}) AS p99
    FROM (
        SELECT `user`, REGEXP_EXTRACT(LOWER(url), '{DOMAIN_PATTERN}', 1) AS domain,
               latency_ms, ts
        FROM clicks
    )
    GROUP BY domain, ts - MOD(ts, {WINDOW_MS})
"""
"""Flink's query: a plain ``GROUP BY`` of the minute (a tumbling window in batch mode is
the same grouping, and needs no time attribute)."""


def flink_worker(parallelism: int) -> None:
    """Reads a JSON directory per line of stdin, runs the query, prints the report."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", str(parallelism))
    for n, path in enumerate(sys.stdin):
        start = time.perf_counter()
        name = f"clicks{n}"
        t_env.execute_sql(FLINK_DDL.replace("clicks", name, 1).format(path=path.strip()))
        sql = FLINK_SQL.replace("FROM clicks", f"FROM {name}")
        rows = []
        with t_env.execute_sql(sql).collect() as results:
            for r in results:
                rows.append(dict(zip(RESULT_COLUMNS, r, strict=True)))
        seconds = time.perf_counter() - start
        report = {"seconds": seconds, "rows": rows, "peak_rss_mb": tree_peak_rss_mb()}
        print(json.dumps(report, default=float), flush=True)


class Peer:
    """A worker child process: one query per :meth:`run`."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, path: str) -> tuple[float, list[dict[str, Any]]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.proc.args} ended with {self.proc.wait()}")
        report = json.loads(line)
        return report["seconds"], report["rows"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


# ---- the reference --------------------------------------------------------------------


def duckdb_reference(parquet_dir: str) -> dict[tuple[str, int], tuple[int, int, list[int]]]:
    """Per (domain, window start): count, distinct users and the sorted latencies."""
    import duckdb

    sql = f"""
        SELECT domain, ts - ts % {WINDOW_MS} AS window_start, count(*) AS clicks,
               count(DISTINCT "user") AS users, list(latency_ms ORDER BY latency_ms) AS lat
        FROM (
            SELECT value ->> '$.user' AS "user",
                   regexp_extract(lower(value ->> '$.url'), '{DOMAIN_PATTERN}', 1) AS domain,
                   CAST(value ->> '$.latency_ms' AS INTEGER) AS latency_ms,
                   CAST(value ->> '$.ts' AS BIGINT) AS ts
            FROM read_parquet('{parquet_dir}/*.parquet')
        )
        GROUP BY ALL
    """
    return {
        (d, int(w)): (int(c), int(u), list(lat)) for d, w, c, u, lat in duckdb.sql(sql).fetchall()
    }


def percentile_ok(value: float, latencies: list[int]) -> bool:
    """Whether ``value`` is a 0.99 quantile of ``latencies`` within the tolerance of the
    module docstring."""
    import bisect

    n = len(latencies)
    below = bisect.bisect_left(latencies, value) / n
    at_or_below = bisect.bisect_right(latencies, value) / n
    return below <= Q + 0.01 and at_or_below >= Q - 0.01 - 1 / n


def check(rows: list[dict[str, Any]], reference: dict) -> bool:
    got = {(r["domain"], int(r["window_start"])): r for r in rows}
    if got.keys() != reference.keys() or len(got) != len(rows):
        return False
    for key, (clicks, users, lat) in reference.items():
        r = got[key]
        if (r["clicks"], r["users"]) != (clicks, users):
            return False
        if not percentile_ok(float(r["p99"]), lat):
            return False
    return True


# ---- the run --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--data-dir", default="/tmp/eddyline-w9")
    parser.add_argument("--engines", default="eddyline,spark,flink")
    parser.add_argument("--worker", choices=["spark", "flink"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "spark":
        return spark_worker(args.parallelism)
    if args.worker == "flink":
        return flink_worker(args.parallelism)

    os.makedirs(args.data_dir, exist_ok=True)
    parquet_dir, json_dir = make_data(args.data_dir, args.n, args.files, args.seed)
    reference = duckdb_reference(parquet_dir)
    engines = args.engines.split(",")
    me = os.path.abspath(__file__)
    peers: dict[str, Peer] = {}
    if "spark" in engines:
        peers["spark"] = Peer(
            [sys.executable, me, "--worker", "spark", "--parallelism", str(args.parallelism)]
        )
    if "flink" in engines:
        argv = [FLINK_PYTHON, me, "--worker", "flink", "--parallelism", str(args.parallelism)]
        peers["flink"] = Peer(argv)
    times: dict[str, list[float]] = {e: [] for e in engines}
    checks: dict[str, bool] = {e: True for e in engines}
    try:
        for round_ in range(-args.warmup, args.repeat):
            for engine in engines:
                if engine == "eddyline":
                    seconds, rows = eddyline_run(parquet_dir, args.parallelism)
                else:
                    path = json_dir if engine == "flink" else parquet_dir
                    seconds, rows = peers[engine].run(path)
                ok = check(rows, reference)
                checks[engine] &= ok
                if round_ >= 0:
                    times[engine].append(seconds)
                print(json.dumps(report_line(engine, args, round_, seconds, ok)), flush=True)
    finally:
        for peer in peers.values():
            peer.close()
    print(json.dumps(summary(args, times, checks, len(reference))), flush=True)


def report_line(
    engine: str, args: argparse.Namespace, round_: int, seconds: float, ok: bool
) -> dict[str, Any]:
    return {
        "engine": engine,
        "workload": "W9",
        "n": args.n,
        "style": "native" if engine == "eddyline" else "sql",
        "parallelism": args.parallelism,
        "round": round_,
        "seconds": round(seconds, 3),
        "rows_per_s": round(args.n / seconds),
        "load": os.getloadavg()[0],
        "check": ok,
    }


def summary(
    args: argparse.Namespace, times: dict[str, list[float]], checks: dict[str, bool], groups: int
) -> dict[str, Any]:
    medians = {e: statistics.median(ts) for e, ts in times.items()}
    out: dict[str, Any] = {
        "workload": "W9",
        "n": args.n,
        "groups": groups,
        "median_s": {e: round(m, 3) for e, m in medians.items()},
        "median_rows_per_s": {e: round(args.n / m) for e, m in medians.items()},
        "check": checks,
        "loadavg": os.getloadavg(),
    }
    if "eddyline" in times:
        for peer in (e for e in times if e != "eddyline"):
            pairs = [p / m for p, m in zip(times[peer], times["eddyline"], strict=True)]
            out[f"{peer}_over_eddyline"] = {
                "ratio_of_medians": round(medians[peer] / medians["eddyline"], 1),
                "median_of_pair_ratios": round(statistics.median(pairs), 1),
            }
    return out


if __name__ == "__main__":
    main()
