"""The executor of broadcast process functions:
``stream.connect(rules.broadcast()).process(ed.BroadcastProcessFunction)``.

Input 0 is the stream (forwarded or rebalanced), input 1 the broadcast
stream (every subtask gets every row). The broadcast state (one dict) is the
same in every subtask once it has read the same broadcast rows, but an
unaligned checkpoint may catch the subtasks at different offsets of the
broadcast stream, so every subtask writes its own copy; a restore gives new
subtask ``i`` old subtask ``i mod p_old``'s copy with that subtask's
broadcast rows in flight (``Runner.broadcast_state``; the engine's
``Redistribution::Broadcast``; docs/DESIGN.md "Unaligned checkpoints").

On a keyed stream (``keyed.connect(rules.broadcast())``),
:class:`KeyedBroadcastProcessRunner` adds the keyed state and timers of
:class:`~eddyline._exec.process.KeyedProcessRunner`, checkpointed per key
group (format v5) next to the broadcast blob and the watermark entries
(DESIGN.md "Keyed state layer").
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from ..broadcast_functions import (
    BroadcastContext,
    BroadcastProcessFunction,
    KeyedBroadcastContext,
    KeyedBroadcastProcessFunction,
)
from ..errors import CheckpointError
from ..process_functions import ProcessContext
from .base import Runner, RunnerOutput, State
from .output import RowWriter
from .process import KeyedProcessRunner, _overrides
from .user_code import UserCode, call_user, short

__all__ = ["BroadcastProcessRunner", "KeyedBroadcastProcessRunner"]

_FORMAT = "eddyline.broadcast.v1"


class _BroadcastBlob:
    """The pickled broadcast state, kept while the state is unchanged (not
    re-pickled at every checkpoint). The state is writable only in ``open`` and
    ``process_broadcast_element`` (read-only elsewhere), so it is pickled again only
    after one of those ran, or a restore. A value changed in place through the
    read-only view is not a write (as in Flink, where such changes are undefined)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.blob: bytes | None = None
        self.pickles = 0
        """How many times the broadcast state was pickled (a counter for tests)."""

    def changed(self) -> None:
        self.blob = None

    def get(self) -> bytes:
        if self.blob is None:
            self.blob = pickle.dumps((_FORMAT, self.state), protocol=pickle.HIGHEST_PROTOCOL)
            self.pickles += 1
        return self.blob


class BroadcastProcessRunner(Runner):
    """Runs a :class:`~eddyline.BroadcastProcessFunction` (see the module docs)."""

    broadcast_state = True

    def __init__(self, node: str, fn: BroadcastProcessFunction, schema: pa.Schema | None) -> None:
        self.name = node
        self._fn = fn
        self._writer = RowWriter(node, schema, self.agree_schema)
        self._state: dict[str, Any] = {}
        self._blob = _BroadcastBlob(self._state)
        self._subtask = 0
        self._contexts = self._make_contexts(0, 1)

    def _make_contexts(self, subtask: int, parallelism: int) -> tuple[Any, Any]:
        read = BroadcastContext(self.name, subtask, parallelism, read_only=True)
        write = BroadcastContext(self.name, subtask, parallelism, read_only=False)
        read._values = write._values = self._state
        return read, write

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        self._subtask = int(ctx.get("subtask_index", 0))
        self._contexts = self._make_contexts(self._subtask, int(ctx.get("parallelism", 1)))
        self._blob.changed()
        call_user(self.name, self._fn.open, self._contexts[1])

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows == 0:
            return None
        if input == 1:
            self._blob.changed()
        fn = self._fn.process_broadcast_element if input == 1 else self._fn.process_element
        ctx = self._contexts[1 if input == 1 else 0]
        out: list[Any] = []
        row: Any = None
        with UserCode(self.name, detail=lambda v: f"input {input}, row: {short(v['row'])}"):
            for row in batch.to_pylist():
                result = fn(row, ctx)
                if result is None:
                    continue
                if isinstance(result, dict):
                    out.append(result)
                else:
                    out.extend(result)
        return self._writer.encode(out)

    def snapshot(self, checkpoint_id: int) -> State | None:
        """Every subtask writes its own copy of the broadcast state (see the
        module docs): the copies differ when an unaligned checkpoint caught the
        subtasks at different offsets of the broadcast stream."""
        return self._blob.get()

    def restore(self, data: State) -> None:
        if not isinstance(data, bytes):
            raise CheckpointError(
                f"operator '{self.name}': broadcast state must be one blob, got "
                f"{type(data).__name__}"
            )
        fmt, state = pickle.loads(data)
        if fmt != _FORMAT:
            raise CheckpointError(f"operator '{self.name}': unknown broadcast state {fmt!r}")
        self._state.clear()
        self._state.update(state)
        self._blob.changed()

    def close(self) -> None:
        call_user(self.name, self._fn.close)


