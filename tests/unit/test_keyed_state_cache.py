"""Python keyed state stays cheap: a checkpoint re-pickles only the
key groups touched since the previous one and returns the very same bytes
for the others (what lets an incremental checkpoint skip them); the state of
the keys a batch touches is fetched and written back once per batch; the
broadcast state is pickled again only after broadcast rows (or a restore).

Pickling is counted with the runner's ``pickled_groups`` counter, not timed.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline._exec.broadcast import BroadcastProcessRunner, KeyedBroadcastProcessRunner
from eddyline._exec.process import KeyedProcessRunner
from eddyline.testing import ManualClock

KEYS = 10
MIN_WM = -(2**63)


class Sums(ed.ProcessFunction):
    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        ctx.state.update((ctx.state.value() or 0) + row["v"])
        if row["v"] < 0:
            ctx.timer_service.register_event_time_timer(1_000)

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        return [{"k": ctx.key, "sum": ctx.state.value()}]


def _batch(keys: list[int], values: list[int]) -> tuple[pa.RecordBatch, pa.UInt32Array]:
    # Key k lives in key group 10 * k (the binding computes real ones; any will do).
    groups = pa.array([10 * k for k in keys], type=pa.uint32())
    return pa.record_batch({"k": keys, "v": values}), groups


def _runner(subtask: int = 0, parallelism: int = 1) -> KeyedProcessRunner:
    runner = KeyedProcessRunner("sums", ["k"], Sums(), None)
    runner.open({"subtask_index": subtask, "parallelism": parallelism, "max_parallelism": 128})
    return runner


def _keyed(snapshot: Any) -> dict[int, bytes]:
    """The key groups of a snapshot ``([watermark entry], {key_group: blob})``."""
    assert isinstance(snapshot, tuple) and len(snapshot[0]) == 1, snapshot
    return snapshot[1]  # type: ignore[no-any-return]


def test_a_checkpoint_re_pickles_only_the_key_groups_touched() -> None:
    runner = _runner()
    runner.process(0, *_batch(list(range(KEYS)), [1] * KEYS))
    first = _keyed(runner.snapshot(1))
    assert len(first) == KEYS
    assert runner.pickled_groups == KEYS
    # Nothing touched: nothing pickled, the same blobs.
    again = _keyed(runner.snapshot(2))
    assert runner.pickled_groups == KEYS
    assert all(again[g] is first[g] for g in first)
    # One key touched (three rows of it in one batch): one key group pickled.
    runner.process(0, *_batch([3, 3, 3], [5, 6, 7]))
    second = _keyed(runner.snapshot(3))
    assert runner.pickled_groups == KEYS + 1
    assert second.keys() == first.keys()
    assert second[30] != first[30]
    assert all(second[g] is first[g] for g in first if g != 30)
    # A timer is keyed state: registering one dirties its key group only.
    runner.process(0, *_batch([7], [-1]))
    third = _keyed(runner.snapshot(4))
    assert runner.pickled_groups == KEYS + 2
    assert all(third[g] is second[g] for g in second if g != 70)
    # The blobs restore exactly what the runner holds.
    restored = _runner()
    restored.restore(third)
    assert restored.state_by_group() == runner.state_by_group()
    assert restored.timers_pending() == 1


def test_an_advancing_watermark_re_serializes_only_the_changed_key_groups() -> None:
    runner = _runner()
    runner.process(0, *_batch(list(range(KEYS)), [1] * KEYS))
    first = _keyed(runner.snapshot(1))
    pickled = runner.pickled_groups
    # The watermark advances and one key changes: one key group serialized,
    # every other blob the very same bytes (the watermark is not in them).
    runner.on_watermark(10)
    runner.process(0, *_batch([4], [2]))
    entries, second = runner.snapshot(2)
    assert runner.pickled_groups == pickled + 1
    assert second.keys() == first.keys()
    assert all(second[g] is first[g] for g in first if g != 40)
    # The watermark alone: nothing serialized, no blob changed.
    runner.on_watermark(20)
    entries, third = runner.snapshot(3)
    assert runner.pickled_groups == pickled + 1
    assert all(third[g] is second[g] for g in second)
    # It is written once, as the subtask's operator state.
    restored = _runner()
    restored.restore((entries, third))
    assert restored.watermark == MIN_WM, "resolved by open (which knows the subtask)"
    restored.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})
    assert restored.watermark == 20 and restored.state_by_group() == runner.state_by_group()


def test_a_watermark_without_state_is_checkpointed_alone() -> None:
    runner = _runner()
    assert runner.snapshot(1) == {}, "no state and no watermark: nothing"
    runner.on_watermark(7)
    entries, keyed = runner.snapshot(2)
    assert keyed == {} and runner.pickled_groups == 0
    restored = KeyedProcessRunner("sums", ["k"], Sums(), None)
    restored.restore(entries)  # (the engine passes the entries alone)
    restored.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})
    assert restored.watermark == 7


def test_a_firing_timer_and_an_expiring_ttl_dirty_their_key_groups() -> None:
    class Expiring(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
            ctx.get_state("seen", ttl=1).update(row["v"])

    with ManualClock(0) as clock:
        runner = KeyedProcessRunner("ttl", ["k"], Expiring(), None)
        runner.open({"subtask_index": 0, "parallelism": 1})
        runner.process(0, *_batch([1, 2], [1, 2]))
        clock.advance(500)
        runner.process(0, *_batch([2], [3]))
        first = _keyed(runner.snapshot(1))
        assert sorted(first) == [10, 20]
        clock.advance(700)  # key 1's value (written at 0) expired; key 2's (at 500) not
        second = _keyed(runner.snapshot(2))
        assert sorted(second) == [20]
        assert second[20] is first[20], "key group 20 did not change"

    runner = _runner()
    runner.process(0, *_batch([4, 5], [-1, 1]))
    runner.snapshot(1)
    pickled = runner.pickled_groups
    fired = runner.on_watermark(1_000)
    assert fired is not None and fired.to_pylist() == [{"k": 4, "sum": -1}]
    runner.snapshot(2)
    # The timer's key group (40) changed; 50 did not (nor did the watermark
    # re-serialize it).
    assert runner.pickled_groups == pickled + 1


class Rules(ed.KeyedBroadcastProcessFunction):
    """Broadcast rows set a threshold; keyed rows count per key above it."""

    def process_broadcast_element(self, row: dict[str, Any], ctx: Any) -> None:
        ctx.broadcast_state.put("threshold", row["threshold"])

    def process_element(self, row: dict[str, Any], ctx: Any) -> None:
        above = row["v"] > (ctx.broadcast_state.get("threshold") or 0)
        if above and isinstance(ctx, ed.ProcessContext):  # keyed: count per key
            ctx.state.update((ctx.state.value() or 0) + 1)


@pytest.mark.parametrize("keyed", [False, True])
def test_the_broadcast_state_is_pickled_only_after_it_may_have_changed(keyed: bool) -> None:
    if keyed:
        runner: Any = KeyedBroadcastProcessRunner("rules", ["k"], Rules(), None)
    else:
        runner = BroadcastProcessRunner("rules", Rules(), None)
    runner.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})

    def broadcast_blob(checkpoint_id: int) -> bytes:
        snapshot = runner.snapshot(checkpoint_id)
        # Keyed: the broadcast blob is the first entry of subtask 0's operator state.
        return snapshot[0][0] if keyed else snapshot  # type: ignore[no-any-return]

    rules = pa.record_batch({"threshold": [3]})
    runner.process(1, rules, None)
    first = broadcast_blob(1)
    assert runner._blob.pickles == 1
    # Rows of the other input only read it: not pickled again, the very same bytes.
    runner.process(0, *_batch([1, 2, 3], [5, 1, 9]))
    assert broadcast_blob(2) is first and runner._blob.pickles == 1
    # A broadcast row may write it: pickled again, with the new value.
    runner.process(1, pa.record_batch({"threshold": [7]}), None)
    second = broadcast_blob(3)
    assert runner._blob.pickles == 2 and second != first
    assert broadcast_blob(4) is second and runner._blob.pickles == 2
    # A restore holds what it read: pickled again once, equal to what was restored.
    restored: Any = (
        KeyedBroadcastProcessRunner("rules", ["k"], Rules(), None)
        if keyed
        else BroadcastProcessRunner("rules", Rules(), None)
    )
    restored.restore(runner.snapshot(5))
    restored.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})
    again = restored.snapshot(6)
    assert (again[0][0] if keyed else again) == second
    assert restored._blob.pickles == 1
