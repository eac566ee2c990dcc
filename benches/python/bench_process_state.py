"""Keyed process function with value state: W2 in process-function style.

The W2 input of ``bench_engine.py`` (N rows, int64 ``key`` uniform in [0, 10,000),
int64 ``value`` in [0, 1000), numpy ``default_rng(42)``, 65,536-row batches), written
once as two Parquet files (the batches dealt round-robin, as ``bench_engine.py
--input parquet --files 2``) and, for Flink, as two headerless CSV files with the
same rows. Every engine runs the same per-record keyed function: a value state per
key holds ``(count, sum)``, and each input row emits one row ``(key, count)``.

Engines (``--engine``):

- ``eddyline``: ``env.from_parquet(dir).key_by("key").process(CountSum())``,
  parallelism 2, the default in-process runner (whose per-record operators, this one
  included, move to Python worker processes after 100,000 rows unless
  ``EDDYLINE_PYTHON_WORKERS=0``); output collected with ``.collect()`` (every row kept
  in the driver as Arrow batches).
- ``eddyline-process2``: the same job with ``runner=ed.ProcessRunner(workers=2)``.
- ``bytewax``, ``bytewax-w2``, ``bytewax-p2``: bytewax's ``op.stateful_map`` over a
  partitioned source reading the same Parquet files (one partition per file, each
  record batch turned into ``(str(key), value)`` items: bytewax keys are strings),
  run in a child process of ``--bytewax-python``: 1 worker (``run_main``), 2 worker
  threads in one process (``cluster_main(..., worker_count_per_proc=2)``, what
  ``python -m bytewax.run -w 2`` runs), or 2 processes of 1 worker
  (``cluster_main`` with ``proc_id`` 0 and 1, what ``-i/-a`` runs). The sink counts
  the rows and keeps the last count per key (``dict.update`` per output batch).
- ``flink``: PyFlink's DataStream API in streaming mode, parallelism 2, in a child
  process of ``--flink-python``: the CSV files as a Table API filesystem table turned
  into a stream (``to_data_stream``; ``FileSource`` with ``CsvReaderFormat`` yields
  ``RowData``, which PyFlink's ``key_by`` refuses), ``key_by`` the key, a Python
  ``KeyedProcessFunction`` with a ``ValueState`` of ``(count, sum)``, a Java
  ``DiscardingSink``. The apache-flink wheel has no Parquet format, hence CSV.
  ``python.state.cache-size`` and the bundle size and time are raised above Flink's
  defaults (``--state-cache``, ``--bundle-size``, ``--bundle-time-ms``): with the
  defaults nearly every state access is a round trip to the JVM. The check runs the
  same job again, untimed, with a ``FileSink`` of CSV files instead (checkpointing
  on, so the final checkpoint commits them), which the driver reads back.

``seconds`` is the job only: ``env.execute`` for eddyline, ``run_main`` /
``cluster_main`` for bytewax (the slowest process for ``bytewax-p2``), the
``execute`` call of the timed job for Flink (its JVM start is ``startup_s``).
``check`` is true when the output had N rows and the last count of every key equals
``np.bincount`` of the input keys. ``peak_rss_mb``: eddyline in-process, the
driver's ``ru_maxrss`` (including the collected output); ``eddyline-process2``, the
driver's plus twice the largest worker's (``RUSAGE_CHILDREN``, an upper bound); the
peers, the sum of the ``VmHWM`` of the child process(es) and their descendants (the
JVM and Python workers for Flink) at the end of the timed run. Several ``--runs`` in
one process report the peak so far.

    python benches/python/bench_process_state.py --engine eddyline --n 10000000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

GEN_BATCH = 65_536
K = 10_000
FILES = 2
ENGINES = ("eddyline", "eddyline-process2", "bytewax", "bytewax-w2", "bytewax-p2", "flink")
SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.int64())])


# ---- input and check ------------------------------------------------------------------


def parquet_input(n: int, k: int, data_dir: str) -> str:
    """The input: W2's rows as ``bench_engine`` writes them (``FILES`` Parquet files,
    written once and shared with that harness)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_engine import parquet_input as engine_input

    return engine_input(n, k, data_dir, files=FILES)


