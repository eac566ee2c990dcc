"""Benchmark harness: runs the BENCHMARKS.md workloads on eddyline.

Prints one JSON line per run with engine, workload, n, style, seconds,
rows_per_s, peak_rss_mb, startup_s and check (true only when the result was
verified against the numpy reference).

    python benches/python/bench_engine.py --workload W1 --n 10000000 --style native
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

import eddyline as ed

GEN_BATCH = 65_536


class LatestPerKeySink(ed.TwoPhaseCommitSink):
    """Keeps the newest value per key (BENCHMARKS.md: "the sink keeps the newest sum per key").

    Committed values land in module-level numpy arrays: the sink's subtasks own
    disjoint keys (hash partitioning), and commits arrive in checkpoint order.

    A transaction is what the sink would publish: the newest value per key written
    since the last checkpoint, kept in two dense arrays over the key space (an upsert
    sink's buffer, as Flink's buffered upsert sinks reduce theirs). Its size is bounded
    by the number of keys, not by the rows since the last checkpoint, so a checkpoint
    stores at most K values per subtask however fast rows arrive.
    """

    latest: np.ndarray = np.zeros(0, dtype=np.int64)
    seen: np.ndarray = np.zeros(0, dtype=bool)
    _commit_lock = threading.Lock()
    """Subtasks commit on their own task threads, and numpy releases the GIL in its
    loops: a commit rewrites every element of ``latest`` and ``seen``, so two commits
    at once would lose each other's keys (read, update, write back)."""

    def __init__(self, k: int | None = None) -> None:
        # The key space, fixed on the driver (reset() runs before the sink is built)
        # and pickled with the sink into worker processes.
        self.k = len(LatestPerKeySink.latest) if k is None else k
        self._spare: list[tuple[np.ndarray, np.ndarray]] = []
        self._scratch: np.ndarray | None = None
        """Committed transactions whose arrays the next ones reuse (see begin_transaction)."""

    @classmethod
    def reset(cls, k: int) -> None:
        cls.latest = np.zeros(k, dtype=np.int64)
        cls.seen = np.zeros(k, dtype=bool)

    def begin_transaction(self) -> tuple[np.ndarray, np.ndarray]:
        # The arrays of a committed transaction are reused, as a sink reuses its
        # buffers: fresh np.zeros of the key space per checkpoint page-faulted and
        # zeroed 9 MB per subtask, and freeing them unmapped it again (~25 ms of CPU
        # per checkpoint, benches/RESULTS.md "W3: the page cache"). Only arrays nothing
        # else references: the checkpoint writer holds views of a pre-committed
        # transaction's arrays until it has written them.
        while self._spare:
            values, seen = txn = self._spare.pop()
            del txn
            # Referenced by its local name and getrefcount's argument only.
            if sys.getrefcount(values) == 2 and sys.getrefcount(seen) == 2:
                values.flags.writeable = True
                seen.flags.writeable = True
                seen.fill(False)  # values count only where seen (commit)
                return values, seen
        return np.zeros(self.k, dtype=np.int64), np.zeros(self.k, dtype=bool)

    def write(self, txn: tuple[np.ndarray, np.ndarray], batch: pa.RecordBatch) -> None:
        keys = batch.column("key").to_numpy()
        txn[0][keys] = batch.column("value").to_numpy()  # later rows of a key win
        txn[1][keys] = True

    def pre_commit(self, txn: tuple[np.ndarray, np.ndarray]) -> None:
        # Nothing writes into a pre-committed transaction: read-only arrays are
        # checkpointed by reference instead of copied under the GIL
        # (TwoPhaseCommitSink's docstring).
        for a in txn:
            a.flags.writeable = False

    def commit(self, txn: tuple[np.ndarray, np.ndarray]) -> None:
        values, seen = txn
        latest = LatestPerKeySink.latest
        if self._scratch is None:
            self._scratch = np.empty(self.k, dtype=np.int64)
        delta = self._scratch
        # latest += (values - latest) * seen: a branch-free select over the key space,
        # no temporaries (np.copyto(where=seen) over a random half of the keys took
        # ~4.5 ms per commit, this ~1 ms; a boolean-mask gather and scatter ~15 ms).
        # Values where seen is false are stale (reused arrays) and multiplied by 0.
        with LatestPerKeySink._commit_lock:
            np.subtract(values, latest, out=delta)
            np.multiply(delta, seen, out=delta)
            np.add(latest, delta, out=latest)
            np.logical_or(LatestPerKeySink.seen, seen, out=LatestPerKeySink.seen)
        out = os.environ.get(OUT_ENV)
        if out:  # a worker process: leave the state where the driver can merge it
            np.savez(_out_file(out, "w2", ".npz"), latest=self.latest, seen=self.seen)
        if values.flags.owndata and seen.flags.owndata:  # not a restored one
            self._spare.append(txn)

    def abort(self, txn: tuple[np.ndarray, np.ndarray]) -> None:
        pass


