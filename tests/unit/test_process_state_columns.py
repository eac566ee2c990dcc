"""A keyed process function's state held by column: one dict per named
state (``key -> value``), no dict per key, while checkpoints keep the per-key
layout of format v5 byte for byte.

- A key group's blob equals, byte for byte, the blob pickled from the per-key
  layout ``{key: {name: value}}`` (built by hand here), timers included.
- A key whose state was cleared (or never written, or expired) holds nothing:
  not registered, in no column, not in the snapshot.
- A restore spreads the blobs back into the columns; the restored runner and
  the original continue exactly alike (and as a plain-Python reference).

Real runners (``KeyedProcessRunner``), no engine: the key groups are given.
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa

import eddyline as ed
from eddyline._exec.process import KeyedProcessRunner
from eddyline.process_functions import _Expiring
from eddyline.testing import ManualClock

FORMAT = "eddyline.keyed_process.v5"
P = pickle.HIGHEST_PROTOCOL


class AllKinds(ed.ProcessFunction):
    """Per key: a value (running sum), a list (the values seen), a map (value ->
    count); ``v == 0`` clears every state of the key, ``v < 0`` only reads, and
    ``v == 7`` registers an event-time timer at 1,000."""

    def open(self, ctx: ed.ProcessContext) -> None:
        self.total = ctx.get_state("total")
        self.seen = ctx.get_list_state("seen")
        self.counts = ctx.get_map_state("counts")

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> list[Any]:
        v = row["v"]
        if v == 0:
            self.total.clear()
            self.seen.clear()
            self.counts.clear()
            return [{"k": row["k"], "total": None}]
        if v < 0:
            return [{"k": row["k"], "total": self.total.value()}]
        self.total.update((self.total.value() or 0) + v)
        self.seen.add(v)
        self.counts.put(v, self.counts.get(v, 0) + 1)
        if v == 7:
            ctx.timer_service.register_event_time_timer(1_000)
        return [{"k": row["k"], "total": self.total.value()}]

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> list[Any]:
        return [{"k": ctx.key, "total": self.total.value()}]


SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])


def _runner(fn: ed.ProcessFunction | None = None) -> KeyedProcessRunner:
    runner = KeyedProcessRunner("cols", ["k"], fn or AllKinds(), SCHEMA)
    runner.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})
    runner._pool_size = 0  # in-process (the workers have tests of their own)
    return runner


def _batch(keys: list[int], values: list[int]) -> tuple[pa.RecordBatch, pa.UInt32Array]:
    # Key k in key group k % 3: several keys per key group.
    groups = pa.array([k % 3 for k in keys], type=pa.uint32())
    return pa.record_batch({"k": keys, "v": values}), groups


def _rows(out: Any) -> list[dict[str, Any]]:
    if out is None:
        return []
    batches = out if isinstance(out, list) else [out]
    return [row for batch in batches for row in batch.to_pylist()]


def _keyed(snapshot: Any) -> dict[int, bytes]:
    return snapshot[1] if isinstance(snapshot, tuple) else snapshot


def test_a_key_groups_blob_is_byte_for_byte_the_per_key_layout() -> None:
    runner = _runner()
    runner.process(0, *_batch([1, 4, 2, 1, 4, 1], [5, 3, 2, 5, 7, 6]))
    keyed = _keyed(runner.snapshot(1))
    kinds = {"total": "value", "seen": "list", "counts": "map"}
    # Key group 1 holds keys 1 and 4 (in the order they got state), key group 2 key 2.
    group1 = {
        1: {"total": 16, "seen": [5, 5, 6], "counts": {5: 2, 6: 1}},
        4: {"total": 10, "seen": [3, 7], "counts": {3: 1, 7: 1}},
    }
    group2 = {2: {"total": 2, "seen": [2], "counts": {2: 1}}}
    assert keyed == {
        1: pickle.dumps((FORMAT, kinds, group1, {4: [1_000]}, {}), protocol=P),
        2: pickle.dumps((FORMAT, kinds, group2, {}, {}), protocol=P),
    }
    # The columns: one dict per named state, no dict per key.
    assert runner._cols == {
        "total": {1: 16, 4: 10, 2: 2},
        "seen": {1: [5, 5, 6], 4: [3, 7], 2: [2]},
        "counts": {1: {5: 2, 6: 1}, 4: {3: 1, 7: 1}, 2: {2: 1}},
    }


def test_a_key_without_state_is_dropped_and_not_in_the_snapshot() -> None:
    runner = _runner()
    runner.process(0, *_batch([1, 4, 2], [5, 3, 2]))
    first = _keyed(runner.snapshot(1))
    assert sorted(first) == [1, 2]
    # Key 2 (alone in key group 2) cleared; key 1 cleared then written again in the
    # same batch; key 5 (group 2) and key 8 (group 2) only read: never registered.
    runner.process(0, *_batch([2, 1, 1, 5, 8], [0, 0, 9, -1, -1]))
    assert _rows(runner.process(0, *_batch([2], [-1]))) == [{"k": 2, "total": None}]
    assert 2 not in runner._group_of and 5 not in runner._group_of and 8 not in runner._group_of
    assert all(2 not in column for column in runner._cols.values())
    keyed = _keyed(runner.snapshot(2))
    assert sorted(keyed) == [1], "key group 2 holds nothing any more"
    kinds = {"total": "value", "seen": "list", "counts": "map"}
    # Key 1 held state again at the end of the batch: it kept its place (before 4).
    group1 = {
        1: {"total": 9, "seen": [9], "counts": {9: 1}},
        4: {"total": 3, "seen": [3], "counts": {3: 1}},
    }
    assert keyed[1] == pickle.dumps((FORMAT, kinds, group1, {}, {}), protocol=P)
    assert runner.state_by_group() == {1: group1}


def test_expired_state_is_dropped_from_the_columns_and_the_snapshot() -> None:
    class Ttl(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
            ctx.get_state("last", ttl=10).update(row["v"])

    with ManualClock(1_000) as clock:
        runner = KeyedProcessRunner("ttl", ["k"], Ttl(), None)
        runner.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})
        runner._pool_size = 0
        runner.process(0, *_batch([1, 2], [10, 20]))
        clock.advance(15_000)
        runner.process(0, *_batch([4], [40]))
        keyed = _keyed(runner.snapshot(1))
        # Keys 1 and 2 expired (written 15 s ago, ttl 10 s); key 4 lives until 26 s.
        group1 = {4: {"last": _Expiring(40, 26_000)}}
        assert keyed == {1: pickle.dumps((FORMAT, {"last": "value"}, group1, {}, {}), protocol=P)}
        assert runner._group_of == {4: 1} and runner._cols == {"last": {4: group1[4]["last"]}}


def _reference(rows: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """What AllKinds emits for ``rows`` (plain Python, no timers fired)."""
    totals: dict[int, int] = {}
    out = []
    for k, v in rows:
        if v == 0:
            totals.pop(k, None)
            out.append({"k": k, "total": None})
        elif v < 0:
            out.append({"k": k, "total": totals.get(k)})
        else:
            totals[k] = totals.get(k, 0) + v
            out.append({"k": k, "total": totals[k]})
    return out


def test_a_restore_spreads_the_blobs_into_the_columns_and_continues_exactly() -> None:
    first = [(k % 7, (k * 5) % 11 - 1) for k in range(60)]
    second = [(k % 9, (k * 3) % 13 - 2) for k in range(80)]
    runner = _runner()
    out = _rows(runner.process(0, *_batch([k for k, _ in first], [v for _, v in first])))
    snapshot = runner.snapshot(1)
    restored = KeyedProcessRunner("cols", ["k"], AllKinds(), SCHEMA)
    restored.restore(snapshot)
    restored.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})
    restored._pool_size = 0
    assert restored._cols == runner._cols and restored._group_of == runner._group_of
    batch = _batch([k for k, _ in second], [v for _, v in second])
    continued = _rows(runner.process(0, *batch))
    assert _rows(restored.process(0, *batch)) == continued
    assert out + continued == _reference(first + second)
    assert _keyed(restored.snapshot(2)) == _keyed(runner.snapshot(2))
    # The timers restored too: both fire the same rows.
    assert _rows(restored.on_watermark(1_000)) == _rows(runner.on_watermark(1_000)) != []


class Prune(ed.KeyedBroadcastProcessFunction):
    """A broadcast row ``{"below": n}`` clears the state of every key whose total is
    below ``n`` (apply_to_keyed_state, only keys holding "total"); rows add to it,
    ``v == 0`` only sets a "note"."""

    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> Any:
        def prune(key: Any, kctx: ed.ProcessContext) -> list[dict[str, Any]]:
            total = kctx.get_state("total")
            if total.value() < row["below"]:
                total.clear()
                kctx.get_state("note").clear()
                return [{"k": key, "total": None}]
            return [{"k": key, "total": total.value()}]

        ctx.apply_to_keyed_state(prune, state="total")

    def process_element(self, row: dict[str, Any], ctx: ed.KeyedBroadcastContext) -> Any:
        if row["v"] == 0:
            ctx.get_state("note").update("zero")
            return None
        total = ctx.get_state("total", default=0)
        total.update(total.value() + row["v"])
        return None


def test_apply_to_keyed_state_visits_the_columns_keys_and_drops_the_cleared() -> None:
    from eddyline._exec.broadcast import KeyedBroadcastProcessRunner

    runner = KeyedBroadcastProcessRunner("prune", ["k"], Prune(), SCHEMA)
    runner.open({"subtask_index": 0, "parallelism": 1, "max_parallelism": 128})
    # Keys 3 and 6 share key group 0; key 9 (group 0) has a note only: not visited.
    runner.process(0, *_batch([3, 6, 4, 9, 3, 6], [1, 5, 2, 0, 1, 0]))
    pruned = runner.process(1, pa.record_batch({"below": [3]}), None)
    # By key group, then in the order the keys got state.
    assert _rows(pruned) == [
        {"k": 3, "total": None},
        {"k": 6, "total": 5},
        {"k": 4, "total": None},
    ]
    assert runner._cols["total"] == {6: 5} and runner._cols["note"] == {6: "zero", 9: "zero"}
    assert sorted(runner._group_of) == [6, 9], "keys 3 and 4 hold nothing any more"
    keyed = _keyed(runner.snapshot(1))
    assert sorted(keyed) == [0], "key group 1 (key 4) is empty"
    kinds = {"total": "value", "note": "value"}
    values = {6: {"total": 5, "note": "zero"}, 9: {"note": "zero"}}
    assert keyed[0] == pickle.dumps((FORMAT, kinds, values, {}, {}), protocol=P)
