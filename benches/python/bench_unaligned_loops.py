"""Checkpoint duration of a loop job under backpressure: aligned vs unaligned vs
``aligned_timeout``.

Every record comes back twice through the loop's feedback until depth ``depth``,
through a body that takes a fixed time per batch: the feedback backlog grows in
front of the body. An aligned checkpoint's barrier goes around the cycle in-band,
behind everything the body and the feedback queue hold (FLIP-16 log); an unaligned
one overtakes the body's channels and the feedback queue (its spilled part
referred to, not copied), and the feedback in flight is stored as the feedback
channel's state. Reports, per mode, the checkpoints that completed while the job
ran (count, median and max duration from trigger to completion) and the job's
wall time; ``feedback_memory`` is small so the feedback spills.

Run with a release build: ``maturin develop --release -E test`` then
``python benches/python/bench_unaligned_loops.py [--seeds 48] [--depth 6]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import eddyline as ed

# the fault helpers the tests use (tests/support, not shipped with eddyline)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from support.faults import SleepPerBatch


def run(
    unaligned: bool, timeout: str | None, seeds: int, depth: int, per_batch: float, tmp: Path
) -> dict[str, float]:
    tag = f"{unaligned}-{timeout}"
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(
            tmp / f"chk-{tag}", interval="100ms", unaligned=unaligned, aligned_timeout=timeout
        ),
        batch_size=4,
    )

    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        slow = s.map_batches(SleepPerBatch(per_batch))
        twice = slow.union(slow).with_columns(depth=ed.col("depth") + 1)
        return twice.filter(ed.col("depth") < depth), twice.filter(ed.col("depth") >= depth)

    src = env.from_sequence(0, seeds).with_columns(depth=ed.lit(0))
    looped = src.iterate(body, feedback_memory="64KiB", spill_dir=tmp / f"spill-{tag}")
    out = looped.collect()
    started = time.perf_counter()
    result = env.execute(f"loop-backpressure-{tag}")
    wall = time.perf_counter() - started
    rows = len(out.to_pylist())
    assert rows == seeds * 2**depth, (rows, seeds * 2**depth)
    # Checkpoints of the running job (the last, after the input ended, left out).
    ms = [c.duration_ms for c in result.checkpoints if c.kind == "checkpoint"][:-1]
    return {
        "count": len(ms),
        "median_ms": statistics.median(ms) if ms else float("nan"),
        "max_ms": max(ms) if ms else float("nan"),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=48)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--per-batch", type=float, default=0.005)
    args = parser.parse_args()
    print("| checkpoints | count | median ms | max ms | job s |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as d:
        modes = [
            ("aligned", False, None),
            ("unaligned", True, None),
            # Starts aligned; the loop head switches a checkpoint whose
            # barrier has not come back around the cycle within the timeout.
            ("aligned_timeout=10ms", True, "10ms"),
            ("aligned_timeout=1h", True, "1h"),
        ]
        for name, unaligned, timeout in modes:
            r = run(unaligned, timeout, args.seeds, args.depth, args.per_batch, Path(d))
            print(
                f"| {name} | {r['count']:.0f} | {r['median_ms']:.0f} | {r['max_ms']:.0f} "
                f"| {r['wall_s']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
