"""A window's late records on a side output into a ParquetSink: exactly once across a failure.

One source and the timestamps run at parallelism 1, so every window subtask
sees each batch followed by the watermark ``max timestamp so far - bound - 1``
and a plain-Python replay decides exactly which records are late. A user
function fails once after a checkpoint completed; the job restarts from it.
The committed side output must hold every late record exactly once, the
committed window sums must be exact, and the failure must have fired between
late records (some committed before it, some replayed or produced after it).
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import assert_same_rows, read_parquet_dir
from support.faults import FailOnce, SleepPerBatch, assert_exact_ids

N = 4000
BOUND_MS = 100
SIZE_MS = 1000
KEYS = ["a", "b", "c", "d", "e"]
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("t", pa.int64()), ("v", pa.int64())])


def make_batches(rng: random.Random) -> list[list[dict[str, Any]]]:
    """Event times that advance with jitter within the bound, and one straggler in nine."""
    rows = []
    clock = 1_000_000
    for i in range(N):
        clock += rng.randint(0, 20)
        t = clock - rng.randint(0, BOUND_MS)
        if i % 9 == 8:
            t = clock - BOUND_MS - rng.randint(300, 3000)
        rows.append({"id": i, "k": rng.choice(KEYS), "t": t, "v": rng.randint(-50, 100)})
    batches, i = [], 0
    while i < N:
        size = rng.randint(1, 8)
        batches.append(rows[i : i + size])
        i += size
    return batches


def replay(
    batches: list[list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The late records and the tumbling window sums, by the engine's watermark rule."""
    watermark = max_ts = -(2**63)
    late: list[dict[str, Any]] = []
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for batch in batches:
        for row in batch:
            start = row["t"] - row["t"] % SIZE_MS
            if start + SIZE_MS - 1 <= watermark:
                late.append(row)
            else:
                sums[(row["k"], start)] += row["v"]
        max_ts = max(max_ts, *(row["t"] for row in batch))
        watermark = max(watermark, max_ts - BOUND_MS - 1)
    windows = [
        {"k": k, "window_start": s, "window_end": s + SIZE_MS, "v": v} for (k, s), v in sums.items()
    ]
    return late, windows


@pytest.mark.timeout(120)
@pytest.mark.parametrize("parallelism", [1, 2], ids=lambda p: f"p{p}")
def test_late_side_output_into_parquet_is_exactly_once_after_a_failure(
    parallelism: int, seed: int, tmp_path: Path, chk_dir: Path, marker_dir: Path
) -> None:
    rng = random.Random(seed)
    batches = make_batches(rng)
    late, windows = replay(batches)
    at = rng.randrange(N // 3, 2 * N // 3)
    assert any(r["id"] < at for r in late) and any(r["id"] > at for r in late)

    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(chk_dir, interval="50ms"),
        restart=ed.RestartStrategy.fixed_delay(3, "10ms"),
        batch_size=8,
    )
    arrow = [
        pa.record_batch({c: [r[c] for r in b] for c in SCHEMA.names}, schema=SCHEMA)
        for b in batches
    ]
    fail = FailOnce(SleepPerBatch(0.002), marker_dir, column="id", at=at, armed_by=chk_dir)
    tag = ed.OutputTag("late")
    stamped = (
        env.from_arrow(arrow)
        .name("events")
        .uid("events")
        .set_parallelism(1)
        .map_batches(fail)
        .name("fail")
        .uid("fail")
        .set_parallelism(1)
        .assign_timestamps("t", max_out_of_orderness=BOUND_MS / 1000)
        .name("stamps")
        .uid("stamps")
        .set_parallelism(1)
    )
    sums = (
        stamped.key_by("k")
        .window(ed.Tumbling(SIZE_MS / 1000), late_output=tag)
        .sum("v")
        .name("win")
        .uid("win")
    )
    sums.sink_to(ed.ParquetSink(tmp_path / "windows")).name("window_files").uid("window_files")
    sums.side_output(tag).sink_to(ed.ParquetSink(tmp_path / "late")).name("late_files").uid(
        "late_files"
    )

    result = env.execute("late-side-output-recovery")

    # non-vacuity: the failure fired once, after a checkpoint, and between late records
    assert fail.fired, f"the failure never fired (at={at})"
    info = fail.fired_info()
    assert result.restarts == 1, f"restarts {result.restarts}, fired at {info}"
    assert info["armed_after"], f"no checkpoint had completed before the failure: {info}"
    assert max(result.checkpoint_ids) > max(info["armed_after"]), result.checkpoint_ids
    fired_id = info["id"]
    assert any(r["id"] < fired_id for r in late) and any(r["id"] >= fired_id for r in late)

    committed_late = read_parquet_dir(tmp_path / "late")
    assert committed_late.schema.names == SCHEMA.names
    assert_exact_ids(committed_late["id"].to_pylist(), [r["id"] for r in late], "late records")
    assert_same_rows(committed_late.to_pylist(), late)
    assert_same_rows(read_parquet_dir(tmp_path / "windows").to_pylist(), windows)
