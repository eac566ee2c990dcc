"""A keyed process function's checkpoint format v5: the watermark is
written once per subtask (union list state), the key groups without it.

- A restore at another parallelism gives every new subtask the smallest
  watermark of the old subtasks whose key groups it takes, and the timers
  restored fire exactly as they would have without the restore.
- The formats of earlier versions (v4: the watermark in every key group's
  blob, as the old writer wrote it; v3) restore and read as before.

Real runners, the engine's key-group ranges and the engine's redistribution
(key groups by owner, every watermark entry to every new subtask) redone
here as the restore does it (core/src/checkpoint/restore.rs).
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline._exec.event_time import key_group_range
from eddyline._exec.process import KeyedProcessRunner, restored_watermark

MAX_P = 128
MIN_WM = -(2**63)


class Sums(ed.ProcessFunction):
    """Sums per key; a row with ``t`` registers an event-time timer at ``t``."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        ctx.state.update((ctx.state.value() or 0) + row["v"])
        ctx.timer_service.register_event_time_timer(row["t"])

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        return [{"k": ctx.key, "t": timestamp, "sum": ctx.state.value()}]


def _open(subtask: int, parallelism: int, restore: Any = None) -> KeyedProcessRunner:
    runner = KeyedProcessRunner("sums", ["k"], Sums(), None)
    if restore is not None:
        runner.restore(restore)
    runner.open({"subtask_index": subtask, "parallelism": parallelism, "max_parallelism": MAX_P})
    return runner


def _batch(keys: list[int], ts: list[int]) -> tuple[pa.RecordBatch, pa.UInt32Array]:
    # Key k in key group 9 * k: keys 0..14 spread over every subtask of 3.
    groups = pa.array([9 * k for k in keys], type=pa.uint32())
    return pa.record_batch({"k": keys, "v": [1] * len(keys), "t": ts}), groups


def _rows(out: Any) -> list[dict[str, Any]]:
    if out is None:
        return []
    batches = out if isinstance(out, list) else [out]
    return [row for batch in batches for row in batch.to_pylist()]


def _redistribute(
    snapshots: list[Any], parallelism: int
) -> list[tuple[list[bytes], dict[int, bytes]]]:
    """What each of ``parallelism`` new subtasks restores: the key groups it owns,
    and the watermark entries of every old subtask (Redistribution::Union)."""
    entries = [e for s in snapshots if isinstance(s, tuple) for e in s[0]]
    groups: dict[int, bytes] = {}
    for s in snapshots:
        groups.update(s[1] if isinstance(s, tuple) else s)
    return [
        (entries, {g: b for g, b in groups.items() if g in key_group_range(i, parallelism, MAX_P)})
        for i in range(parallelism)
    ]


def test_the_restored_watermark_is_the_smallest_of_the_overlapping_old_subtasks() -> None:
    # Two old subtasks (key groups 0..63 at 100, 64..127 at 50).
    entries = [(100, 0, 2, MAX_P), (50, 1, 2, MAX_P)]
    assert [restored_watermark(entries, i, 3, MAX_P) for i in range(3)] == [100, 50, 50]
    assert restored_watermark(entries, 0, 1, MAX_P) == 50
    # At the same parallelism each subtask gets only its own entry back.
    assert restored_watermark(entries[:1], 0, 2, MAX_P) == 100
    assert restored_watermark(entries[1:], 1, 2, MAX_P) == 50
    # An old subtask that wrote no entry had no watermark.
    assert restored_watermark(entries[:1], 0, 1, MAX_P) == MIN_WM
    assert restored_watermark(entries[:1], 0, 4, MAX_P) == 100


