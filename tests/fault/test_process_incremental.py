"""An advancing watermark does not make a keyed process function's incremental
checkpoint write its unchanged key groups (process state format v5).

Event time advances with every batch; after each of ``KEYS`` keys was seen
once, only the "hot" keys of key group 0 change. With format v5 (the
watermark once per subtask, as operator state) a checkpoint of the hot phase
writes key group 0 and reuses the other 127 key groups from earlier files;
with the v4 writer (the watermark in every key group's blob) every one of them
changed with the watermark and was written again. The committed counts are
exact either way and ``read_state`` agrees with them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import eddyline as ed
from eddyline._exec.process import KeyedProcessRunner
from support.checkpoints import int_key_group
from support.faults import CheckpointGatedSequence

MAX_PARALLELISM = 128
KEYS = 3_000
HOT_ROWS = 30_000

HOT = [k for k in range(KEYS) if int_key_group(k, MAX_PARALLELISM) == 0]


def _key(v: int) -> int:
    return v if v < KEYS else HOT[(v - KEYS) % len(HOT)]


class HotKeys:
    """``value`` -> ``k`` (each key once, then round the hot keys, slowly)."""

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        v = batch.column("value").to_numpy()
        k = np.where(v < KEYS, v, np.array(HOT, dtype=np.int64)[(v - KEYS) % len(HOT)])
        if len(v) and v[-1] >= KEYS:
            time.sleep(0.01)  # throttle, not a wait: checkpoints complete while hot keys change
        return batch.append_column("k", pa.array(k, pa.int64()))


class Count(ed.ProcessFunction):
    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        ctx.state.update((ctx.state.value() or 0) + 1)


@pytest.mark.parametrize("writer", ["v4", "v5"])
def test_a_watermark_alone_does_not_rewrite_key_groups(
    tmp_path: Path, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if writer == "v4":
        monkeypatch.setattr(KeyedProcessRunner, "_watermark_per_key_group", True)
        monkeypatch.setattr(KeyedProcessRunner, "union_state", False)
    chk, n = tmp_path / "chk", KEYS + HOT_ROWS
    # Three gates in the hot phase, each waiting for a checkpoint triggered
    # after the source reached it: at least two checkpoints of that phase have
    # hot rows before them, whatever the timing.
    hot_phase = [(KEYS + i * HOT_ROWS // 4) / n for i in (1, 2, 3)]
    source = CheckpointGatedSequence(chk, n, splits=1, gates=hot_phase, fresh=True)
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(str(chk), interval="40ms", incremental=True, retained=1000),
        batch_size=1000,
        max_parallelism=MAX_PARALLELISM,
    )
    (
        env.from_source(source)
        .map_batches(HotKeys())
        .assign_timestamps("value")
        .key_by("k")
        .process(Count())
        .name("count")
        .uid("count")
        .collect()
    )
    result = env.execute(f"process-incremental-{writer}")

    def subtask(c: ed.CheckpointStats) -> dict[str, Any]:
        inspected = ed._core.inspect_checkpoint(c.path)  # type: ignore[attr-defined]
        (sub,) = next(o for o in inspected["operators"] if o["uid"] == "count")["subtasks"]
        return dict(sub)

    def reused(sub: dict[str, Any]) -> int:
        return sum(e - s for r in sub["reused"] for s, e in r["key_groups"])

    hot = [
        sub
        for c in result.checkpoints[1:]
        if (sub := subtask(c))["file"] is not None
        and sum(e - s for s, e in sub["key_groups"]) == MAX_PARALLELISM
    ]
    assert len(hot) >= 2, [subtask(c) for c in result.checkpoints]
    if writer == "v5":
        # Key group 0 written (when a hot batch came), the other 127 reused.
        assert all(reused(sub) >= MAX_PARALLELISM - 1 for sub in hot[1:]), hot
    else:
        # The watermark advanced between them: every key group written again.
        assert any(reused(sub) == 0 for sub in hot[1:]), hot

    counts: dict[int, int] = {}
    for v in range(KEYS + HOT_ROWS):
        counts[_key(v)] = counts.get(_key(v), 0) + 1
    state = ed.read_state(result.checkpoints[-1].path, "count")
    assert dict(zip(state["k"].to_pylist(), state["value"].to_pylist(), strict=True)) == counts
