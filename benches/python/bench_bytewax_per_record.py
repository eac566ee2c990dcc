"""The bytewax peer of ``bench_engine.py``'s per-record W1 and W2.

Runs the same workloads, on the same generated data (``make_data``: numpy
``default_rng(42)``, 65,536-row batches), with bytewax's per-item operators in
one worker (``run_main``; bytewax's fastest configuration on this machine, see
RESULTS.md "Keyed process function state"). Needs bytewax (0.21.1 measured)
next to numpy and pyarrow; eddyline is not imported.

- W1: each input batch becomes a list of ``{"key": k, "value": v}`` dicts (the
  same dict rows eddyline's per-record functions get), then ``op.map`` with the
  same lambda as ``bench_engine.w1`` (``{"key": r["key"], "value": r["value"] * 2}``),
  ``op.filter`` (``r["value"] % 3 != 0``) and a sink counting the rows.
- W2: the same dict rows keyed by ``str(key)`` (bytewax keys are strings),
  ``op.stateful_map`` applying ``bench_engine.w2``'s reduce lambda to the row
  held per key, and a sink keeping the newest sum per key.

Prints one JSON line per run (``engine: bytewax``); ``seconds`` is ``run_main``,
``check`` compares the result with numpy as ``bench_engine.py`` does.

    python benches/python/bench_bytewax_per_record.py --workload W1 --n 10000000
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

import numpy as np
import pyarrow as pa

GEN_BATCH = 65_536


def make_data(n: int, k: int) -> list[pa.RecordBatch]:
    """The rows of ``bench_engine.make_data`` (same seed, same batches)."""
    rng = np.random.default_rng(42)
    batches = []
    for start in range(0, n, GEN_BATCH):
        m = min(GEN_BATCH, n - start)
        key = rng.integers(0, k, m, dtype=np.int64)
        value = rng.integers(0, 1000, m, dtype=np.int64)
        batches.append(pa.record_batch({"key": key, "value": value}))
    return batches


def flow(workload: str, batches: list[pa.RecordBatch], result: dict[str, Any]) -> Any:
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class Batches(StatelessSourcePartition[dict[str, int]]):
        def __init__(self) -> None:
            self._it = iter(batches)

        def next_batch(self) -> list[dict[str, int]]:
            b = next(self._it)  # StopIteration ends the input
            keys = b.column("key").to_pylist()
            values = b.column("value").to_pylist()
            return [{"key": k, "value": v} for k, v in zip(keys, values, strict=True)]

    class Source(DynamicSource[dict[str, int]]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Batches:
            return Batches()

    class Count(StatelessSinkPartition[Any]):
        def write_batch(self, items: list[Any]) -> None:
            result["rows"] += len(items)

    class Latest(StatelessSinkPartition[tuple[str, dict[str, int]]]):
        def write_batch(self, items: list[tuple[str, dict[str, int]]]) -> None:
            result["rows"] += len(items)
            result["latest"].update(items)

    class Sink(DynamicSink[Any]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Any:
            return Count() if workload == "W1" else Latest()

    df = Dataflow(f"{workload.lower()}_per_record")
    rows = op.input("in", df, Source())
    if workload == "W1":
        mapped = op.map("map", rows, lambda r: {"key": r["key"], "value": r["value"] * 2})
        kept = op.filter("filter", mapped, lambda r: r["value"] % 3 != 0)
        op.output("out", op.map("select", kept, lambda r: r["value"]), Sink())
    else:

        def reduce(acc: dict[str, int] | None, r: dict[str, int]) -> tuple[Any, Any]:
            new = r if acc is None else {"key": acc["key"], "value": acc["value"] + r["value"]}
            return new, new

        keyed = op.key_on("key", rows, lambda r: str(r["key"]))
        op.output("out", op.stateful_map("reduce", keyed, reduce), Sink())
    return df


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", choices=["W1", "W2"], required=True)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--k", type=int, default=10_000)
    args = ap.parse_args()
    from bytewax.testing import run_main

    batches = make_data(args.n, args.k)
    result: dict[str, Any] = {"rows": 0, "latest": {}}
    df = flow(args.workload, batches, result)
    t0 = time.perf_counter()
    run_main(df)
    seconds = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if args.workload == "W1":
        expected = sum(
            int(np.count_nonzero(b.column("value").to_numpy() * 2 % 3 != 0)) for b in batches
        )
        check = result["rows"] == expected
    else:
        want = np.zeros(args.k, dtype=np.int64)
        present = np.zeros(args.k, dtype=bool)
        for b in batches:
            keys = b.column("key").to_numpy()
            want += np.bincount(
                keys, weights=b.column("value").to_numpy(), minlength=args.k
            ).astype(np.int64)
            present[keys] = True
        got = {int(key): row["value"] for key, row in result["latest"].items()}
        check = (
            result["rows"] == args.n
            and len(got) == int(np.count_nonzero(present))
            and all(int(want[key]) == v for key, v in got.items())
        )
    print(
        json.dumps(
            {
                "engine": "bytewax",
                "workload": args.workload,
                "n": args.n,
                "style": "per_record",
                "workers": 1,
                "seconds": round(seconds, 4),
                "rows_per_s": round(args.n / seconds),
                "peak_rss_mb": round(rss, 1),
                "check": bool(check),
            }
        )
    )


if __name__ == "__main__":
    main()