class KeyedBroadcastProcessRunner(KeyedProcessRunner):
    """``keyed.connect(rules.broadcast()).process(fn)``: a
    :class:`~eddyline.BroadcastProcessFunction` (or
    :class:`~eddyline.KeyedBroadcastProcessFunction`) on a keyed stream.

    Input 0 is hash-partitioned by key: its rows get the key's state and
    timers (those of :class:`KeyedProcessRunner`, checkpointed per key group)
    and the broadcast state read-only. Input 1 is the broadcast stream: its
    rows may write the broadcast state and visit every key's state
    (``ctx.apply_to_keyed_state``). The snapshot is both: the keyed state per
    key group and, from subtask 0 only, the broadcast state, which every
    subtask of a restore at any parallelism gets (``Redistribution::Broadcast``;
    Flink's broadcast state pattern on a keyed stream). The key groups are in
    format v5 (no watermark in them: an advancing watermark leaves clean key
    groups' bytes alone); the operator state is an entry list, the
    broadcast blob first from subtask 0, then every subtask's watermark entry
    (``_WATERMARK_FORMAT``), and every subtask of a restore gets the entries
    of all old subtasks (``checkpoint/restore.rs`` ``broadcast_for``), so it
    takes its watermark as a keyed process function does (the smallest of the
    old subtasks whose key groups it receives). Format v4 checkpoints (the
    broadcast blob alone, the watermark in every owned key group) restore too.
    """

    broadcast_state = True
    union_state = False

    def __init__(
        self,
        node: str,
        keys: Sequence[str],
        fn: BroadcastProcessFunction,
        schema: pa.Schema | None,
        time_column: str | None = None,
        side_outputs: dict[str, tuple[int, pa.Schema | None]] | None = None,
    ) -> None:
        self._broadcast: dict[str, Any] = {}
        self._blob = _BroadcastBlob(self._broadcast)
        self._bfn = fn
        self._subtask = 0
        self._applied: list[Any] = []
        super().__init__(
            node,
            keys,
            fn.process_element,  # type: ignore[arg-type]
            schema,
            time_column,
            side_outputs,
        )
        self._function = fn  # type: ignore[assignment]
        self._bcontext = self._make_broadcast(0, 1)

    @classmethod
    def processing_time_for(cls, *args: Any) -> bool:
        """A function with ``on_timer`` may register processing-time timers."""
        fn = args[2] if len(args) > 2 else None
        return isinstance(fn, KeyedBroadcastProcessFunction) and _overrides(fn, "on_timer")

    @classmethod
    def recomputable_for(cls, *args: Any) -> bool:
        """Never: the broadcast state is always persisted."""
        return False

    def null_state_watermark(self, checkpoint_id: int) -> int | None:
        """Never recomputed: the state is always persisted."""
        return None

    def _make_broadcast(self, subtask: int, parallelism: int) -> BroadcastContext:
        write = BroadcastContext(self.name, subtask, parallelism, read_only=False)
        write._values = self._broadcast
        write._apply = self._apply_to_keyed_state
        return write

    def _new_context(
        self, name: str, subtask_index: int, parallelism: int, attempt: int
    ) -> ProcessContext:
        read = BroadcastContext(name, subtask_index, parallelism, read_only=True)
        read._values = self._broadcast
        context = KeyedBroadcastContext(
            name, subtask_index, parallelism, attempt, read.broadcast_state
        )
        context._timers = self
        context._ttl_seen = self._ttl_restored
        self._share_state(context)
        return context

    def open(self, ctx: dict[str, Any]) -> None:
        self._subtask = int(ctx.get("subtask_index", 0))
        self._bcontext = self._make_broadcast(self._subtask, int(ctx.get("parallelism", 1)))
        self._blob.changed()
        # KeyedProcessRunner.open calls fn.open with the keyed context; a
        # BroadcastProcessFunction's open gets the broadcast context instead.
        function, self._function = self._function, None
        try:
            super().open(ctx)
        finally:
            self._function = function
        call_user(self.name, self._bfn.open, self._bcontext)

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if input == 0:
            return super().process(input, batch, key_groups)
        if batch.num_rows == 0:
            return None
        self._blob.changed()
        fn = self._bfn.process_broadcast_element
        ctx = self._bcontext
        out: list[Any] = []
        # Rows that apply_to_keyed_state's function returns go here too.
        self._applied = out
        row: Any = None
        try:
            with UserCode(self.name, detail=lambda v: f"broadcast row: {short(v['row'])}"):
                for row in batch.to_pylist():
                    result = fn(row, ctx)
                    if result is None:
                        continue
                    if isinstance(result, dict):
                        out.append(result)
                    else:
                        out.extend(result)
        finally:
            self._unbind()
        return self._emit(out)

    def _apply_to_keyed_state(self, fn: Callable[..., Any], state: str | None) -> None:
        """``ctx.apply_to_keyed_state(fn, state)``: ``fn(key, ctx)`` per key with state."""
        out = self._applied
        column = self._cols.get(state) if state is not None else None
        if state is not None and not column:
            return
        for group in sorted(self._members):
            # (Keys registered by fn itself, or unregistered by it, are not revisited.)
            for key in list(self._members.get(group, ())):
                if self._group_of.get(key) != group:
                    continue  # (dropped by fn for an earlier key)
                if column is not None and key not in column:
                    continue
                result = self._call_for_key(group, key, None, fn, key)
                if isinstance(result, dict):
                    out.append(result)
                elif result is not None:
                    out.extend(result)
        self._unbind()

    def snapshot(self, checkpoint_id: int) -> Any:
        """The keyed state per key group (format v5) and the operator state as an
        entry list: from subtask 0 the broadcast blob first, from every subtask
        its watermark entry: ``([entries], {key_group: blob})``, or
        the key groups alone when a subtask has neither."""
        snap = super().snapshot(checkpoint_id)
        entries, keyed = snap if isinstance(snap, tuple) else ([], snap or {})
        if self._subtask == 0:
            entries = [self._blob.get(), *entries]
        return (entries, keyed) if entries else keyed

    def restore(self, data: Any) -> None:
        """Restores the broadcast state, the watermark entries and the key groups.

        Format v5: the union of the old subtasks' entry lists (the broadcast
        blob among them; ``Redistribution::Broadcast`` of entry lists), alone
        or with the key groups (a tuple). Format v4: the broadcast blob
        (subtask 0's, given to every subtask), alone or with v4 key groups
        (a tuple), or the key groups alone.
        """
        keyed: Any = None
        if isinstance(data, tuple):
            data, keyed = data
        if isinstance(data, list):
            watermarks = []
            for entry in data:
                restored = pickle.loads(entry)
                if isinstance(restored, tuple) and restored and restored[0] == _FORMAT:
                    _restore_broadcast(self.name, entry, self._broadcast)
                    self._blob.changed()
                else:
                    watermarks.append(entry)
            super().restore((watermarks, keyed) if keyed is not None else watermarks)
            return
        if isinstance(data, bytes):
            _restore_broadcast(self.name, data, self._broadcast)
            self._blob.changed()
            if keyed is not None:
                super().restore(keyed)
        else:
            super().restore(data)

    def close(self) -> None:
        call_user(self.name, self._bfn.close)


def _restore_broadcast(name: str, data: Any, into: dict[str, Any]) -> None:
    if not isinstance(data, bytes):
        raise CheckpointError(
            f"operator '{name}': broadcast state must be one blob, got {type(data).__name__}"
        )
    fmt, state = pickle.loads(data)
    if fmt != _FORMAT:
        raise CheckpointError(f"operator '{name}': unknown broadcast state {fmt!r}")
    into.clear()
    into.update(state)
