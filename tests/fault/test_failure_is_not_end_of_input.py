"""A failed task upstream of a window never looks like the end of its input.

The chaos tester's seed 1829711827 raised the question: when a user function
fails, does a downstream window task read its input's end as the end of the
input (the final watermark) and fire its open windows with partial contents
before the job restarts? It must not: the failure cancels the attempt, it does
not drain it. A task that fails sends no EndOfData, and its consumers see its
channels close, which ends them cancelled (docs/DESIGN.md, "Runtime"). An
observer right after the window records every row the window emits in every
attempt, committed or not (what an at-least-once sink would see); with no late
row in the input, each must be its window's final value.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import assert_same_rows, read_parquet_dir
from support.faults import FailOnce, SleepPerBatch

N = 3000
SIZE_MS = 1000
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("t", pa.int64()), ("v", pa.int64())])


class Observe:
    """``map_batches`` identity that appends every row it is given to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        with self.path.open("a") as f:
            for row in batch.to_pylist():
                f.write(json.dumps(row) + "\n")
        return batch


@pytest.mark.timeout(120)
def test_a_failure_upstream_fires_no_window_early(
    seed: int, tmp_path: Path, chk_dir: Path, marker_dir: Path
) -> None:
    rng = random.Random(seed)
    # in event-time order: no row is ever late, every window has one value
    rows = [{"id": i, "k": rng.randrange(4), "t": i * 20, "v": rng.randint(1, 9)} for i in range(N)]
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for r in rows:
        sums[(r["k"], r["t"] - r["t"] % SIZE_MS)] += r["v"]
    windows = [
        {"k": k, "window_start": s, "window_end": s + SIZE_MS, "v": v} for (k, s), v in sums.items()
    ]
    at = rng.randrange(N // 3, 2 * N // 3)

    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk_dir, interval="50ms"),
        restart=ed.RestartStrategy.fixed_delay(3, "10ms"),
        batch_size=16,
    )
    fail = FailOnce(SleepPerBatch(0.002), marker_dir, column="id", at=at, armed_by=chk_dir)
    seen = tmp_path / "seen.jsonl"
    out = (
        env.from_collection(rows, schema=SCHEMA)
        .name("events")
        .uid("events")
        .assign_timestamps("t", max_out_of_orderness=0.1)
        .name("stamps")
        .uid("stamps")
        .map_batches(fail, schema=SCHEMA)
        .name("fail")
        .uid("fail")
        .key_by("k")
        .window(ed.Tumbling(SIZE_MS / 1000))
        .sum("v")
        .name("win")
        .uid("win")
        .map_batches(Observe(seen))
        .name("observe")
        .uid("observe")
    )
    out.sink_to(ed.ParquetSink(tmp_path / "windows")).name("files").uid("files")

    result = env.execute("failure-is-not-end-of-input")

    assert fail.fired, f"the failure never fired (at={at})"
    assert result.restarts == 1
    assert_same_rows(read_parquet_dir(tmp_path / "windows").to_pylist(), windows)
    final = {(w["k"], w["window_start"]): w["v"] for w in windows}
    observed: list[dict[str, Any]] = [json.loads(line) for line in seen.read_text().splitlines()]
    # non-vacuity: the observer saw the failed attempt's windows too (those it
    # emitted after its last checkpoint come again after the restore)
    assert len(observed) > len(windows), (len(observed), len(windows))
    early = [w for w in observed if final[(w["k"], w["window_start"])] != w["v"]]
    assert early == [], f"{len(early)} window(s) fired with partial contents, e.g. {early[:3]}"