class CountSink(ed.TwoPhaseCommitSink):
    """Counts committed rows (W1: "count at the sink")."""

    count = 0

    def begin_transaction(self) -> list[int]:
        return [0]

    def write(self, txn: list[int], batch: pa.RecordBatch) -> None:
        txn[0] += batch.num_rows

    def pre_commit(self, txn: list[int]) -> None:
        pass

    def commit(self, txn: list[int]) -> None:
        CountSink.count += txn[0]
        txn[0] = 0
        out = os.environ.get(OUT_ENV)
        if out:
            with open(_out_file(out, "w1", ".count"), "w") as f:
                f.write(str(CountSink.count))


class FirstRecordSink(ed.TwoPhaseCommitSink):
    """Notes when the first batch reaches the sink (``--first-record``)."""

    first: float | None = None

    def begin_transaction(self) -> None:
        return None

    def write(self, txn: None, batch: pa.RecordBatch) -> None:
        if FirstRecordSink.first is None and batch.num_rows:
            FirstRecordSink.first = time.perf_counter()

    def pre_commit(self, txn: None) -> None:
        pass

    def commit(self, txn: None) -> None:
        pass

    def abort(self, txn: None) -> None:
        pass


def run_first_record(args: argparse.Namespace) -> None:
    """Time to first record of a small per-record W1 job (the target: < 0.2 s)."""
    data = make_data(args.n, args.k)
    env = ed.StreamEnvironment(parallelism=args.parallelism, batch_size=args.batch_size)
    FirstRecordSink.first = None
    w1(env, data, "per_record").sink_to(FirstRecordSink())
    t0 = time.perf_counter()
    env.execute("bench-first-record")
    wall = time.perf_counter() - t0
    first = FirstRecordSink.first
    print(
        json.dumps(
            {
                "engine": "eddyline",
                "workload": "W1-first-record",
                "n": args.n,
                "parallelism": args.parallelism,
                "first_record_s": round(first - t0, 4) if first is not None else None,
                "wall_s": round(wall, 4),
            }
        )
    )


OUT_ENV = "EDDYLINE_BENCH_OUT"


def _out_file(directory: str, what: str, suffix: str) -> str:
    return os.path.join(directory, f"{what}-{os.getpid()}{suffix}")


def merge_worker_results(directory: str) -> None:
    """Folds the sinks' committed state left by worker processes into the class attributes."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith(".count"):
            with open(path) as f:
                CountSink.count += int(f.read())
        elif name.endswith(".npz"):
            state = np.load(path)
            seen = state["seen"]
            LatestPerKeySink.latest[seen] = state["latest"][seen]
            LatestPerKeySink.seen |= seen

    def abort(self, txn: list[int]) -> None:
        txn[0] = 0


def make_data(n: int, k: int) -> list[pa.RecordBatch]:
    """N rows of (key in [0, k), value in [0, 1000)), numpy default_rng(42), 65,536-row batches."""
    rng = np.random.default_rng(42)
    batches = []
    for start in range(0, n, GEN_BATCH):
        m = min(GEN_BATCH, n - start)
        key = rng.integers(0, k, m, dtype=np.int64)
        value = rng.integers(0, 1000, m, dtype=np.int64)
        batches.append(pa.record_batch({"key": key, "value": value}))
    return batches


def parquet_input(n: int, k: int, directory: str, files: int = 1) -> str:
    """The workload data as Parquet, written once and reused: one file, or a
    directory of ``files`` files (the batches dealt round-robin) so that every
    source subtask has a file to read."""
    import shutil

    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    schema = pa.schema([("key", pa.int64()), ("value", pa.int64())])
    if files <= 1:
        path = os.path.join(directory, f"data-n{n}-k{k}.parquet")
        if not os.path.exists(path):
            tmp = path + ".tmp"
            with pq.ParquetWriter(tmp, schema) as w:
                for b in make_data(n, k):
                    w.write_batch(b)
            os.replace(tmp, path)
        return path
    path = os.path.join(directory, f"data-n{n}-k{k}-f{files}")
    if not os.path.exists(path):
        tmp = path + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        writers = [
            pq.ParquetWriter(os.path.join(tmp, f"part-{i}.parquet"), schema) for i in range(files)
        ]
        for i, b in enumerate(make_data(n, k)):
            writers[i % files].write_batch(b)
        for w in writers:
            w.close()
        os.replace(tmp, path)
    return path


def cpu_seconds() -> float:
    """CPU time of this process (every thread, user and system): less noisy than
    wall time on a shared machine."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def source(env: ed.StreamEnvironment, data: list[pa.RecordBatch] | str) -> ed.DataStream:
    return env.from_parquet(data) if isinstance(data, str) else env.from_arrow(data)