def csv_input(parquet_dir: str) -> str:
    """The Parquet files as headerless CSV files (``key,value``), written once beside them."""
    import pyarrow.csv as pacsv

    path = parquet_dir + ".csv"
    if os.path.exists(path):
        return path
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in sorted(os.listdir(parquet_dir)):
        table = pq.read_table(os.path.join(parquet_dir, name))
        target = os.path.join(tmp, name.replace(".parquet", ".csv"))
        pacsv.write_csv(table, target, pacsv.WriteOptions(include_header=False))
    os.replace(tmp, path)
    return path


def expected_counts(parquet_dir: str, k: int) -> np.ndarray:
    """Rows per key of the input, by numpy."""
    keys = pq.read_table(parquet_dir, columns=["key"]).column("key").to_numpy()
    return np.bincount(keys, minlength=k).astype(np.int64)


def check_last(rows: int, keys: np.ndarray, counts: np.ndarray, n: int, k: int) -> bool:
    """Whether ``rows == n`` and ``counts[i]`` is the row count of key ``keys[i]`` for every
    key of the input (``keys`` unique, from the engine's output), against numpy."""
    expected = expected_counts_cache[(n, k)]
    got = np.zeros(k, dtype=np.int64)
    got[keys] = counts
    return bool(rows == n and len(np.unique(keys)) == len(keys) and np.array_equal(got, expected))


expected_counts_cache: dict[tuple[int, int], np.ndarray] = {}


