"""Barrier alignment of two inputs of different speeds, with a failure recovered.

A fast and a slow source meet in a ``union`` (or a ``connect``) before a keyed
sum; in exactly-once mode the two-input task aligns the barriers, which the
checkpoint stats must show, and the final sums are exact after the recovery.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import last_by_key
from support.faults import FailOnce, SleepPerBatch, assert_exact_ids

FAST_N = 60_000
SLOW_N = 30_000
N = FAST_N + SLOW_N
KEYS = 17
EXPECTED_SUMS = dict(
    enumerate(np.bincount(np.arange(N) % KEYS, weights=np.arange(N)).astype(np.int64).tolist())
)
EXPECTED_COUNTS = dict(enumerate(np.bincount(np.arange(N) % KEYS).tolist()))


def _same(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


@pytest.mark.parametrize("shape", ["union", "connect"])
@pytest.mark.parametrize("parallelism", [1, 2], ids=lambda p: f"p{p}")
@pytest.mark.timeout(60)
def test_checkpoint_alignment_of_fast_and_slow_inputs_is_exact(
    shape: str, parallelism: int, seed: int, tmp_path: Path, chk_dir: Path, marker_dir: Path
) -> None:
    rng = random.Random(seed)
    at = rng.randrange(FAST_N + SLOW_N // 5, FAST_N + 3 * SLOW_N // 5)
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(chk_dir, interval="30ms", mode="exactly_once"),
        restart=ed.RestartStrategy.fixed_delay(3, "10ms"),
        batch_size=128,
    )
    fast = (
        env.from_sequence(0, FAST_N)
        .name("fast_source")
        .uid("fast_source")
        .map_batches(SleepPerBatch(0.0005))
        .name("fast")
        .uid("fast")
    )
    slow_source = env.from_sequence(FAST_N, N).name("slow_source").uid("slow_source")
    fail = FailOnce(SleepPerBatch(0.004), marker_dir, column="value", at=at, armed_by=chk_dir)
    if shape == "union":
        slow = slow_source.map_batches(fail).name("slow").uid("slow")
        merged = fast.union(slow).name("merge").uid("merge")
    else:
        slow = slow_source.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
        merged = fast.connect(slow).map_batches(_same, fail).name("merge").uid("merge")
    tagged = merged.with_columns(k=ed.col("value") % KEYS).name("tag").uid("tag")
    keyed = tagged.key_by("k")
    sums = keyed.sum("value").name("sums").uid("sums").collect()
    counts = keyed.count().name("counts").uid("counts").collect()
    rows = tagged.collect()

    result = env.execute(f"align_{shape}")

    info = fail.fired_info()
    assert result.restarts == 1, info
    assert info["armed_after"], "no checkpoint completed before the failure"
    aligned = [(c.id, c.alignment_ms) for c in result.checkpoints]
    assert any(ms > 0 for _, ms in aligned), f"no checkpoint shows alignment: {aligned}"
    assert {k: r["count"] for k, r in last_by_key(counts, "k").items()} == EXPECTED_COUNTS
    assert {k: r["value"] for k, r in last_by_key(sums, "k").items()} == EXPECTED_SUMS
    assert_exact_ids(rows.to_arrow()["value"].to_pylist(), range(N), "collect")
