"""Runs one Nexmark query on eddyline or on a peer (Spark, PyFlink) and prints one JSON line.

    python benches/nexmark/run.py --query q5 --events 10M [--engine eddyline|spark|flink]
        [--parallelism P] [--check] [--seed S] [--flink-python PATH] [--frontend dsl|sql]

Queries: q0 to q8, q11 (see :mod:`queries`).

The events are generated once per (events, seed, rate) into a cached directory of
Parquet files (``person.parquet``, ``auction.parquet``, ``bid.parquet``) under
``--data-dir``, in a child process so that the generator's memory does not count
in this process's peak RSS. The job reads the query's tables (``bid.parquet``; q3:
``auction.parquet`` and ``person.parquet``, ``rows_in`` rows in all) and collects the
result in the driver; ``seconds`` is the time of ``env.execute`` plus reading the
collected table (``cpu_s``: the CPU time of all of this process's threads meanwhile,
eddyline only), ``events_per_s`` is events (all three kinds, as Nexmark counts them,
whichever the query reads) per second. ``--check`` then runs the query's DuckDB SQL
over the same files and compares the rows as multisets: ``check`` is ``"ok"``,
``"skipped"`` or ``"MISMATCH ..."``.

``--frontend sql`` (eddyline only) runs the query's SQL text from ``sql/`` (the queries
written in SQL so far: :data:`SQL_QUERIES`) with ``env.sql`` instead of the hand-written
DSL job; ``frontend`` in the JSON line says which ran.

``--engine spark`` (q1, q5: :mod:`peer_spark`, Spark SQL's batch engine over the same
``bid.parquet``) and ``--engine flink`` (q0, q1, q2, q5: :mod:`peer_flink`, Flink SQL in
batch mode over the same bids written once as CSV files, ``bid.csv/`` beside the
Parquet file, as the ``apache-flink`` wheel has no Parquet format) run the query in a
child process (``--flink-python``: the interpreter of a virtual environment with
``apache-flink``; it defaults to ``$NEXMARK_FLINK_PYTHON``, else this interpreter). The
child reports ``seconds`` (the query only), ``startup_s`` (starting the session and its
JVM), ``peak_rss_mb`` (its own ``VmHWM`` plus its descendants', the JVM's, see
:mod:`rss`) and, with ``--check``, the collected rows, which this process compares with
DuckDB's. Where the timed run discards the rows (``sink``: Spark's ``noop``, Flink's
``blackhole``), ``--check`` collects them in a second, untimed run: use it on small runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from generator import DEFAULT_EVENTS_PER_SECOND, parse_count  # noqa: E402
from queries import (  # noqa: E402
    BUILDERS,
    RATE_BOUND,
    TABLES,
    build,
    compare,
    duckdb_query,
    final,
)

import eddyline as ed  # noqa: E402

PEERS: dict[str, tuple[str, frozenset[str]]] = {
    "spark": ("peer_spark.py", frozenset({"q1", "q5"})),
    "flink": ("peer_flink.py", frozenset({"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11"})),
}
"""Each peer's script and the queries it runs."""

SQL_QUERIES: dict[str, str] = {
    path.stem: path.read_text() for path in sorted(Path(HERE, "sql").glob("q*.sql"))
}
"""The Nexmark queries written in SQL (``sql/qN.sql``), by name; each file says where it
differs from Nexmark's reference SQL."""


TIMED_SQL = frozenset({"q4", "q6"})
"""The queries in SQL without windows whose joins bound the event times (their views are
timed by ``date_time`` too)."""


def build_sql(name: str, env: ed.StreamEnvironment, paths: dict[str, str]) -> ed.DataStream:
    """Query ``name`` as ``env.sql`` over the tables' Parquet files, each registered as
    the view of its table name; a query over windows (or in :data:`TIMED_SQL`) gets the
    tables' event time, ``date_time``. (Kept here, not in ``sql/``: a ``sql`` package
    would shadow the tests'.)"""
    timed = "DESCRIPTOR(" in SQL_QUERIES[name].upper() or name in TIMED_SQL
    for table, path in paths.items():
        stream = env.from_parquet(path)
        if timed:
            stream = stream.assign_timestamps("date_time")
        stream.create_temporary_view(table)
    return env.sql(SQL_QUERIES[name])