def w1(env: ed.StreamEnvironment, batches: list[pa.RecordBatch] | str, style: str) -> ed.DataStream:
    s = source(env, batches)
    if style == "native":
        s = s.with_columns(value=ed.col("value") * 2).filter(ed.col("value") % 3 != 0)
    elif style == "vectorized":

        def step(b: pa.RecordBatch) -> pa.RecordBatch:
            v = b.column("value").to_numpy() * 2
            keep = v % 3 != 0
            return pa.record_batch({"key": b.column("key").to_numpy()[keep], "value": v[keep]})

        s = s.map_batches(step)
    else:
        s = s.map(lambda r: {"key": r["key"], "value": r["value"] * 2}).filter(
            lambda r: r["value"] % 3 != 0
        )
    return s.select("value")


def w1_reference(batches: list[pa.RecordBatch]) -> int:
    total = 0
    for b in batches:
        v = b.column("value").to_numpy() * 2
        total += int(np.count_nonzero(v % 3 != 0))
    return total


def w2(env: ed.StreamEnvironment, batches: list[pa.RecordBatch] | str, style: str) -> ed.DataStream:
    s = source(env, batches)
    keyed = s.key_by("key")
    if style == "native":
        return keyed.sum("value")
    return keyed.reduce(lambda acc, r: {"key": acc["key"], "value": acc["value"] + r["value"]})


def w2_check(batches: list[pa.RecordBatch], k: int) -> bool:
    expected = np.zeros(k, dtype=np.int64)
    present = np.zeros(k, dtype=bool)
    for b in batches:
        keys = b.column("key").to_numpy()
        expected += np.bincount(keys, weights=b.column("value").to_numpy(), minlength=k).astype(
            np.int64
        )
        present[keys] = True
    got, seen = LatestPerKeySink.latest, LatestPerKeySink.seen
    return bool(np.array_equal(seen, present) and np.array_equal(got[present], expected[present]))


