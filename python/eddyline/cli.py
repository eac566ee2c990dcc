"""The ``eddyline`` command line: ``demo``, ``run script.py`` and ``checkpoints DIR``.

Example:
    >>> main(["checkpoints", "/nonexistent/dir"])
    no checkpoints found in /nonexistent/dir
    0
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from collections.abc import Sequence

__all__ = ["main"]

DEMO_ROWS = 1_000_000
DEMO_KEYS = 1000


def _demo(rows: int, parallelism: int, seed: int) -> int:
    import numpy as np
    import pyarrow as pa

    import eddyline as ed
    from eddyline.testing import last_by_key

    rng = np.random.default_rng(seed)
    keys = rng.integers(0, DEMO_KEYS, rows, dtype=np.int64)
    values = rng.integers(0, 1000, rows, dtype=np.int64)
    table = pa.table({"key": keys, "value": values})

    env = ed.StreamEnvironment(parallelism=parallelism)
    doubled = env.from_arrow(table).with_columns(value=ed.col("value") * 2)
    tagged = doubled.map(lambda r: {**r, "even": r["key"] % 2 == 0}).name("tag_even")
    sums = tagged.key_by("key").sum("value").collect()

    started = time.perf_counter()
    result = env.execute("demo")
    wall = time.perf_counter() - started

    final = last_by_key(sums, "key")
    expected = np.bincount(keys, weights=values * 2, minlength=DEMO_KEYS).astype(np.int64)
    top = sorted(final.values(), key=lambda r: (-r["value"], r["key"]))[:5]

    print(f"eddyline demo: {rows:,} rows in, parallelism {parallelism}")
    print("pipeline: with_columns(value*2) -> map(tag_even) -> key_by(key).sum(value) -> collect")
    print(f"distinct keys: {len(final)}")
    print("top 5 keys by sum:")
    for row in top:
        print(f"  key {row['key']:>4}  sum {row['value']:,}")
    print(f"wall time: {wall:.2f} s ({result.wall_time_s:.2f} s in the job)")
    print(f"throughput: {rows / wall:,.0f} rows/s")
    counts = np.bincount(keys, minlength=DEMO_KEYS)
    present = {k: int(expected[k]) for k in range(DEMO_KEYS) if counts[k] > 0}
    got = {k: row["value"] for k, row in final.items()}
    if got == present:
        print("check: ok")
        return 0
    wrong = sorted(k for k in set(got) | set(present) if got.get(k) != present.get(k))
    print(
        f"check: FAILED for {len(wrong)} keys, e.g. key {wrong[0]}: got {got.get(wrong[0])}, "
        f"expected {present.get(wrong[0])}"
    )
    return 1


def _run(script: str, args: Sequence[str]) -> int:
    if not os.path.isfile(script):
        print(f"eddyline run: no such file: {script}", file=sys.stderr)
        return 2
    saved = sys.argv[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
        sys.path.pop(0)
    return 0


def _checkpoints(directory: str) -> int:
    found: list[str] = []
    if os.path.isdir(directory):
        found = sorted(
            (entry for entry in os.listdir(directory) if entry.startswith("chk-")),
            key=lambda e: (len(e), e),
        )
    if not found:
        print(f"no checkpoints found in {directory}")
        return 0
    print(f"{len(found)} checkpoint directories in {directory}:")
    for entry in found:
        print(f"  {entry}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eddyline", description="eddyline: streaming dataflow with a Rust core."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the built-in example job and check its output")
    demo.add_argument("--rows", type=int, default=DEMO_ROWS, help="number of input rows")
    demo.add_argument("--parallelism", type=int, default=min(4, os.cpu_count() or 1))
    demo.add_argument("--seed", type=int, default=42)
    run = commands.add_parser("run", help="run a job script as __main__")
    run.add_argument("script")
    run.add_argument("args", nargs=argparse.REMAINDER)
    chk = commands.add_parser("checkpoints", help="list the checkpoints in a directory")
    chk.add_argument("dir")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
    """
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args.rows, args.parallelism, args.seed)
    if args.command == "run":
        return _run(args.script, args.args)
    return _checkpoints(args.dir)


if __name__ == "__main__":
    sys.exit(main())