CSV_PARTS = 8
"""Files of the bids' CSV copy: Flink reads one split per CSV file, so several let it read in
parallel."""


def peak_rss_mb() -> float:
    """This process's peak RSS (eddyline runs in this process, in threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_seconds() -> float:
    """User plus system CPU time of this process so far, all its threads (the job's tasks
    run in them): on a shared machine a steadier measure of a job's work than wall time."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cached_events(n: int, seed: int, events_per_second: int, data_dir: str) -> str:
    """The directory of the events' Parquet files, generated (in a child process) if missing."""
    directory = os.path.join(data_dir, f"events{n}-seed{seed}-eps{events_per_second}")
    if os.path.exists(os.path.join(directory, "bid.parquet")):
        return directory
    os.makedirs(data_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=data_dir)
    command = [
        sys.executable,
        os.path.join(HERE, "generator.py"),
        "--events",
        str(n),
        "--seed",
        str(seed),
        "--events-per-second",
        str(events_per_second),
        "--out",
        tmp,
    ]
    subprocess.run(command, check=True)
    try:
        os.replace(tmp, directory)
    except OSError:  # another run made it first
        if not os.path.exists(os.path.join(directory, "bid.parquet")):
            raise
    return directory


def cached_csv(directory: str) -> str:
    """The directory ``bid.csv`` beside ``bid.parquet``: the bids as headerless CSV files
    (``part-NNNNN.csv``, :data:`CSV_PARTS` of them), written once."""
    out = os.path.join(directory, "bid.csv")
    if os.path.isdir(out):
        return out
    parquet = pq.ParquetFile(os.path.join(directory, "bid.parquet"))
    per_part = max(1, -(-parquet.metadata.num_rows // CSV_PARTS))
    tmp = tempfile.mkdtemp(prefix=".tmp-csv-", dir=directory)
    options = pacsv.WriteOptions(include_header=False)
    part, written, writer = 0, 0, None
    try:
        for batch in parquet.iter_batches(batch_size=65_536):
            while batch.num_rows:
                if writer is None:
                    path = os.path.join(tmp, f"part-{part:05d}.csv")
                    writer = pacsv.CSVWriter(path, batch.schema, write_options=options)
                take = min(batch.num_rows, per_part - written)
                writer.write(pa.Table.from_batches([batch.slice(0, take)]))
                batch, written = batch.slice(take), written + take
                if written == per_part:
                    writer.close()
                    part, written, writer = part + 1, 0, None
    finally:
        if writer is not None:
            writer.close()
    try:
        os.replace(tmp, out)
    except OSError:  # another run made it first
        if not os.path.isdir(out):
            raise
    return out


def run_peer(
    engine: str, query: str, directory: str, parallelism: int, check: bool, python: str
) -> tuple[dict[str, Any], pa.Table | None]:
    """Runs ``query`` on a peer in a child process; returns its report and, when ``check``,
    its collected rows, else ``None``."""
    script, supported = PEERS[engine]
    if query not in supported:
        raise SystemExit(f"{engine} runs {', '.join(sorted(supported))}, not {query}")
    source = cached_csv(directory) if engine == "flink" else os.path.join(directory, "bid.parquet")
    with tempfile.TemporaryDirectory(prefix="nexmark-peer-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        command = [python, os.path.join(HERE, script), "--query", query, "--input", source]
        command += ["--parallelism", str(parallelism), "--report", report_path]
        if check:
            command += ["--result", os.path.join(tmp, "result.parquet")]
        # the peer's own output (logs) goes to stderr: stdout holds the JSON line only
        subprocess.run(command, check=True, stdout=sys.stderr)
        with open(report_path) as f:
            report = json.load(f)
        result = pq.read_table(os.path.join(tmp, "result.parquet")) if check else None
    return report, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--query", choices=sorted(BUILDERS), required=True)
    ap.add_argument("--engine", choices=["eddyline", *PEERS], default="eddyline")
    ap.add_argument(
        "--flink-python",
        default=os.environ.get("NEXMARK_FLINK_PYTHON", sys.executable),
        help="the Python with apache-flink that runs the flink peer",
    )
    ap.add_argument("--events", default="10M", help="10M, 1M, 100k or an integer")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--events-per-second", type=int, default=DEFAULT_EVENTS_PER_SECOND)
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--check", action="store_true", help="compare with DuckDB's result")
    ap.add_argument(
        "--frontend",
        choices=["dsl", "sql"],
        default="dsl",
        help="eddyline: the hand-written DSL job, or the query's SQL (sql/qN.sql) via env.sql",
    )
    ap.add_argument(
        "--sink",
        choices=["collect", "discard"],
        default="collect",
        help="eddyline: collect the rows into the driver, or drop them (ed.DiscardSink, as "
        "the peers' blackhole/noop sinks); discard cannot --check",
    )
    ap.add_argument(
        "--data-dir",
        default=os.path.join(tempfile.gettempdir(), "eddyline-nexmark"),
        help="where the generated Parquet files are cached",
    )
    args = ap.parse_args()
    if args.frontend == "sql" and (args.engine != "eddyline" or args.query not in SQL_QUERIES):
        raise SystemExit(
            f"--frontend sql runs eddyline on the queries in sql/: {sorted(SQL_QUERIES)}"
        )
    if (
        args.frontend == "sql"
        and args.query in RATE_BOUND
        and args.events_per_second != DEFAULT_EVENTS_PER_SECOND
    ):
        raise SystemExit(
            f"sql/{args.query}.sql bounds an auction's time for the generator's default "
            f"{DEFAULT_EVENTS_PER_SECOND} events per second; run it at that rate"
        )
    n = parse_count(args.events)
    directory = cached_events(n, args.seed, args.events_per_second, args.data_dir)
    paths = {table: os.path.join(directory, f"{table}.parquet") for table in TABLES[args.query]}
    rows_in = sum(pq.ParquetFile(path).metadata.num_rows for path in paths.values())

    if args.engine == "eddyline":
        t0 = time.perf_counter()
        env = ed.StreamEnvironment(parallelism=args.parallelism, batch_size=args.batch_size)
        if args.sink == "discard" and args.check:
            raise SystemExit("--sink discard keeps no rows to --check")
        if args.frontend == "sql":
            stream = build_sql(args.query, env, paths)
        else:
            stream = build(args.query, env, paths, args.events_per_second)
        if args.sink == "discard":
            stream.sink_to(ed.DiscardSink()).name("discard")
        else:
            handle = stream.collect()
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        cpu0 = cpu_seconds()
        job = env.execute(f"nexmark-{args.query}")
        if args.sink == "discard":
            result = None
            rows_out = int(job.metrics["operators"]["discard"]["records_in"])
        else:
            result = final(args.query, handle.to_arrow())
            rows_out = result.num_rows
        seconds = time.perf_counter() - t1
        cpu = cpu_seconds() - cpu0
        rss = peak_rss_mb()  # before the check allocates its own tables
        extra = {
            "sink": args.sink,
            "input": "parquet",
            "frontend": args.frontend,
            "cpu_s": round(cpu, 4),
        }
    else:
        python = args.flink_python if args.engine == "flink" else sys.executable
        report, result = run_peer(
            args.engine, args.query, directory, args.parallelism, args.check, python
        )
        seconds, startup = report["seconds"], report["startup_s"]
        # the peer's peak RSS: the sum of VmHWM over the child process and its
        # descendants (its JVM), read by the child right after the timed query (rss.py)
        rss = report["peak_rss_mb"]
        rows_out = report["rows_out"]
        extra = {
            "sink": report["sink"],
            "input": "csv" if args.engine == "flink" else "parquet",
            "mode": report["mode"],
        }
    check = compare(result, duckdb_query(args.query, paths)) if args.check else "skipped"
    print(
        json.dumps(
            {
                "engine": args.engine,
                "workload": f"nexmark-{args.query}",
                "n": n,
                "seed": args.seed,
                "parallelism": args.parallelism,
                "seconds": round(seconds, 4),
                "events_per_s": round(n / max(seconds, 1e-9)),
                "rows_in": rows_in,
                "rows_out": rows_out,
                "startup_s": round(startup, 4),
                "peak_rss_mb": round(rss, 1),
                "check": check,
                **extra,
            }
        )
    )


if __name__ == "__main__":
    main()