def last_per_key(keys: np.ndarray, counts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The largest emitted count per key (the last, counts only grow): unique keys, counts."""
    best = np.zeros(k, dtype=np.int64)
    np.maximum.at(best, keys, counts)
    present = np.flatnonzero(np.bincount(keys, minlength=k))
    return present, best[present]


def self_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def tree_peak_rss_mb() -> float:
    """The sum of the ``VmHWM`` of this process and its living descendants (MiB)."""
    here = os.path.dirname(os.path.abspath(__file__))
    nexmark = os.path.join(os.path.dirname(here), "nexmark")
    if nexmark not in sys.path:
        sys.path.insert(0, nexmark)
    from rss import tree_peak_rss_mb as tree

    return float(tree())


# ---- eddyline --------------------------------------------------------------------------


def run_eddyline(data: str, n: int, k: int, workers: int, parallelism: int) -> dict[str, Any]:
    import eddyline as ed

    class CountSum(ed.ProcessFunction):
        """A per-key running count and sum in one value state; emits (key, count).

        The state handle is taken once in ``open`` (as Flink functions do); it reads
        and writes the current key's value."""

        def open(self, ctx: ed.ProcessContext) -> None:
            self.state = ctx.get_state("count_sum")

        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> list[Any]:
            state = self.state
            held = state.value()
            if held is None:
                count, total = 1, row["value"]
            else:
                count, total = held[0] + 1, held[1] + row["value"]
            state.update((count, total))
            return [{"key": ctx.key, "count": count}]

    out_schema = pa.schema([("key", pa.int64()), ("count", pa.int64())])
    env = ed.StreamEnvironment(parallelism=parallelism)
    handle = env.from_parquet(data).key_by("key").process(CountSum(), schema=out_schema).collect()
    runner = ed.ProcessRunner(workers=workers) if workers else None
    t0 = time.perf_counter()
    env.execute("bench-W2-process", runner=runner)
    seconds = time.perf_counter() - t0
    rss = self_peak_rss_mb()
    if workers:
        rss += workers * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    table = handle.to_arrow()
    keys, counts = last_per_key(table.column("key").to_numpy(), table.column("count").to_numpy(), k)
    return {
        "seconds": seconds,
        "peak_rss_mb": rss,
        "check": check_last(table.num_rows, keys, counts, n, k),
        "sink": "collect",
    }


# ---- bytewax (runs in the bytewax venv) -----------------------------------------------


def bytewax_flow(data: str, result: str) -> Any:
    """The bytewax dataflow: Parquet partitions -> stateful_map -> a counting sink that
    leaves (rows, last count per key) in ``result``-<worker>.npz when it closes."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class ParquetPartition(StatefulSourcePartition[tuple[str, int], None]):
        def __init__(self, path: str) -> None:
            self._batches = pq.ParquetFile(path).iter_batches(batch_size=GEN_BATCH)

        def next_batch(self) -> list[tuple[str, int]]:
            b = next(self._batches)  # StopIteration ends the partition
            keys = map(str, b.column("key").to_numpy().tolist())
            return list(zip(keys, b.column("value").to_numpy().tolist(), strict=True))

        def snapshot(self) -> None:
            return None

    class ParquetSource(FixedPartitionedSource[tuple[str, int], None]):
        def list_parts(self) -> list[str]:
            return sorted(os.listdir(data))

        def build_part(self, step_id: str, for_part: str, resume_state: None) -> ParquetPartition:
            return ParquetPartition(os.path.join(data, for_part))

    class LastCount(StatelessSinkPartition[tuple[str, int]]):
        def __init__(self, worker: int) -> None:
            self.worker = worker
            self.rows = 0
            self.last: dict[str, int] = {}

        def write_batch(self, items: list[tuple[str, int]]) -> None:
            self.rows += len(items)
            self.last.update(items)

        def close(self) -> None:
            keys = np.array([int(key) for key in self.last], dtype=np.int64)
            counts = np.array(list(self.last.values()), dtype=np.int64)
            np.savez(
                f"{result}-{os.getpid()}-{self.worker}.npz",
                rows=self.rows,
                keys=keys,
                counts=counts,
            )

    class LastCountSink(DynamicSink[tuple[str, int]]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> LastCount:
            return LastCount(worker_index)

    def count_sum(state: tuple[int, int] | None, value: int) -> tuple[tuple[int, int], int]:
        if state is None:
            return (1, value), 1
        count = state[0] + 1
        return (count, state[1] + value), count

    flow = Dataflow("w2_process")
    rows = op.input("parquet", flow, ParquetSource())
    counts = op.stateful_map("count_sum", rows, count_sum)
    op.output("last_count", counts, LastCountSink())
    return flow


def child_bytewax(args: argparse.Namespace) -> None:
    flow = bytewax_flow(args.input, args.result)
    if args.addresses:
        from bytewax.testing import cluster_main

        t0 = time.perf_counter()
        cluster_main(
            flow,
            args.addresses.split(";"),
            args.proc_id,
            worker_count_per_proc=args.threads,
        )
    else:
        from bytewax.testing import run_main

        t0 = time.perf_counter()
        run_main(flow)
    seconds = time.perf_counter() - t0
    with open(args.report, "w") as f:
        json.dump({"seconds": seconds, "peak_rss_mb": tree_peak_rss_mb()}, f)


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_bytewax(
    python: str, data: str, n: int, k: int, threads: int, processes: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "out")
        base = [python, os.path.abspath(__file__), "--child", "bytewax", "--input", data]
        base += ["--result", result]
        if threads == 1 and processes == 1:
            cmds = [[*base, "--report", os.path.join(tmp, "r0.json")]]
        else:
            addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(processes))
            cmds = [
                [
                    *base,
                    *("--report", os.path.join(tmp, f"r{i}.json"), "--addresses", addresses),
                    *("--proc-id", str(i), "--threads", str(threads)),
                ]
                for i in range(processes)
            ]
        procs = [subprocess.Popen(c) for c in cmds]
        codes = [p.wait() for p in procs]
        if any(codes):
            raise SystemExit(f"bytewax child exited with {codes}")
        reports = []
        for i in range(len(cmds)):
            with open(os.path.join(tmp, f"r{i}.json")) as f:
                reports.append(json.load(f))
        rows = 0
        keys, counts = [], []
        for name in os.listdir(tmp):
            if name.endswith(".npz"):
                part = np.load(os.path.join(tmp, name))
                rows += int(part["rows"])
                keys.append(part["keys"])
                counts.append(part["counts"])
        check = check_last(rows, np.concatenate(keys), np.concatenate(counts), n, k)
    return {
        "seconds": max(r["seconds"] for r in reports),
        "peak_rss_mb": sum(r["peak_rss_mb"] for r in reports),
        "check": check,
        "sink": "count rows + last count per key (dict.update per batch)",
    }


# ---- PyFlink (runs in the flink venv) -------------------------------------------------


INPUT_DDL = """
    CREATE TABLE w2 (key BIGINT, `value` BIGINT)
    WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')
"""
"""The CSV files as a table, read by Flink's filesystem connector (parsed in the JVM)."""


def child_flink(args: argparse.Namespace) -> None:
    from pyflink.common import Configuration, Row, Types
    from pyflink.datastream import (
        CheckpointingMode,
        KeyedProcessFunction,
        RuntimeContext,
        StreamExecutionEnvironment,
    )
    from pyflink.datastream.connectors.base import Sink
    from pyflink.datastream.connectors.file_system import FileSink
    from pyflink.datastream.formats.csv import CsvBulkWriters, CsvSchema
    from pyflink.datastream.state import ValueStateDescriptor
    from pyflink.java_gateway import get_gateway
    from pyflink.table import StreamTableEnvironment

    class CountSum(KeyedProcessFunction):
        """A per-key running count and sum in one ValueState; emits (key, count)."""

        def open(self, runtime_context: RuntimeContext) -> None:
            descriptor = ValueStateDescriptor(
                "count_sum", Types.TUPLE([Types.LONG(), Types.LONG()])
            )
            self.state = runtime_context.get_state(descriptor)

        def process_element(self, value: Row, ctx: KeyedProcessFunction.Context) -> Iterator[Row]:
            held = self.state.value()
            if held is None:
                count, total = 1, value[1]
            else:
                count, total = held[0] + 1, held[1] + value[1]
            self.state.update((count, total))
            yield Row(value[0], count)

    t0 = time.perf_counter()
    out_schema = CsvSchema.builder().add_number_column("key").add_number_column("count").build()
    out_type = Types.ROW_NAMED(["key", "count"], [Types.LONG(), Types.LONG()])

    def job(check_dir: str | None) -> StreamExecutionEnvironment:
        config = Configuration()
        # The Python worker's cache of keyed state: at the default (1000 entries) nearly
        # every state access of 10,000 keys is a round trip to the JVM.
        config.set_string("python.state.cache-size", str(args.state_cache))
        config.set_string("python.execution-mode", args.flink_mode)
        # Larger bundles than the defaults (100,000 elements, 1 s): the cached state is
        # written back and dropped at the end of every bundle.
        config.set_string("python.fn-execution.bundle.size", str(args.bundle_size))
        config.set_string("python.fn-execution.bundle.time", str(args.bundle_time_ms))
        env = StreamExecutionEnvironment.get_execution_environment(config)
        env.set_parallelism(args.parallelism)
        env.set_python_executable(sys.executable)
        if check_dir:
            env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
        t_env = StreamTableEnvironment.create(env)
        t_env.execute_sql(INPUT_DDL.format(path=os.path.abspath(args.input).replace("'", "''")))
        rows = t_env.to_data_stream(t_env.from_path("w2"))
        out = rows.key_by(lambda r: r[0], key_type=Types.LONG()).process(
            CountSum(), output_type=out_type
        )
        if check_dir:
            out.sink_to(
                FileSink.for_bulk_format(check_dir, CsvBulkWriters.for_schema(out_schema)).build()
            )
        else:
            jvm = get_gateway().jvm
            out.sink_to(Sink(jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink()))
        return env

    env = job(None)
    startup = time.perf_counter() - t0
    t1 = time.perf_counter()
    env.execute("w2-process")
    seconds = time.perf_counter() - t1
    rss = tree_peak_rss_mb()
    if args.result:
        job(args.result).execute("w2-process-check")
    with open(args.report, "w") as f:
        json.dump({"seconds": seconds, "startup_s": startup, "peak_rss_mb": rss}, f)


def run_flink(
    python: str,
    data: str,
    n: int,
    k: int,
    parallelism: int,
    check: bool,
    state_cache: int,
    mode: str,
    bundle: tuple[int, int],
) -> dict[str, Any]:
    import pyarrow.csv as pacsv

    csv_dir = csv_input(data)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [python, os.path.abspath(__file__), "--child", "flink", "--input", csv_dir]
        cmd += ["--report", report, "--parallelism", str(parallelism)]
        cmd += ["--state-cache", str(state_cache), "--flink-mode", mode]
        cmd += ["--bundle-size", str(bundle[0]), "--bundle-time-ms", str(bundle[1])]
        out_dir = os.path.join(tmp, "out")
        if check:
            cmd += ["--result", out_dir]
        subprocess.run(cmd, check=True)
        with open(report) as f:
            result = json.load(f)
        ok: bool | None = None
        if check:
            parts = []
            for root, _, files in os.walk(out_dir):
                for name in files:
                    if not name.startswith("."):  # not in-progress files
                        parts.append(
                            pacsv.read_csv(
                                os.path.join(root, name),
                                read_options=pacsv.ReadOptions(column_names=["key", "count"]),
                            )
                        )
            table = pa.concat_tables(parts)
            keys, counts = last_per_key(
                table.column("key").to_numpy(), table.column("count").to_numpy(), k
            )
            ok = check_last(table.num_rows, keys, counts, n, k)
    return {
        "seconds": result["seconds"],
        "startup_s": result["startup_s"],
        "peak_rss_mb": result["peak_rss_mb"],
        "check": ok,
        "sink": "DiscardingSink (check: a second, untimed job to a CSV FileSink)",
    }


# ---- driver ----------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--engine", choices=ENGINES)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--data-dir", default="/tmp/eddyline-bench-data")
    ap.add_argument("--bytewax-python", default="/work/bytewax-venv/bin/python")
    ap.add_argument("--flink-python", default="/work/flink-venv/bin/python")
    ap.add_argument("--no-check", action="store_true", help="flink: skip the check job")
    ap.add_argument(
        "--state-cache",
        type=int,
        default=100_000,
        help="flink: python.state.cache-size (Flink's default is 1000)",
    )
    ap.add_argument(
        "--bundle-size",
        type=int,
        default=1_000_000,
        help="flink: python.fn-execution.bundle.size (Flink's default is 100,000)",
    )
    ap.add_argument(
        "--bundle-time-ms",
        type=int,
        default=60_000,
        help="flink: python.fn-execution.bundle.time in ms (Flink's default is 1000)",
    )
    ap.add_argument(
        "--flink-mode",
        choices=["process", "thread"],
        default="process",
        help="flink: python.execution-mode",
    )
    # used by the child processes
    ap.add_argument("--child", choices=["bytewax", "flink"], help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--addresses", help=argparse.SUPPRESS)
    ap.add_argument("--proc-id", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "bytewax":
        child_bytewax(args)
        return
    if args.child == "flink":
        child_flink(args)
        return
    if args.engine is None:
        ap.error("--engine is required")

    data = parquet_input(args.n, K, args.data_dir)
    expected_counts_cache[(args.n, K)] = expected_counts(data, K)
    for _ in range(args.runs):
        if args.engine == "eddyline":
            r = run_eddyline(data, args.n, K, 0, args.parallelism)
        elif args.engine == "eddyline-process2":
            r = run_eddyline(data, args.n, K, 2, args.parallelism)
        elif args.engine.startswith("bytewax"):
            threads, processes = {"bytewax": (1, 1), "bytewax-w2": (2, 1), "bytewax-p2": (1, 2)}[
                args.engine
            ]
            r = run_bytewax(args.bytewax_python, data, args.n, K, threads, processes)
        else:
            r = run_flink(
                args.flink_python,
                data,
                args.n,
                K,
                args.parallelism,
                not args.no_check,
                args.state_cache,
                args.flink_mode,
                (args.bundle_size, args.bundle_time_ms),
            )
        line = {
            "engine": args.engine,
            "workload": "W2-process",
            "n": args.n,
            "seconds": round(r["seconds"], 4),
            "rows_per_s": round(args.n / r["seconds"]),
            "peak_rss_mb": round(r["peak_rss_mb"], 1),
            "check": r["check"],
            "sink": r["sink"],
        }
        if "startup_s" in r:
            line["startup_s"] = round(r["startup_s"], 3)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
