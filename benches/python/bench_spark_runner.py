"""SparkRunner start-up overhead: time to first record and wall time of a
small job, in-process vs ProcessRunner(workers=2) vs SparkRunner(workers=2) on local[2].

Prints one JSON line per run (runner, run, first_record_s, wall_s, check), then the
medians. The JVM start (once per session) is reported separately as jvm_start_s.

    python benches/python/bench_spark_runner.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa

import eddyline as ed


class StampFirst:
    """A ``map_batches`` function that records when the job's first record arrived."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not os.path.exists(self.path):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return batch
            with os.fdopen(fd, "w") as fh:
                fh.write(repr(time.time()))
        return batch


def run(runner: Any, n: int, tmp: str) -> dict[str, Any]:
    stamp = os.path.join(tmp, f"first-{time.time_ns()}")
    env = ed.StreamEnvironment(2, batch_size=10_000)
    numbers = env.from_sequence(0, n)
    stamped = numbers.map_batches(StampFirst(stamp))
    out = stamped.collect()
    started = time.time()
    env.execute("startup", runner=runner)
    wall = time.time() - started
    with open(stamp) as fh:
        first = float(fh.read()) - started
    check = sorted(r["value"] for r in out.to_pylist()) == list(range(n))
    return {"first_record_s": round(first, 3), "wall_s": round(wall, 3), "check": check}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n", type=int, default=100_000)
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from eddyline.spark import SparkRunner

    t0 = time.time()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("eddyline-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"jvm_start_s": round(time.time() - t0, 2)}))

    runners = {
        "in-process": lambda: None,
        "ProcessRunner(2)": lambda: ed.ProcessRunner(workers=2),
        "SparkRunner(2)": lambda: SparkRunner(spark, workers=2),
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in runners}
    with tempfile.TemporaryDirectory() as tmp:
        # One warm-up each (imports, Spark's first job, Python worker daemon).
        for make in runners.values():
            run(make(), args.n, tmp)
        for i in range(args.runs):
            for name, make in runners.items():
                r = run(make(), args.n, tmp)
                results[name].append(r)
                print(json.dumps({"runner": name, "run": i, **r}))
    for name, rs in results.items():
        print(
            json.dumps(
                {
                    "runner": name,
                    "median_first_record_s": statistics.median(r["first_record_s"] for r in rs),
                    "median_wall_s": statistics.median(r["wall_s"] for r in rs),
                    "all_checked": all(r["check"] for r in rs),
                }
            )
        )
    spark.stop()


if __name__ == "__main__":
    main()
