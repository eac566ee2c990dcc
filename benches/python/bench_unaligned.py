"""W7-style latency and checkpoint duration: aligned vs unaligned checkpoints.

A source throttled to a fixed rate stamps each row with its emit time; an
exchange (parallelism 1 -> 2) feeds a sink stage that takes a fixed time per row.
With a *slow* sink (capacity below the input rate) every channel is full
(backpressure); without, the sink keeps up. For aligned, unaligned and
``aligned_timeout="100ms"`` checkpoints (1 s interval) it reports the
checkpoint durations and the end-to-end latency (emit to sink) p50/p99/max.

Run with a release build: ``maturin develop --release -E test`` then
``python benches/python/bench_unaligned.py [--seconds 20] [--rate 20000]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import eddyline as ed


class Throttle:
    """Emits at most ``rate`` rows/s (sleeps) and stamps each row with ``t_ns``."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start: float | None = None
        self.sent = 0

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        due = self.start + self.sent / self.rate
        if due > now:
            time.sleep(due - now)
        self.sent += batch.num_rows
        stamp = pa.array([time.time_ns()] * batch.num_rows, pa.int64())
        return batch.append_column("t_ns", stamp)


class Sink:
    """Takes ``per_row`` seconds per row, then computes each row's latency in ms."""

    def __init__(self, per_row: float) -> None:
        self.per_row = per_row

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(self.per_row * batch.num_rows)
        now = pa.scalar(time.time_ns(), pa.int64())
        latency = pc.divide(pc.subtract(now, batch.column("t_ns")), 1_000_000)
        return pa.record_batch({"latency_ms": latency})


def run(seconds: float, rate: float, sink_capacity: float, mode: str) -> dict[str, Any]:
    unaligned = mode != "aligned"
    timeout = "100ms" if mode == "aligned_timeout" else None
    chk = Path(tempfile.mkdtemp(prefix="bench-unaligned-"))
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(
            chk, interval="1s", unaligned=unaligned, aligned_timeout=timeout
        ),
        batch_size=200,
    )
    rows = int(seconds * rate)
    stamped = env.from_sequence(0, rows).set_parallelism(1).map_batches(Throttle(rate))
    stamped = stamped.set_parallelism(1)
    # A rebalance exchange (parallelism 1 -> 2) into the two sink subtasks.
    sink = stamped.map_batches(Sink(2 / sink_capacity)).set_parallelism(2)
    out = sink.collect()
    started = time.perf_counter()
    result = env.execute(f"w7-{mode}")
    wall = time.perf_counter() - started
    lat = sorted(out.to_arrow().column("latency_ms").to_pylist())
    durations = [c.duration_ms for c in result.checkpoints if c.kind == "checkpoint"][:-1]
    return {
        "mode": mode,
        "rows/s": rows / wall,
        "p50": lat[len(lat) // 2],
        "p99": lat[int(len(lat) * 0.99)],
        "max": lat[-1],
        "checkpoints": len(durations),
        "ckpt median ms": statistics.median(durations) if durations else float("nan"),
        "ckpt max ms": max(durations, default=float("nan")),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=20_000.0)
    args = parser.parse_args()
    for label, capacity in (("slow sink", 0.8 * args.rate), ("no backpressure", 3 * args.rate)):
        print(f"## {label}: {args.rate:.0f} rows/s offered, sink capacity {capacity:.0f} rows/s")
        print("| checkpoints | rows/s | p50 ms | p99 ms | max ms | count | median ms | max ms |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for mode in ("aligned", "unaligned", "aligned_timeout"):
            r = run(args.seconds, args.rate, capacity, mode)
            print(
                f"| {r['mode']} | {r['rows/s']:.0f} | {r['p50']:.0f} | {r['p99']:.0f} | "
                f"{r['max']:.0f} | {r['checkpoints']} | {r['ckpt median ms']:.0f} | "
                f"{r['ckpt max ms']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
