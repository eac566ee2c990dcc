"""W8 (BENCHMARKS.md): a W1-like chain of library functions, native against
the same chain as one per-record Python ``map``, in the same run.

W1's rows (key, value; numpy ``default_rng(42)``, batches of 65,536) with a
URL column ``https://Shop.Example.COM/Item/<id>?ref=<key>``; the chain is
``lower(url)``, ``regexp_extract`` of the item id, a cast to ``bigint`` and a
``when`` bucket, into a discarding sink. The styles alternate, ``--repeat``
times each; the report is one JSON line per run and a summary line with the
medians and the ratio of medians. ``check`` is true when both styles give
equal columns on the first ``--check-rows`` rows (collected) and equal to a
plain-Python reference.

    python benches/python/bench_w8.py --n 2000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import eddyline as ed
import eddyline.functions as F

GEN_BATCH = 65_536
ITEM = r"/item/(\d+)"
OUT_SCHEMA = pa.schema([("key", pa.int64()), ("item", pa.int64()), ("bucket", pa.string())])


def make_data(n: int, k: int) -> list[pa.RecordBatch]:
    """W1's rows plus the URL column."""
    rng = np.random.default_rng(42)
    batches = []
    for start in range(0, n, GEN_BATCH):
        m = min(GEN_BATCH, n - start)
        key = pa.array(rng.integers(0, k, m, dtype=np.int64))
        value = pa.array(rng.integers(0, 1000, m, dtype=np.int64))
        item = pc.cast(pc.multiply(value, 97), pa.string())
        url = pc.binary_join_element_wise(
            "https://Shop.Example.COM/Item/", item, "?ref=", pc.cast(key, pa.string()), ""
        )
        batches.append(pa.record_batch({"key": key, "value": value, "url": url}))
    return batches


def native(s: ed.DataStream) -> ed.DataStream:
    item = F.regexp_extract(F.lower("url"), ITEM, 1).cast("bigint")
    return s.with_columns(item=item).select(
        "key",
        "item",
        F.when(F.col("item") < 10_000, "low")
        .when(F.col("item") < 50_000, "mid")
        .otherwise("high")
        .alias("bucket"),
    )


_PATTERN = re.compile(ITEM)


def per_record_row(r: dict[str, Any]) -> dict[str, Any]:
    m = _PATTERN.search(r["url"].lower())
    item = int(m.group(1)) if m else None
    if item is None:
        bucket = "high"
    elif item < 10_000:
        bucket = "low"
    elif item < 50_000:
        bucket = "mid"
    else:
        bucket = "high"
    return {"key": r["key"], "item": item, "bucket": bucket}


def per_record(s: ed.DataStream) -> ed.DataStream:
    return s.map(per_record_row, schema=OUT_SCHEMA)


def run(data: list[pa.RecordBatch], style: str, parallelism: int) -> float:
    env = ed.StreamEnvironment(parallelism=parallelism)
    s = env.from_arrow(data)
    (native(s) if style == "native" else per_record(s)).sink_to(ed.DiscardSink())
    start = time.perf_counter()
    env.execute()
    return time.perf_counter() - start


def check(data: list[pa.RecordBatch], rows: int) -> bool:
    sample = pa.Table.from_batches(data).slice(0, rows)
    outs = []
    for chain in (native, per_record):
        env = ed.StreamEnvironment()
        out = chain(env.from_arrow(sample)).collect()
        env.execute()
        outs.append(sorted(out.to_pylist(), key=lambda r: (r["key"], r["item"])))
    reference = sorted(
        (per_record_row(r) for r in sample.to_pylist()), key=lambda r: (r["key"], r["item"])
    )
    return outs[0] == outs[1] == reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--k", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--check-rows", type=int, default=100_000)
    args = parser.parse_args()

    data = make_data(args.n, args.k)
    ok = check(data, args.check_rows)
    times: dict[str, list[float]] = {"native": [], "per_record": []}
    for _ in range(args.repeat):
        for style in times:
            seconds = run(data, style, args.parallelism)
            times[style].append(seconds)
            line = {
                "engine": "eddyline",
                "workload": "W8",
                "n": args.n,
                "style": style,
                "parallelism": args.parallelism,
                "seconds": round(seconds, 3),
                "rows_per_s": round(args.n / seconds),
                "check": ok,
            }
            print(json.dumps(line), flush=True)
    medians = {style: statistics.median(ts) for style, ts in times.items()}
    summary = {
        "workload": "W8",
        "n": args.n,
        "median_s": {s: round(m, 3) for s, m in medians.items()},
        "median_rows_per_s": {s: round(args.n / m) for s, m in medians.items()},
        "native_over_per_record": round(medians["per_record"] / medians["native"], 1),
        "check": ok,
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