def test_timers_restored_at_p1_to_p3_fire_exactly_as_without_the_restore() -> None:
    keys = list(range(15))
    first = (keys, [100 + 10 * k for k in keys])
    second = (keys, [105 + 10 * k for k in keys])
    watermarks = [90, 150, 160, 200, 260, 400]

    def run(rescale: bool) -> list[dict[str, Any]]:
        runner = _open(0, 1)
        runner.process(0, *_batch(*first))
        fired = _rows(runner.on_watermark(watermarks[0]))
        runners = [runner]
        if rescale:
            snapshot = runner.snapshot(1)
            assert isinstance(snapshot, tuple)
            runners = [_open(i, 3, state) for i, state in enumerate(_redistribute([snapshot], 3))]
            assert [r.watermark for r in runners] == [watermarks[0]] * 3
            assert sum(r.timers_pending() for r in runners) == len(keys)
        for r in runners:
            mine = key_group_range(r.ctx["subtask_index"], r.ctx["parallelism"], MAX_P)
            owned = [(k, t) for k, t in zip(*second, strict=True) if 9 * k in mine]
            r.process(0, *_batch([k for k, _ in owned], [t for _, t in owned]))
        for wm in watermarks[1:]:
            for r in runners:
                fired += _rows(r.on_watermark(wm))
        return fired

    reference = run(rescale=False)
    assert len(reference) == 2 * len(keys)
    assert sorted(run(rescale=True), key=_order) == sorted(reference, key=_order)


def _order(row: dict[str, Any]) -> tuple[int, int]:
    return row["t"], row["k"]


def test_old_subtasks_at_different_watermarks_restore_the_smallest_and_fire_the_rest() -> None:
    # Two old subtasks whose watermarks differ (an unaligned checkpoint may
    # take them so): subtask 1 is behind, its timer at 70 still pending.
    old = [_open(0, 2), _open(1, 2)]
    old[0].process(0, *_batch([1], [80]))  # key group 9: subtask 0 (0..63)
    old[1].process(0, *_batch([8], [70]))  # key group 72: subtask 1 (64..127)
    assert _rows(old[0].on_watermark(90)) == [{"k": 1, "t": 80, "sum": 1}]
    assert _rows(old[1].on_watermark(60)) == []
    (restored,) = [_open(0, 1, s) for s in _redistribute([o.snapshot(1) for o in old], 1)]
    assert restored.watermark == 60 and restored.timers_pending() == 1
    assert _rows(restored.on_watermark(65)) == []
    assert _rows(restored.on_watermark(75)) == [{"k": 8, "t": 70, "sum": 1}]


def _v4_snapshot(runner: KeyedProcessRunner) -> dict[int, bytes]:
    """The key groups as the v4 writer wrote them: the watermark in every owned
    key group's blob (the path a keyed broadcast function still takes)."""
    runner._watermark_per_key_group = True  # type: ignore[misc]
    try:
        snapshot = runner.snapshot(1)
    finally:
        del runner._watermark_per_key_group
    assert isinstance(snapshot, dict)
    assert pickle.loads(snapshot[9])[0] == "eddyline.keyed_process.v4"
    return snapshot


@pytest.mark.parametrize("parallelism", [1, 3])
def test_a_v4_checkpoint_restores_state_timers_and_watermark(parallelism: int) -> None:
    old = _open(0, 1)
    old.process(0, *_batch([1, 5, 13], [300, 310, 320]))
    old.on_watermark(250)
    blobs = _v4_snapshot(old)
    assert len(blobs) == MAX_P, "v4: every owned key group carried the watermark"
    restored = [_open(i, parallelism, s) for i, s in enumerate(_redistribute([blobs], parallelism))]
    assert all(r.watermark == 250 for r in restored)
    fired = [row for r in restored for row in _rows(r.on_watermark(400))]
    assert sorted(fired, key=_order) == [
        {"k": 1, "t": 300, "sum": 1},
        {"k": 5, "t": 310, "sum": 1},
        {"k": 13, "t": 320, "sum": 1},
    ]
    # Written again in format v5: only the key groups with state, the watermark apart.
    entries, keyed = restored[0].snapshot(2)
    assert pickle.loads(entries[0])[:2] == ("eddyline.keyed_process.watermark.v1", 400)
    assert all(pickle.loads(b)[0] == "eddyline.keyed_process.v5" for b in keyed.values())


def test_a_v3_checkpoint_restores_state_timers_and_watermark() -> None:
    v3 = (
        "eddyline.keyed_process.v3",
        {2: {"value": 7}},
        {2: [500]},
        450,
        {"value": "value"},
        {},
    )
    restored = _open(0, 1, {18: pickle.dumps(v3)})
    assert restored.watermark == 450 and restored.state_by_group() == {18: {2: {"value": 7}}}
    assert _rows(restored.on_watermark(600)) == [{"k": 2, "t": 500, "sum": 7}]
