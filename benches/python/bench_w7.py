"""W7: W2 fed at a fixed rate, end-to-end latency with a 1 s checkpoint interval.

BENCHMARKS.md W7: W2 (keyed running sum of ``value`` per ``key``, the sink
keeps the newest sum per key) fed at a fixed rate (default 1M rows/s) for 60 s
with a 1 s checkpoint interval; p50/p99/max end-to-end latency; the sums equal
W2's for the rows sent. Aligned against unaligned checkpoints, with and without
a slow sink (backpressure), alternated in each round.

How it is fed: a sequence source (parallelism 1, batches of ``--batch`` rows)
goes through a pacing step that waits until each batch is due (``batch start
/ rate``) and turns the sequence numbers into W2 rows: ``key`` and ``value``
from a table of 2**20 rows drawn with numpy ``default_rng(42)`` (key in
[0, K), value in [0, 1000)), indexed by sequence number modulo the table size.

How latency is measured: the keyed sum keeps only the key and the sum, so the
emit time rides through it as data. Every batch also carries one *marker* row
per sink subtask (keys K, K+1, ... chosen so that each sink subtask owns one):
its value is the batch's emit time in microseconds. The sum of a marker key
then grows by exactly that stamp per batch, and the sink, which sees every
update of the key, recovers each stamp as the difference of consecutive sums
(vectorized with numpy) and takes ``now - stamp`` when the batch reaches the
sink's ``write``. Marker keys are left out of the W2 check and checked on their
own (their sums equal the sum of the stamps sent).

The slow sink waits a fixed time per batch sized to a capacity of
``--slow-capacity`` (0.8) of the offered batches per second: every channel
fills and the source is throttled by backpressure.

Run with a release build (``maturin develop --release -E test``):
``python benches/python/bench_w7.py --seconds 60 --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

import eddyline as ed

TABLE = 1 << 20
MAX_PARALLELISM = 128
_T0 = time.monotonic_ns()
OUT: dict[str, Any] = {}
"""What the sink's subtasks (each a copy of the sink object) record, at module level."""


def now_us() -> int:
    return (time.monotonic_ns() - _T0) // 1000


def _mix64(x: np.ndarray) -> np.ndarray:
    """``keygroup::mix64`` (the murmur3 finalizer) over int64 keys, as uint64."""
    x = x.astype(np.uint64)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