def run_w3(args: argparse.Namespace) -> None:
    """W3: W2 at K = 1,000,000 with a 1 s checkpoint interval, against the same run without."""
    import tempfile

    k = 1_000_000 if args.k == 10_000 else args.k
    batches = make_data(args.n, k)
    results: dict[str, list[float]] = {}
    cpu_used: dict[str, list[float]] = {}
    # --incremental: full and incremental checkpoints side by side.
    modes = ("off", "1s", "1s-incremental") if args.incremental else ("off", "1s")
    # --rounds: the modes alternate within each round; the overhead is the
    # median over rounds of each round's ratio (the machine's load drifts).
    for mode in [m for _ in range(args.rounds) for m in modes]:
        with tempfile.TemporaryDirectory(dir=args.checkpoint_dir) as tmp:
            checkpoint = (
                ed.CheckpointConfig(tmp, interval="1s", incremental=mode.endswith("incremental"))
                if mode != "off"
                else None
            )
            env = ed.StreamEnvironment(
                parallelism=args.parallelism, batch_size=args.batch_size, checkpoint=checkpoint
            )
            LatestPerKeySink.reset(k)
            w2(env, batches, args.style).sink_to(LatestPerKeySink())
            t1, c1 = time.perf_counter(), cpu_seconds()
            result = env.execute(f"bench-W3-{mode}")
            seconds, cpu = time.perf_counter() - t1, cpu_seconds() - c1
            rss = peak_rss_mb()
            check = w2_check(batches, k)
            cps = list(result.checkpoints)
            results.setdefault(mode, []).append(seconds)
            cpu_used.setdefault(mode, []).append(cpu)
            print(
                json.dumps(
                    {
                        "engine": "eddyline",
                        "workload": "W3" if mode != "off" else "W2@K=1M",
                        "n": args.n,
                        "k": k,
                        "style": args.style,
                        "parallelism": args.parallelism,
                        "checkpointing": mode,
                        "seconds": round(seconds, 4),
                        "cpu_s": round(cpu, 3),
                        "rows_per_s": round(args.n / seconds),
                        "peak_rss_mb": round(rss, 1),
                        "checkpoints": len(cps),
                        "checkpoint_bytes": [_get(c, "bytes") for c in cps],
                        "state_bytes": [_get(c, "state_bytes") for c in cps],
                        "checkpoint_ms": [round(_get(c, "duration_ms"), 1) for c in cps],
                        "check": bool(check),
                        "load_avg": round(os.getloadavg()[0], 2),
                    }
                )
            )
    for mode in modes[1:]:
        ratios = [on / off for on, off in zip(results[mode], results["off"], strict=True)]
        cpu_ratios = [on / off for on, off in zip(cpu_used[mode], cpu_used["off"], strict=True)]
        print(
            json.dumps(
                {
                    "workload": "W3",
                    "checkpointing": mode,
                    "overhead": round(statistics.median(ratios), 3),
                    "per_round": [round(r, 3) for r in ratios],
                    "median_s": round(statistics.median(results[mode]), 3),
                    "median_off_s": round(statistics.median(results["off"]), 3),
                    "cpu_overhead": round(statistics.median(cpu_ratios), 3),
                    "cpu_per_round": [round(r, 3) for r in cpu_ratios],
                }
            )
        )


def _mix64(x: np.ndarray) -> np.ndarray:
    """``keygroup::mix64`` (the murmur3 finalizer) over int64 keys, as uint64."""
    x = x.astype(np.uint64)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


