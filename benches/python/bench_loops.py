"""Loop benchmarks: workloads W4 (Collatz) and W5 (amplification) of BENCHMARKS.md.

Every measurement runs in a fresh Python subprocess (so its peak RSS is that of
the process running the job alone), is repeated ``--repeat`` times, and printed
as one JSON line per run plus one ``"summary": true`` line with the medians.
Fields: engine, workload, n, style, parallelism, seconds, rows_per_s,
peak_rss_mb, startup_s and check (true only when the result was verified
against the plain-Python reference).

- W4: every x in [1, n] goes around ``x -> x/2`` if even, ``3x+1`` if odd until
  x == 1; the output is (x, steps). rows_per_s counts record-iterations: every
  record entering the loop head (n from the input plus the sum of steps fed
  back) divided by the job's time.
- W5: ``--seeds`` seeds, every record re-enters the loop twice until
  ``--depth``; leaves = seeds * 2**depth. Reports the loop head's feedback
  spill (bytes, files) with a small ``--feedback-memory``.

    python benches/python/bench_loops.py --workload W4 --style native --parallelism 1
    python benches/python/bench_loops.py --workload W5 --feedback-memory 1MiB
    python benches/python/bench_loops.py --quick          # every workload, small sizes
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import eddyline as ed

# the loop body the tests use (tests/support, not shipped with eddyline)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from support.loops import collatz_body

GEN_BATCH = 65_536
LOOP_HEAD = "loop_head"
# BENCHMARKS.md: sum of Collatz steps over [1, 1,000,000]
W4_REFERENCE_SUM_1M = 131_434_424


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class LeafSink(ed.TwoPhaseCommitSink):
    """Counts committed leaves and sums their seed ids and squared ids (W5).

    Only Arrow compute kernels touch the batches: ``to_numpy``/``pa.array``
    would make pyarrow import pandas inside the job (~0.35 s and ~55 MB the
    first time), which is not the loop's cost. A transaction is four ints, so
    the sink holds no batches (nothing is committed before the job's end).
    """

    totals: ClassVar[list[int]] = [0, 0, 0]  # leaves, sum(seed), sum(seed**2)
    depths: ClassVar[set[int]] = set()

    @classmethod
    def reset(cls) -> None:
        cls.totals = [0, 0, 0]
        cls.depths = set()

    def begin_transaction(self) -> list[int]:
        return [0, 0, 0]

    def write(self, txn: list[int], batch: pa.RecordBatch) -> None:
        seed = batch.column("seed")
        txn[0] += batch.num_rows
        txn[1] += pc.sum(seed).as_py() or 0
        txn[2] += pc.sum(pc.multiply(seed, seed)).as_py() or 0
        bounds = pc.min_max(batch.column("depth"))
        LeafSink.depths.update((bounds["min"].as_py(), bounds["max"].as_py()))

    def pre_commit(self, txn: list[int]) -> None:
        pass

    def commit(self, txn: list[int]) -> None:
        for i, v in enumerate(txn):
            LeafSink.totals[i] += v
            txn[i] = 0

    def abort(self, txn: list[int]) -> None:
        txn[:] = [0, 0, 0]


# ---- W4: Collatz ------------------------------------------------------------


def collatz_native(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
    """Rust expressions: records at 1 leave; the others take one step and come back."""
    return collatz_body(s.name(LOOP_HEAD))


def collatz_per_record(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
    """The same body with a Python function per row (filter, filter + map)."""
    s = s.name(LOOP_HEAD)

    def step(r: dict) -> dict:
        x = r["x"]
        return {
            "value": r["value"],
            "x": x // 2 if x % 2 == 0 else 3 * x + 1,
            "steps": r["steps"] + 1,
        }

    done = s.filter(lambda r: r["x"] == 1)
    stepped = s.filter(lambda r: r["x"] > 1).map(step, schema=s.schema)
    return stepped, done


def collatz_reference(n: int) -> np.ndarray:
    """Plain Python: steps[v] for v in [0, n] (steps[0] unused), each v run until it
    drops below itself, then the known count of the smaller value is added."""
    steps = [0] * (n + 1)
    for v in range(2, n + 1):
        x, c = v, 0
        while x >= v:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            c += 1
        steps[v] = c + steps[x]
    return np.asarray(steps, dtype=np.int64)


def run_w4(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    env = ed.StreamEnvironment(args.parallelism, batch_size=args.batch_size)
    numbers = env.from_sequence(1, args.n + 1).with_columns(x=ed.col("value"), steps=ed.lit(0))
    body = collatz_native if args.style == "native" else collatz_per_record
    out = numbers.iterate(body, feedback_memory=args.feedback_memory).collect()
    startup = time.perf_counter() - t0
    t1 = time.perf_counter()
    result = env.execute("bench-W4")
    seconds = time.perf_counter() - t1
    rss = peak_rss_mb()  # before the output is converted and the reference is computed
    head = result.metrics["operators"][LOOP_HEAD]
    passes = int(head["records_in"])

    table = out.to_arrow()
    values = table["value"].to_numpy()
    got = table["steps"].to_numpy()
    expected = collatz_reference(args.n)
    steps_sum = int(got.sum())
    check = (
        table.num_rows == args.n
        and set(table["x"].to_pylist()) == {1}
        and np.array_equal(np.sort(values), np.arange(1, args.n + 1))
        and np.array_equal(got, expected[values])
        and steps_sum == int(expected.sum())
        and passes == args.n + steps_sum
        and (args.n != 1_000_000 or steps_sum == W4_REFERENCE_SUM_1M)
    )
    return {
        "steps_sum": steps_sum,
        "loop_passes": passes,
        "seconds": round(seconds, 4),
        "rows_per_s": round(passes / seconds),
        "input_rows_per_s": round(args.n / seconds),
        "startup_s": round(startup, 4),
        "peak_rss_mb": round(rss, 1),
        "spilled_bytes": int(head["spilled_bytes"]),
        "spill_files": int(head["spill_files"]),
        "head_batches_in": int(head["batches_in"]),
        "check": bool(check),
    }


# ---- W5: amplification ------------------------------------------------------


def amplify_body(depth: int, style: str):
    def native(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        s = s.name(LOOP_HEAD)
        child = s.filter(ed.col("depth") < depth).with_columns(depth=ed.col("depth") + 1)
        return child.union(child), s.filter(ed.col("depth") >= depth)

    def per_record(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        s = s.name(LOOP_HEAD)

        def children(r: dict) -> list[dict]:
            c = {"seed": r["seed"], "depth": r["depth"] + 1}
            return [c, dict(c)]

        inner = s.filter(lambda r: r["depth"] < depth).flat_map(children, schema=s.schema)
        return inner, s.filter(lambda r: r["depth"] >= depth)

    return native if style == "native" else per_record


def run_w5(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    env = ed.StreamEnvironment(args.parallelism, batch_size=args.batch_size)
    seeds = env.from_sequence(0, args.seeds).with_columns(seed=ed.col("value"), depth=ed.lit(0))
    seeds = seeds.select("seed", "depth")
    LeafSink.reset()
    looped = seeds.iterate(
        amplify_body(args.depth, args.style),
        feedback_memory=args.feedback_memory,
        priority=args.priority,
        spill_dir=args.spill_dir,
    )
    looped.sink_to(LeafSink())
    startup = time.perf_counter() - t0
    rss_before = peak_rss_mb()
    t1 = time.perf_counter()
    result = env.execute("bench-W5")
    seconds = time.perf_counter() - t1
    rss = peak_rss_mb()
    head = result.metrics["operators"][LOOP_HEAD]
    leaves, seed_sum, seed_sq_sum = LeafSink.totals
    fed_back = args.seeds * (2 ** (args.depth + 1) - 2)
    per_seed = 2**args.depth  # every seed has that many leaves
    check = (
        leaves == args.seeds * per_seed
        and seed_sum == per_seed * sum(range(args.seeds))
        and seed_sq_sum == per_seed * sum(i * i for i in range(args.seeds))
        and LeafSink.depths == {args.depth}
        and int(head["records_in"]) == args.seeds + fed_back
    )
    return {
        "seeds": args.seeds,
        "depth": args.depth,
        "leaves": leaves,
        "fed_back": fed_back,
        "feedback_memory": args.feedback_memory,
        "priority": args.priority,
        "seconds": round(seconds, 4),
        "rows_per_s": round((args.seeds + fed_back) / seconds),
        "startup_s": round(startup, 4),
        "spilled_bytes": int(head["spilled_bytes"]),
        "spill_files": int(head["spill_files"]),
        "head_batches_in": int(head["batches_in"]),
        "peak_rss_mb": round(rss, 1),
        "rss_before_execute_mb": round(rss_before, 1),
        "check": bool(check),
    }


# ---- driver -----------------------------------------------------------------


def describe(args: argparse.Namespace) -> dict:
    d = {
        "engine": "eddyline",
        "workload": args.workload,
        "style": args.style,
        "parallelism": args.parallelism,
        "batch_size": args.batch_size,
    }
    d["n"] = args.n if args.workload == "W4" else args.seeds
    return d


def child_argv(args: argparse.Namespace) -> list[str]:
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--one",
        "--workload",
        args.workload,
        "--style",
        args.style,
        "--parallelism",
        str(args.parallelism),
        "--batch-size",
        str(args.batch_size),
        "--n",
        str(args.n),
        "--seeds",
        str(args.seeds),
        "--depth",
        str(args.depth),
        "--feedback-memory",
        args.feedback_memory,
        "--priority",
        args.priority,
    ]
    if args.spill_dir:
        argv += ["--spill-dir", args.spill_dir]
    return argv


def measure(args: argparse.Namespace) -> list[dict]:
    """Runs one configuration ``args.repeat`` times, each in a fresh subprocess."""
    runs = []
    for i in range(args.repeat):
        load = round(os.getloadavg()[0], 2)  # the machine may be shared: say how busy it was
        try:
            proc = subprocess.run(
                child_argv(args), capture_output=True, text=True, timeout=args.timeout
            )
        except subprocess.TimeoutExpired:
            # subprocess.run kills the child it started before raising
            line = {
                **describe(args),
                "run": i,
                "hung": True,
                "timeout_s": args.timeout,
                "loadavg_1m": load,
            }
            line["check"] = False
            print(json.dumps(line), flush=True)
            runs.append(line)
            break
        if proc.returncode != 0:
            line = {**describe(args), "run": i, "error": proc.stderr.strip()[-2000:]}
            line["check"] = False
            print(json.dumps(line), flush=True)
            runs.append(line)
            break
        line = {**json.loads(proc.stdout.strip().splitlines()[-1]), "run": i, "loadavg_1m": load}
        print(json.dumps(line), flush=True)
        runs.append(line)
    ok = [r for r in runs if "seconds" in r]
    if len(ok) == args.repeat:
        summary = {**describe(args), "summary": True, "runs": len(ok)}
        for field in ("seconds", "rows_per_s", "peak_rss_mb", "spilled_bytes", "spill_files"):
            summary[field] = statistics.median(r[field] for r in ok)
        summary["seconds_min"] = min(r["seconds"] for r in ok)
        summary["seconds_max"] = max(r["seconds"] for r in ok)
        summary["check"] = all(r["check"] for r in ok)
        print(json.dumps(summary), flush=True)
    return runs


def default_feedback_memory(workload: str | None) -> str:
    """W5 asks for a small feedback memory; W4 keeps iterate()'s default."""
    return "1MiB" if workload == "W5" else "64MiB"


def quick_plan(args: argparse.Namespace) -> list[argparse.Namespace]:
    """Every workload and style at small sizes (W4 n = 20,000, W5 100 seeds to depth 10)."""
    plan = []
    for workload, style, extra in (
        ("W4", "native", {"n": 20_000}),
        ("W4", "per_record", {"n": 2_000}),
        ("W5", "native", {"seeds": 100, "depth": 10}),
        ("W5", "per_record", {"seeds": 100, "depth": 6}),
    ):
        for p in (1, 2):
            config = {**vars(args), "workload": workload, "style": style, "parallelism": p}
            plan.append(argparse.Namespace(**{**config, **extra}))
            if args.feedback_memory is None:
                plan[-1].feedback_memory = default_feedback_memory(workload)
    return plan


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workload", choices=["W4", "W5"])
    ap.add_argument("--style", choices=["native", "per_record"], default="native")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=GEN_BATCH)
    ap.add_argument("--n", type=int, default=1_000_000, help="W4: iterate x in [1, n]")
    ap.add_argument("--seeds", type=int, default=1_000, help="W5: number of seeds")
    ap.add_argument("--depth", type=int, default=12, help="W5: depth of the leaves")
    ap.add_argument(
        "--feedback-memory",
        default=None,
        help="feedback buffer per loop head subtask before spilling (default: W4 64MiB, W5 1MiB)",
    )
    ap.add_argument("--priority", choices=["feedback_first", "adaptive"], default="feedback_first")
    ap.add_argument("--spill-dir", default=None, help="default: a temporary directory")
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration (median)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is hung")
    ap.add_argument(
        "--quick", action="store_true", help="every workload, style and p in (1, 2), small sizes"
    )
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process
    args = ap.parse_args()
    if args.feedback_memory is None and not args.quick:
        args.feedback_memory = default_feedback_memory(args.workload)

    if args.one:
        run = run_w4 if args.workload == "W4" else run_w5
        print(json.dumps({**describe(args), **run(args)}))
        return
    if args.quick:
        for config in quick_plan(args):
            measure(config)
        return
    if args.workload is None:
        ap.error("--workload is required unless --quick")
    measure(args)


if __name__ == "__main__":
    main()