def marker_keys(k: int, parallelism: int) -> np.ndarray:
    """One key >= k per subtask of the keyed sum (Flink's key-group to subtask formula)."""
    found: dict[int, int] = {}
    key = k
    while len(found) < parallelism:
        group = int(_mix64(np.array([key]))[0] % np.uint64(MAX_PARALLELISM))
        found.setdefault(group * parallelism // MAX_PARALLELISM, key)
        key += 1
    return np.array(sorted(found.values()), dtype=np.int64)


def table(k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(42)
    return rng.integers(0, k, TABLE, dtype=np.int64), rng.integers(0, 1000, TABLE, dtype=np.int64)


class Pace:
    """Releases each batch when it is due and turns sequence numbers into W2 rows plus markers."""

    def __init__(self, rate: float, k: int, markers: np.ndarray) -> None:
        self.rate = rate
        self.keys, self.values = table(k)
        self.markers = markers
        self.start: float | None = None

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        seq = batch.column("value").to_numpy()
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        due = self.start + int(seq[0]) / self.rate
        if due > now:
            time.sleep(due - now)
        else:
            OUT["late_s"] = max(OUT["late_s"], now - due)
        idx = seq % TABLE
        stamp = now_us()
        OUT["stamps"].append(stamp)
        m = len(self.markers)
        key = np.concatenate([self.keys[idx], self.markers])
        value = np.concatenate([self.values[idx], np.full(m, stamp, dtype=np.int64)])
        return pa.record_batch({"key": key, "value": value})


class LatencySink(ed.TwoPhaseCommitSink):
    """W2's sink (the newest sum per key, committed with the checkpoints) that also
    recovers the markers' stamps and records each batch's latency at ``write``."""

    def __init__(self, k: int, n_markers: int, delay_s: float) -> None:
        self.k = k
        self.delay_s = delay_s
        self.last = np.zeros(n_markers, dtype=np.int64)

    def open(self, ctx: dict[str, Any]) -> None:
        self.latencies: list[np.ndarray] = []
        OUT["latencies"].append(self.latencies)

    def begin_transaction(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return []

    def write(self, txn: list[tuple[np.ndarray, np.ndarray]], batch: pa.RecordBatch) -> None:
        arrived = now_us()
        keys = batch.column("key").to_numpy()
        values = batch.column("value").to_numpy()
        marks = keys >= self.k
        if marks.any():
            idx = keys[marks] - self.k
            sums = values[marks]
            stamps = sums - self.last[idx]
            self.last[idx] = sums
            self.latencies.append((arrived - stamps) / 1000.0)
        if self.delay_s:
            time.sleep(self.delay_s)
        txn.append((keys, values))

    def pre_commit(self, txn: list[tuple[np.ndarray, np.ndarray]]) -> None:
        pass

    def commit(self, txn: list[tuple[np.ndarray, np.ndarray]]) -> None:
        latest, seen = OUT["latest"], OUT["seen"]
        for keys, values in txn:
            latest[keys] = values
            seen[keys] = True
        txn.clear()

    def abort(self, txn: list[tuple[np.ndarray, np.ndarray]]) -> None:
        txn.clear()


def check(k: int, rows: int, markers: np.ndarray, stamps: list[int], out: dict[str, Any]) -> bool:
    keys, values = table(k)
    full, rest = divmod(rows, TABLE)
    expected = np.bincount(keys, weights=values, minlength=k).astype(np.int64) * full
    expected += np.bincount(keys[:rest], weights=values[:rest], minlength=k).astype(np.int64)
    present = np.bincount(keys[: min(rows, TABLE)], minlength=k) > 0
    latest, seen = out["latest"], out["seen"]
    w2 = np.array_equal(seen[:k], present) and np.array_equal(
        latest[:k][present], expected[present]
    )
    marks = np.array_equal(latest[markers], np.full(len(markers), sum(stamps), dtype=np.int64))
    return bool(w2 and marks)


def run(args: argparse.Namespace, unaligned: bool, slow: bool) -> dict[str, Any]:
    rows = int(args.rate * args.seconds)
    markers = marker_keys(args.k, args.parallelism)
    batches_per_s = args.rate / args.batch
    delay = 1.0 / (args.slow_capacity * batches_per_s) if slow else 0.0
    size = int(markers[-1]) + 1
    OUT.clear()
    OUT.update(
        latest=np.zeros(size, np.int64),
        seen=np.zeros(size, bool),
        latencies=[],
        stamps=[],
        late_s=0.0,
    )
    with tempfile.TemporaryDirectory(dir=args.checkpoint_dir) as chk:
        env = ed.StreamEnvironment(
            args.parallelism,
            checkpoint=ed.CheckpointConfig(chk, interval="1s", unaligned=unaligned),
            batch_size=args.batch,
        )
        pace = Pace(args.rate, args.k, markers)
        fed = env.from_sequence(0, rows).set_parallelism(1).map_batches(pace).set_parallelism(1)
        sums = fed.key_by("key").sum("value")
        sums.sink_to(LatencySink(args.k, size - args.k, delay))
        started = time.perf_counter()
        result = env.execute(f"W7-{'unaligned' if unaligned else 'aligned'}-{slow}")
        wall = time.perf_counter() - started
    lat = np.concatenate([a for per in OUT["latencies"] for a in per])
    durations = [c.duration_ms for c in result.checkpoints]
    return {
        "engine": "eddyline",
        "workload": "W7",
        "checkpoints": "unaligned" if unaligned else "aligned",
        "sink": f"slow ({args.slow_capacity:.0%} of the rate)" if slow else "fast",
        "rate": args.rate,
        "rows": rows,
        "seconds": round(wall, 3),
        "rows_per_s": round(rows / wall),
        "behind_schedule_max_s": round(OUT["late_s"], 3),
        "p50_ms": round(float(np.percentile(lat, 50)), 2),
        "p99_ms": round(float(np.percentile(lat, 99)), 2),
        "max_ms": round(float(lat.max()), 2),
        "samples": int(lat.size),
        "bad_samples": int(np.count_nonzero(lat < 0)),
        "checkpoint_count": len(durations),
        "checkpoint_ms_median": round(statistics.median(durations), 1) if durations else None,
        "checkpoint_ms_max": round(max(durations), 1) if durations else None,
        "check": check(args.k, rows, markers, OUT["stamps"], OUT) and not np.any(lat < 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=1_000_000.0, help="rows per second offered")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--batch", type=int, default=10_000, help="rows per source batch")
    ap.add_argument("--k", type=int, default=10_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--slow-capacity", type=float, default=0.8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--modes",
        default="aligned,unaligned,aligned+slow,unaligned+slow",
        help="comma-separated among aligned, unaligned, aligned+slow, unaligned+slow",
    )
    ap.add_argument("--checkpoint-dir", default=None)
    args = ap.parse_args()
    modes = args.modes.split(",")
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes:
            res = run(args, unaligned=mode.startswith("unaligned"), slow=mode.endswith("+slow"))
            res["round"] = r + 1
            res["load_avg"] = round(os.getloadavg()[0], 2)
            results[mode].append(res)
            print(json.dumps(res), flush=True)
    for mode, runs in results.items():
        summary = {
            key: statistics.median(x[key] for x in runs)
            for key in ("rows_per_s", "p50_ms", "p99_ms", "max_ms", "checkpoint_ms_median")
            if all(x[key] is not None for x in runs)
        }
        summary |= {
            "mode": mode,
            "median_of": len(runs),
            "all_checked": all(x["check"] for x in runs),
        }
        print(json.dumps({"workload": "W7-median", **summary}), flush=True)


if __name__ == "__main__":
    # Run from the module, not from __main__: the sink and the pacing step are
    # copied per subtask, and a class of __main__ is copied by value together
    # with the module-level OUT they record into.
    import bench_w7

    bench_w7.main()