def hot_data(n: int, k: int, hot: str) -> list[pa.RecordBatch]:
    """Every key of [0, k) once (shuffled), then N rows on 1% of the keys:
    ``spread`` draws them uniformly (they fall in every key group), ``clustered``
    takes the keys of key group 0 of 128 (0.8% of the keys)."""
    rng = np.random.default_rng(42)
    keys = np.arange(k, dtype=np.int64)
    if hot == "spread":
        hot_keys = rng.choice(keys, size=max(1, k // 100), replace=False)
    else:
        hot_keys = keys[_mix64(keys) % np.uint64(128) == 0]
    first = rng.permutation(keys)
    stream = np.concatenate([first, rng.choice(hot_keys, size=n)])
    values = rng.integers(0, 1000, len(stream), dtype=np.int64)
    return [
        pa.record_batch({"key": stream[i : i + GEN_BATCH], "value": values[i : i + GEN_BATCH]})
        for i in range(0, len(stream), GEN_BATCH)
    ]


def run_w3_hot(args: argparse.Namespace) -> None:
    """W3H: W2 where, after every key was seen once, only 1% of the keys change:
    full against incremental checkpoints (size and duration)."""
    k = 1_000_000 if args.k == 10_000 else args.k
    batches = hot_data(args.n, k, args.hot)
    for incremental in (False, True):
        with tempfile.TemporaryDirectory(dir=args.checkpoint_dir) as tmp:
            checkpoint = ed.CheckpointConfig(tmp, interval="1s", incremental=incremental)
            env = ed.StreamEnvironment(
                parallelism=args.parallelism, batch_size=args.batch_size, checkpoint=checkpoint
            )
            CountSink.count = 0
            w2(env, batches, args.style).sink_to(CountSink())
            t1 = time.perf_counter()
            result = env.execute(f"bench-W3H-{incremental}")
            seconds = time.perf_counter() - t1
            cps = list(result.checkpoints)
            print(
                json.dumps(
                    {
                        "engine": "eddyline",
                        "workload": "W3H",
                        "hot": args.hot,
                        "n": args.n,
                        "k": k,
                        "parallelism": args.parallelism,
                        "incremental": incremental,
                        "seconds": round(seconds, 4),
                        "checkpoints": len(cps),
                        "checkpoint_bytes": [_get(c, "bytes") for c in cps],
                        "state_bytes": [_get(c, "state_bytes") for c in cps],
                        "checkpoint_ms": [round(_get(c, "duration_ms"), 1) for c in cps],
                        "check": CountSink.count > 0,
                    }
                )
            )


def _get(stats: object, name: str) -> float:
    return stats[name] if isinstance(stats, dict) else getattr(stats, name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", choices=["W1", "W2", "W3", "W3H"], required=True)
    ap.add_argument(
        "--incremental",
        action="store_true",
        help="W3: also run with incremental checkpoints (CheckpointConfig(incremental=True))",
    )
    ap.add_argument(
        "--hot",
        choices=["spread", "clustered"],
        default="clustered",
        help="W3H: the changing 1%% of keys drawn uniformly, or those of one key group",
    )
    ap.add_argument(
        "--checkpoint-dir",
        default=None,
        help="W3: where checkpoints go (default: a temporary directory)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="W3: rounds of the modes, alternated; the overhead is the median of the rounds",
    )
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--k", type=int, default=10_000)
    ap.add_argument("--style", choices=["native", "vectorized", "per_record"], default="native")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=GEN_BATCH)
    ap.add_argument(
        "--input",
        choices=["memory", "parquet"],
        default="memory",
        help="generated batches held in memory, or one Parquet file (made once) read by the job",
    )
    ap.add_argument("--data-dir", default="/tmp/eddyline-bench-data")
    ap.add_argument(
        "--files",
        type=int,
        default=1,
        help="--input parquet: split the input into this many files (one per source subtask)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        help="run with ed.ProcessRunner(workers=N) (0: the in-process runner)",
    )
    ap.add_argument(
        "--first-record",
        action="store_true",
        help="W1 per_record: print the time from execute() to the first record at the sink",
    )
    args = ap.parse_args()
    if args.first_record:
        run_first_record(args)
        return
    if args.workload in ("W2", "W3", "W3H") and args.style == "vectorized":
        raise SystemExit("W2 and W3 have native and per_record styles")
    if args.workload == "W3":
        run_w3(args)
        return
    if args.workload == "W3H":
        run_w3_hot(args)
        return

    data: list[pa.RecordBatch] | str
    if args.input == "parquet":
        data = parquet_input(args.n, args.k, args.data_dir, args.files)
    else:
        data = make_data(args.n, args.k)
    t0 = time.perf_counter()
    env = ed.StreamEnvironment(parallelism=args.parallelism, batch_size=args.batch_size)
    if args.workload == "W1":
        CountSink.count = 0
        w1(env, data, args.style).sink_to(CountSink())
    else:
        LatestPerKeySink.reset(args.k)
        w2(env, data, args.style).sink_to(LatestPerKeySink())
    startup = time.perf_counter() - t0
    t1 = time.perf_counter()
    if args.workers:
        with tempfile.TemporaryDirectory() as out:
            os.environ[OUT_ENV] = out
            env.execute(f"bench-{args.workload}", runner=ed.ProcessRunner(workers=args.workers))
            seconds = time.perf_counter() - t1
            del os.environ[OUT_ENV]
            merge_worker_results(out)
    else:
        env.execute(f"bench-{args.workload}")
        seconds = time.perf_counter() - t1
    rss = peak_rss_mb()  # before the reference check allocates its own arrays
    batches = make_data(args.n, args.k) if isinstance(data, str) else data
    if args.workload == "W1":
        check = CountSink.count == w1_reference(batches)
    else:
        check = w2_check(batches, args.k)
    print(
        json.dumps(
            {
                "engine": "eddyline",
                "workload": args.workload,
                "n": args.n,
                "style": args.style,
                "parallelism": args.parallelism,
                "workers": args.workers,
                "seconds": round(seconds, 4),
                "rows_per_s": round(args.n / seconds),
                "input": args.input,
                "startup_s": round(startup, 4),
                "peak_rss_mb": round(rss, 1),
                "check": bool(check),
            }
        )
    )


if __name__ == "__main__":
    main()
