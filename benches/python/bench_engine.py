"""Benchmark harness: runs the BENCHMARKS.md workloads on eddyline.

Prints one JSON line per run with engine, workload, n, style, seconds,
rows_per_s, peak_rss_mb, startup_s and check (true only when the result was
verified against the numpy reference).

    python benches/python/bench_engine.py --workload W1 --n 10000000 --style native
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
import pyarrow as pa

import eddyline as ed

GEN_BATCH = 65_536


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


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def w1(env: ed.StreamEnvironment, batches: list[pa.RecordBatch], style: str) -> ed.DataStream:
    s = env.from_arrow(batches)
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


def w2(env: ed.StreamEnvironment, batches: list[pa.RecordBatch], style: str) -> ed.DataStream:
    s = env.from_arrow(batches)
    keyed = s.key_by("key")
    if style == "native":
        return keyed.sum("value")
    return keyed.reduce(lambda acc, r: {"key": acc["key"], "value": acc["value"] + r["value"]})


def w2_check(result: pa.Table, batches: list[pa.RecordBatch], k: int) -> bool:
    keys = np.concatenate([b.column("key").to_numpy() for b in batches])
    values = np.concatenate([b.column("value").to_numpy() for b in batches])
    expected = np.bincount(keys, weights=values, minlength=k).astype(np.int64)
    # Newest sum per key: the sink keeps the last row per key.
    got = np.zeros(k, dtype=np.int64)
    seen = np.zeros(k, dtype=bool)
    kk = result.column("key").to_numpy()
    vv = result.column("value").to_numpy()
    got[kk] = vv  # later rows overwrite earlier ones (numpy assigns in order)
    seen[kk] = True
    present = np.bincount(keys, minlength=k) > 0
    return bool(np.array_equal(seen, present) and np.array_equal(got[present], expected[present]))


def run_w3(args: argparse.Namespace) -> None:
    """W3: W2 at K = 1,000,000 with a 1 s checkpoint interval, against the same run without."""
    import tempfile

    k = 1_000_000 if args.k == 10_000 else args.k
    batches = make_data(args.n, k)
    results = {}
    for mode in ("off", "1s"):
        with tempfile.TemporaryDirectory(dir=args.checkpoint_dir) as tmp:
            checkpoint = ed.CheckpointConfig(tmp, interval="1s") if mode == "1s" else None
            env = ed.StreamEnvironment(
                parallelism=args.parallelism, batch_size=args.batch_size, checkpoint=checkpoint
            )
            sink = w2(env, batches, args.style).collect()
            t1 = time.perf_counter()
            result = env.execute(f"bench-W3-{mode}")
            seconds = time.perf_counter() - t1
            rss = peak_rss_mb()
            check = w2_check(sink.to_arrow(), batches, k)
            cps = list(result.checkpoints)
            results[mode] = seconds
            print(
                json.dumps(
                    {
                        "engine": "eddyline",
                        "workload": "W3" if mode == "1s" else "W2@K=1M",
                        "n": args.n,
                        "k": k,
                        "style": args.style,
                        "parallelism": args.parallelism,
                        "checkpointing": mode,
                        "seconds": round(seconds, 4),
                        "rows_per_s": round(args.n / seconds),
                        "peak_rss_mb": round(rss, 1),
                        "checkpoints": len(cps),
                        "checkpoint_bytes": [_get(c, "bytes") for c in cps],
                        "checkpoint_ms": [round(_get(c, "duration_ms"), 1) for c in cps],
                        "check": bool(check),
                    }
                )
            )
    print(json.dumps({"workload": "W3", "overhead": round(results["1s"] / results["off"], 3)}))


def _get(stats: object, name: str) -> float:
    return stats[name] if isinstance(stats, dict) else getattr(stats, name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", choices=["W1", "W2", "W3"], required=True)
    ap.add_argument(
        "--checkpoint-dir",
        default=None,
        help="W3: where checkpoints go (default: a temporary directory)",
    )
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--k", type=int, default=10_000)
    ap.add_argument("--style", choices=["native", "vectorized", "per_record"], default="native")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=GEN_BATCH)
    args = ap.parse_args()
    if args.workload in ("W2", "W3") and args.style == "vectorized":
        raise SystemExit("W2 and W3 have native and per_record styles")
    if args.workload == "W3":
        run_w3(args)
        return

    batches = make_data(args.n, args.k)
    t0 = time.perf_counter()
    env = ed.StreamEnvironment(parallelism=args.parallelism, batch_size=args.batch_size)
    if args.workload == "W1":
        sink = w1(env, batches, args.style).collect()
    else:
        sink = w2(env, batches, args.style).collect()
    startup = time.perf_counter() - t0
    t1 = time.perf_counter()
    env.execute(f"bench-{args.workload}")
    seconds = time.perf_counter() - t1
    rss = peak_rss_mb()  # before the reference check allocates its own arrays
    table = sink.to_arrow()
    if args.workload == "W1":
        check = table.num_rows == w1_reference(batches)
    else:
        check = w2_check(table, batches, args.k)
    print(
        json.dumps(
            {
                "engine": "eddyline",
                "workload": args.workload,
                "n": args.n,
                "style": args.style,
                "parallelism": args.parallelism,
                "seconds": round(seconds, 4),
                "rows_per_s": round(args.n / seconds),
                "startup_s": round(startup, 4),
                "peak_rss_mb": round(rss, 1),
                "check": bool(check),
            }
        )
    )


if __name__ == "__main__":
    main()
