"""The executor of ``key_by(...).process(fn)``: per-key value state and event-time timers.

Timers fire when the watermark passes them (DESIGN.md "Event time per
split"); values and timers are checkpointed per key group, and a
:class:`~eddyline.ProcessFunction` that declares ``null_state_watermark``
rebuilds its state by replay instead (FLINK-4120).
"""

from __future__ import annotations

import copy
import heapq
import itertools
import pickle
from collections.abc import Callable, Hashable, Iterable, Sequence
from types import CodeType
from typing import Any, ClassVar

import pyarrow as pa

from ..broadcast_functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from ..errors import CheckpointError, EddylineError, SchemaError
from ..process_functions import (
    MIN_WATERMARK,
    ProcessContext,
    ProcessFunction,
    Row,
    processing_time,
    purge_column,
)
from .base import RunnerOutput
from .codegen import compile_process, frame_of, pylist
from .event_time import event_times, key_group_range
from .keyed import KeyedRunner
from .output import RowWriter, schema_line
from .process_pool import _IN_PROCESS_HOOKS, PooledProcess
from .user_code import UserCode, call_user, short, user_error

_KEYED_STATE_FORMAT = "eddyline.keyed_process.v5"
"""A key group's blob: the pickled ``(format, kinds, values, event-time timers,
processing-time timers)`` of the key group, kept between checkpoints while the
key group is unchanged (only changed key groups are re-serialized).
The watermark is not in it: it is the operator state of each subtask
(:data:`_WATERMARK_FORMAT`), so an advancing watermark leaves the blobs of
clean key groups byte for byte the same (an incremental checkpoint skips
them). Earlier formats, still read: v4 ``(format, watermark, kinds, inner)``
with ``inner`` the pickled ``(values, timers, processing-time timers)`` (every
owned key group carried the watermark: still written by a keyed broadcast
function, whose operator state is its broadcast state); v3 ``(format, values,
timers, watermark, kinds, processing-time timers)``; v2 had no kinds (name ->
"value" | "list" | "map", for ``ed.read_state``)."""

_V4_FORMAT = "eddyline.keyed_process.v4"

_WATERMARK_FORMAT = "eddyline.keyed_process.watermark.v1"
"""A subtask's operator state entry: ``(format, watermark, subtask_index,
parallelism, max_parallelism)``, union list state (``Runner.union_state``):
a subtask restored at another parallelism gets every old subtask's entry and
takes the smallest watermark of the old subtasks whose key groups overlap its
own (see :meth:`KeyedProcessRunner.open`)."""


class KeyedProcessRunner(KeyedRunner, PooledProcess):
    """``key_by(...).process(fn)`` with per-key value state and event-time timers.

    The keyed state is held by column (docs/DESIGN.md "Keyed state layer"):
    ``self._cols[name][key]`` is the value (list, map) of state ``name`` for ``key``, one
    dict per named state, so that the per-record path finds a key's value in one dict and no
    dict per key is spread over memory. ``self._group_of[key]`` is the key group of every
    key that may hold state and ``self._members[key_group]`` its keys (in the order they got
    state), so that a key group's blob ``{key: {name: value}}`` (format v5, the layout
    checkpoints keep) is built at a snapshot and spread back into the columns at a restore;
    ``self._timers[key_group][key]`` the timestamps of its timers, mirrored in a heap of
    ``(timestamp, seq, key_group, key)`` entries (deleted timers are skipped when popped).
    Timers fire in :meth:`on_watermark`, in timestamp order, also those that ``on_timer``
    registers at or below the watermark. Both are checkpointed per key group, the watermark
    once per subtask (its operator state, union list state).
    """

    union_state = True
    _watermark_per_key_group: ClassVar[bool] = False
    """Whether every owned key group's blob carries the watermark (format v4),
    instead of the operator state: a keyed broadcast function, whose operator
    state is its broadcast state (written by subtask 0 only)."""

    def __init__(
        self,
        node: str,
        keys: Sequence[str],
        fn: ProcessFunction | Callable[[Row, ProcessContext], Iterable[Row] | None],
        schema: pa.Schema | None,
        time_column: str | None = None,
        side_outputs: dict[str, tuple[int, pa.Schema | None]] | None = None,
    ) -> None:
        super().__init__(node, keys)
        # ctx.output(tag, row): one writer per declared tag, on its port.
        self._side = {
            name: (port, RowWriter(f"{node} side output {name!r}", tag_schema))
            for name, (port, tag_schema) in (side_outputs or {}).items()
        }
        self._function = fn if isinstance(fn, ProcessFunction) else None
        self._fn = fn.process_element if isinstance(fn, ProcessFunction) else fn
        self._writer = RowWriter(node, schema, self.agree_schema)
        self._time_column = time_column
        self._timers: dict[int, dict[Hashable, set[int]]] = {}
        self._heap: list[tuple[int, int, int, Hashable]] = []
        # Processing-time timers: the same shapes, by processing time.
        self._ptimers: dict[int, dict[Hashable, set[int]]] = {}
        self._pheap: list[tuple[int, int, int, Hashable]] = []
        self._seq = itertools.count()
        self._group = 0
        self.watermark = MIN_WATERMARK
        self._ttl_restored = False
        self._restored_kinds: dict[str, str] = {}
        """The kinds of the named states restored from a checkpoint (name -> kind)."""
        self._dirty: set[int] = set()
        """Key groups whose state or timers may have changed since their last snapshot."""
        self._cols: dict[str, dict[Hashable, Any]] = {}
        """name -> {key: value}: the keyed state, shared with the context's state
        handles (``ProcessContext._cols``); columns are cleared, never replaced."""
        self._group_of: dict[Hashable, int] = {}
        """Every key that may hold state -> its key group (one lookup per record:
        only a key new to the operator is registered, by ``_bind``)."""
        self._members: dict[int, dict[Hashable, None]] = {}
        """key group -> its keys of ``_group_of``, in the order they were registered."""
        self._gone: list[Hashable] = []
        """Keys to check after a batch (new ones, and those whose state lost an
        entry): one left without state is unregistered, so snapshots stay small."""
        self._inner: dict[int, bytes] = {}
        """Per key group its blob (v5) as of its last snapshot, valid while the key
        group is not in ``_dirty`` and the kinds are ``_inner_kinds`` (v4 mode: its
        pickled ``(values, timers, processing-time timers)``)."""
        self._inner_kinds: dict[str, str] = {}
        self._blobs: dict[int, tuple[int, dict[str, str], bytes, bytes]] = {}
        """v4 mode: per key group ``(watermark, kinds, inner, blob)`` of its last
        snapshot: the same blob is returned while all three are unchanged."""
        self._entry: tuple[tuple[int, ...], bytes] | None = None
        """The last watermark entry written, with what it holds."""
        self._watermark_entries: list[tuple[int, int, int, int]] = []
        """Restored ``(watermark, subtask, parallelism, max_parallelism)`` entries,
        resolved into :attr:`watermark` by :meth:`open` (which knows the subtask)."""
        self.pickled_groups = 0
        """How many key groups' state was pickled by :meth:`snapshot` (a counter for tests)."""
        self._context = self._new_context(node, 0, 1, 0)
        # Python worker processes (process_pool.py): sized in open, started when due.
        self._no_pool()
        self._pooled = False
        self._sent_watermark = MIN_WATERMARK
        self._open_ctx: dict[str, Any] = {}
        self._fresh_fn: Any = None
        """A copy of the function taken before its ``open``: what the workers load."""
        self.first_rows: list[int] | None = None

    def _new_context(
        self, name: str, subtask_index: int, parallelism: int, attempt: int
    ) -> ProcessContext:
        context = ProcessContext(name, subtask_index, parallelism, attempt)
        context._timers = self
        context._ttl_seen = self._ttl_restored
        self._share_state(context)
        return context

    def _share_state(self, context: ProcessContext) -> None:
        """Gives ``context`` (and so its state handles) this runner's columns."""
        context._cols = self._cols
        context._gone = self._gone

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        epoch = self._context.current_checkpoint
        self._context = self._new_context(
            self.name,
            int(ctx.get("subtask_index", 0)),
            int(ctx.get("parallelism", 1)),
            int(ctx.get("attempt", 0)),
        )
        self._context.current_checkpoint = epoch
        if self._watermark_entries:
            self.watermark = max(
                self.watermark,
                restored_watermark(
                    self._watermark_entries,
                    int(ctx.get("subtask_index", 0)),
                    int(ctx.get("parallelism", 1)),
                    int(ctx.get("max_parallelism", 128)),
                ),
            )
            self._watermark_entries = []
        self._open_pool(ctx)
        if self._pool_size:
            try:
                self._fresh_fn = copy.copy(
                    self._function if self._function is not None else self._fn
                )
            except Exception:  # a function that cannot be copied stays in-process
                self._pool_size = 0
        if self._function is not None:
            call_user(self.name, self._function.open, self._context)

    def _poolable(self) -> bool:
        """Whether this operator may move to worker processes (process_pool.py)."""
        if type(self) is not KeyedProcessRunner or self._side:
            return False
        function = self._function
        return function is None or not any(_overrides(function, h) for h in _IN_PROCESS_HOOKS)

    def _started_args(self) -> tuple[Any, ...]:
        return (self.name, self._keys, self._fresh_fn, self._writer.schema, self._time_column)

    def _local_snapshot(self) -> dict[int, bytes] | None:
        return KeyedProcessRunner._keyed_snapshot(self)

    def _drop_local_state(self) -> None:
        for column in self._cols.values():
            column.clear()  # (the state handles hold the columns)
        self._group_of.clear()
        self._members.clear()
        self._gone.clear()
        self._inner.clear()
        self._blobs.clear()
        self._dirty.clear()

    def _watermark(self) -> int:
        return self.watermark

    # ---- recompute (FLINK-4120) -----------------------------------------------

    @classmethod
    def processing_time_for(cls, *args: Any) -> bool:
        """A ProcessFunction with ``on_timer`` may register processing-time timers."""
        fn = args[2] if len(args) > 2 else None
        return isinstance(fn, ProcessFunction) and _overrides(fn, "on_timer")

    @classmethod
    def recomputable_for(cls, *args: Any) -> bool:
        """Recomputable when the function is a ProcessFunction declaring it."""
        fn = args[2] if len(args) > 2 else None
        return isinstance(fn, ProcessFunction) and _overrides(fn, "null_state_watermark")

    def null_state_watermark(self, checkpoint_id: int) -> int | None:
        if self._function is None:
            return None
        return call_user(self.name, self._function.null_state_watermark, checkpoint_id)

    def on_barrier(self, checkpoint_id: int) -> None:
        self._context.current_checkpoint = checkpoint_id
        if self._function is not None and _overrides(self._function, "on_barrier"):
            call_user(self.name, self._function.on_barrier, checkpoint_id, self._context)

    # ---- timers (the ProcessContext's timer backend) --------------------------

    def register_timer(self, timestamp: int) -> None:
        """Registers an event-time timer at ``timestamp`` for the current key (idempotent)."""
        self._register(self._timers, self._heap, timestamp, "event-time")

    def delete_timer(self, timestamp: int) -> None:
        """Deletes the current key's event-time timer at ``timestamp``, if any."""
        self._delete(self._timers, timestamp)

    def register_processing_timer(self, timestamp: int) -> None:
        """Registers a processing-time timer at ``timestamp`` for the current key."""
        self._register(self._ptimers, self._pheap, timestamp, "processing-time")

    def delete_processing_timer(self, timestamp: int) -> None:
        """Deletes the current key's processing-time timer at ``timestamp``, if any."""
        self._delete(self._ptimers, timestamp)

    def _register(
        self,
        timers: dict[int, dict[Hashable, set[int]]],
        heap: list[tuple[int, int, int, Hashable]],
        timestamp: int,
        what: str,
    ) -> None:
        if self._function is None or not _overrides(self._function, "on_timer"):
            raise EddylineError(
                f"operator '{self.name}': {what} timers need an ed.ProcessFunction (or an "
                "ed.KeyedBroadcastProcessFunction) that implements on_timer(timestamp, ctx)",
                operator=self.name,
            )
        key = self._context.key
        group = self._group
        per_key = timers.setdefault(group, {}).setdefault(key, set())
        if timestamp not in per_key:
            per_key.add(timestamp)
            self._dirty.add(group)
            heapq.heappush(heap, (timestamp, next(self._seq), group, key))

    def _delete(self, timers: dict[int, dict[Hashable, set[int]]], timestamp: int) -> None:
        key = self._context.key
        keyed = timers.get(self._group)
        per_key = keyed.get(key) if keyed is not None else None
        if per_key is not None and timestamp in per_key:
            per_key.discard(timestamp)
            self._dirty.add(self._group)
            if not per_key:
                del keyed[key]  # type: ignore[union-attr]

    def timers_pending(self) -> int:
        """How many timers are registered (for tests)."""
        return sum(len(ts) for keyed in self._timers.values() for ts in keyed.values())

    # ---- records --------------------------------------------------------------

    def _process_keyed(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if self._pool_size:
            return self._process_maybe_pooled(batch, key_groups)
        return self._in_process(batch, key_groups)

    def _in_process(self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None) -> Any:
        positions = self.first_rows  # in a worker process of several
        if positions is not None:
            positions.clear()
        return self._with_side(self._run_rows(batch, key_groups, positions))

    def _run_rows(
        self,
        batch: pa.RecordBatch,
        key_groups: pa.UInt32Array | None,
        positions: list[int] | None = None,
    ) -> pa.RecordBatch | None:
        """Runs ``process_element`` over the batch's rows: the main output's batch.

        The loop is generated for the batch's schema (:func:`compile_process`):
        one Python call per row (the user's function), the key's state found in
        the states' columns by ``ctx.key`` with nothing bound or written back per
        row (docs/DESIGN.md "Keyed state layer"), and, once the output schema
        is known, each output row's fields appended straight to column lists (as
        the record chain does). With ``positions``, the index of the input row of every
        output row is appended to it (a worker process, ``process_pool.py``).
        """
        names = tuple(batch.schema.names)
        indices = []
        for key in self._keys:
            index = batch.schema.get_field_index(key)
            if index < 0:
                raise SchemaError(
                    f"operator '{self.name}': key column '{key}' is not in the input schema "
                    f"({schema_line(batch)})",
                    operator=self.name,
                )
            indices.append(index)
        columns = [pylist(column) for column in batch.columns]
        keys: Sequence[Any] = ()
        if len(indices) > 1:
            keys = list(zip(*(columns[i] for i in indices), strict=True))
        n = batch.num_rows
        groups: Sequence[int] = (
            itertools.repeat(0, n) if key_groups is None else pylist(key_groups)  # type: ignore[assignment]
        )
        time_column = self._time_column
        event_time = time_column is not None and time_column in names
        times: Sequence[int | None] = ()
        if time_column is not None and event_time:
            times = event_times(batch, time_column, self.name)
        # The key group of the key is kept for the timers' backend (_register) only
        # when the function may register or delete timers (it implements on_timer).
        timers = (self._function is not None and _overrides(self._function, "on_timer")) or bool(
            self._timers or self._ptimers
        )
        schema = self._writer.schema
        outputs = tuple(schema.names) if schema is not None and len(schema) else None
        loop = compile_process(
            names,
            indices[0] if len(indices) == 1 else None,
            event_time,
            timers,
            outputs,
            positions is not None,
        )
        out_columns: list[list[Any]] = [[] for _ in outputs or ()]
        appenders = [column.append for column in out_columns]
        rows: list[Any] = []
        if outputs is None:
            append = rows.append
        else:
            fields_of = self._writer.fields_of

            def append(row: Any) -> None:  # a row that is not a plain dict with the fields
                for add, value in zip(appenders, fields_of(row), strict=True):
                    add(value)

        # A key's state is found in the states' columns by the key alone; only a
        # key new to the operator is registered (with its key group), and nothing
        # is written back after the batch (docs/DESIGN.md "Keyed state layer").
        ctx = self._context
        ctx.timestamp = None
        ctx._bound = True
        try:
            with UserCode(self.name, describe=lambda exc: self._failure(exc, loop.__code__)):
                loop(
                    self._fn,
                    ctx,
                    self,
                    self._bind,
                    self._group_of,
                    append,
                    keys,
                    groups,
                    times,
                    positions.append if positions is not None else None,
                    *columns,
                    *appenders,
                )
        finally:
            self._unbind()
            self._dirty.update((0,) if key_groups is None else groups)
            self._settle()
        if outputs is None:
            return self._writer.encode(rows)
        if not out_columns[0]:
            return None
        return self._writer.encode_columns(out_columns)

    def _failure(self, exc: Exception, code: CodeType) -> EddylineError:
        """The error for ``exc`` raised in the generated loop: the key and the row."""
        if isinstance(exc, EddylineError):
            return exc
        tb = frame_of(exc, code)
        variables = tb.tb_frame.f_locals if tb is not None else {}
        return user_error(
            exc,
            self.name,
            detail=f"key {short(variables.get('_key'))}, row: {short(variables.get('_row'))}",
            tb=(tb.tb_next or tb) if tb is not None else None,
        )

    def _bind(self, key: Hashable, group: int) -> None:
        """Registers ``key`` (new to the operator) in key group ``group``; it is
        checked after the batch (unregistered again if it got no state)."""
        self._group_of[key] = group
        members = self._members.get(group)
        if members is None:
            members = self._members[group] = {}
        members[key] = None
        self._gone.append(key)

    def _settle(self) -> None:
        """Unregisters the keys to check (``_gone``) that hold no state, so that
        snapshots stay small and keys seen once cost nothing later."""
        gone = self._gone
        if not gone:
            return
        columns = [column for column in self._cols.values() if column]
        group_of, members = self._group_of, self._members
        for key in gone:
            if key in group_of and not any(key in column for column in columns):
                group = group_of.pop(key)
                keys = members.get(group)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del members[group]
        gone.clear()

    def _named_values(self, key: Hashable) -> dict[str, Any]:
        """``key``'s states as ``{name: value}`` (the per-key layout of checkpoints)."""
        return {name: column[key] for name, column in self._cols.items() if key in column}

    def state_by_group(self) -> dict[int, dict[Hashable, dict[str, Any]]]:
        """The keyed state in the layout of checkpoints: ``{key_group: {key: {name:
        value}}}``, key groups and keys with state only (for tests and tools)."""
        out: dict[int, dict[Hashable, dict[str, Any]]] = {}
        for group, keys in self._members.items():
            values = {key: named for key in keys if (named := self._named_values(key))}
            if values:
                out[group] = values
        return out

    def _emit(self, out: list[Any]) -> RunnerOutput:
        """The main output's batch of rows ``out``, then each side output's ``(port, batch)``."""
        return self._with_side(self._writer.encode(out))

    def _with_side(self, main: pa.RecordBatch | None) -> RunnerOutput:
        """The main output's batch ``main``, then each side output's ``(port, batch)``."""
        rows = self._context._side_rows
        if not rows:
            return main
        self._context._side_rows = {}
        batches: list[pa.RecordBatch | tuple[int, pa.RecordBatch]] = []
        if main is not None:
            batches.append(main)
        for name, tag_rows in rows.items():
            declared = self._side.get(name)
            if declared is None:
                continue  # nobody reads this tag: dropped, as in Flink
            port, writer = declared
            batch = writer.encode(tag_rows)
            if batch is not None:
                batches.append((port, batch))
        return batches or None

    def _call_for_key(
        self, group: int, key: Hashable, timestamp: int | None, fn: Callable[..., Any], arg: Any
    ) -> Any:
        """Calls ``fn(arg, ctx)`` with ``ctx`` bound to ``key`` (of key group ``group``).

        A key whose state ends up empty holds no entry, so snapshots stay small.
        """
        ctx = self._context
        self._dirty.add(group)
        if key not in self._group_of:
            self._bind(key, group)
        ctx.key = key
        ctx.timestamp = timestamp
        ctx._bound = True
        self._group = group
        try:
            return fn(arg, ctx)
        finally:
            self._settle()

    def _unbind(self) -> None:
        """Detaches the context from the last key (after a batch or the timers fired)."""
        ctx = self._context
        ctx.key = None
        ctx.timestamp = None
        ctx._bound = False

    def on_watermark(self, watermark: int) -> RunnerOutput:
        """Fires the timers at or below ``watermark``, in timestamp order."""
        if watermark <= self.watermark:
            return None
        self.watermark = watermark
        return self._fire(self._timers, self._heap, watermark, "event_time")

    def processing_timer(self) -> tuple[int, int] | None:
        """``(due, now)`` of the next live processing-time timer, by :func:`processing_time`."""
        heap = self._pheap
        while heap:
            timestamp, _, group, key = heap[0]
            per_key = self._ptimers.get(group, {}).get(key)
            if per_key is not None and timestamp in per_key:
                return timestamp, processing_time()
            heapq.heappop(heap)  # deleted
        return None

    def on_processing_time(self) -> RunnerOutput:
        """Fires the processing-time timers at or before the current processing time."""
        return self._fire(self._ptimers, self._pheap, processing_time(), "processing_time")

    def _fire(
        self,
        timers: dict[int, dict[Hashable, set[int]]],
        heap: list[tuple[int, int, int, Hashable]],
        until: int,
        domain: str,
    ) -> RunnerOutput:
        """Fires ``timers`` at or before ``until`` in timestamp order (``on_timer``
        sees ``ctx.time_domain`` = ``domain``)."""
        if not heap or heap[0][0] > until:
            return None
        assert self._function is not None  # only a ProcessFunction registers timers
        on_timer = self._function.on_timer
        out: list[Any] = []
        timestamp = 0
        self._context.time_domain = domain
        try:
            with UserCode(
                self.name,
                detail=lambda v: (
                    f"on_timer at {v['timestamp']} for key {short(v['self']._context.key)}"
                ),
            ):
                while heap and heap[0][0] <= until:
                    timestamp, _, group, key = heapq.heappop(heap)
                    keyed = timers.get(group)
                    per_key = keyed.get(key) if keyed is not None else None
                    if per_key is None or timestamp not in per_key:
                        continue  # deleted
                    per_key.discard(timestamp)
                    if not per_key:
                        del keyed[key]  # type: ignore[union-attr]
                    # (_call_for_key marks the key group dirty.)
                    result = self._call_for_key(group, key, timestamp, on_timer, timestamp)
                    if isinstance(result, dict):
                        out.append(result)
                    elif result is not None:
                        out.extend(result)
        finally:
            self._context.time_domain = None
            self._unbind()
        return self._emit(out)

    def _lifecycle(self, hook: str, *args: Any) -> RunnerOutput:
        if self._function is None or not _overrides(self._function, hook):
            return None
        result = call_user(self.name, getattr(self._function, hook), *args, self._context)
        if result is None:
            return None
        return self._writer.encode([result] if isinstance(result, dict) else list(result))

    def end_input(self, input: int) -> RunnerOutput:
        """Calls ``ProcessFunction.end_input(input, ctx)``."""
        return self._lifecycle("end_input", input)

    def finish(self) -> RunnerOutput:
        """Calls ``ProcessFunction.finish(ctx)`` (not when stopped without draining)."""
        return self._lifecycle("finish")

    # ---- state ----------------------------------------------------------------

    def snapshot(self, checkpoint_id: int) -> Any:
        """``([watermark entry], {key_group: blob})``: the watermark once per subtask
        (operator state, union list state) and one blob per key group with
        values or timers, ``(format, kinds, values, timers, processing-time
        timers)`` pickled (format v5). ``{}`` with neither state nor watermark.

        Only the key groups touched since the last snapshot (a record, a timer,
        ``apply_to_keyed_state``, an expired ttl entry) are pickled again; the
        others return the very same bytes, also when the watermark advanced
        (what lets an incremental checkpoint skip them). A keyed
        broadcast function (``_watermark_per_key_group``) returns the key
        groups only, in format v4, every owned one carrying the watermark.
        """
        keyed = self._pooled_snapshot() if self._pooled else self._keyed_snapshot()
        if self._watermark_per_key_group or (not keyed and self.watermark == MIN_WATERMARK):
            return keyed
        return [self._watermark_entry()], keyed

    def _watermark_entry(self) -> bytes:
        """This subtask's :data:`_WATERMARK_FORMAT` entry (pickled once per watermark)."""
        ctx = self.ctx
        held = (
            self.watermark,
            int(ctx.get("subtask_index", 0)),
            int(ctx.get("parallelism", 1)),
            int(ctx.get("max_parallelism", 128)),
        )
        if self._entry is None or self._entry[0] != held:
            blob = pickle.dumps((_WATERMARK_FORMAT, *held), protocol=pickle.HIGHEST_PROTOCOL)
            self._entry = (held, blob)
        return self._entry[1]

    def _keyed_snapshot(self) -> dict[int, bytes]:
        """The blob of every key group with state (see :meth:`snapshot`)."""
        dirty = self._dirty
        if self._context._ttl_seen:
            # State with a ttl: expired entries are not part of the checkpoint.
            now = processing_time()
            group_of = self._group_of
            for column in self._cols.values():
                for key in purge_column(column, now):
                    dirty.add(group_of[key])
                    self._gone.append(key)
            self._settle()
        groups = {g for g, keys in self._members.items() if keys}
        groups.update(g for g, keyed in self._timers.items() if keyed)
        groups.update(g for g, keyed in self._ptimers.items() if keyed)
        v4 = self._watermark_per_key_group
        if v4 and self.watermark > MIN_WATERMARK:
            # v4: every owned key group carries the watermark, so
            # that it survives a restore at any parallelism.
            ctx = self.ctx
            groups.update(
                key_group_range(
                    int(ctx.get("subtask_index", 0)),
                    int(ctx.get("parallelism", 1)),
                    int(ctx.get("max_parallelism", 128)),
                )
            )
        kinds = {**self._restored_kinds, **self._context._kinds}
        inner_of, blobs = self._inner, self._blobs
        if not v4 and kinds != self._inner_kinds:
            inner_of.clear()  # v5 blobs hold the kinds (a state declared later: rare)
            self._inner_kinds = kinds
        out: dict[int, bytes] = {}
        for group in sorted(groups):
            inner = inner_of.get(group)
            if inner is None or group in dirty:
                named = self._named_values
                parts = (
                    # The per-key layout of format v5, built from the columns.
                    {k: v for k in self._members.get(group, ()) if (v := named(k))},
                    {key: sorted(ts) for key, ts in self._timers.get(group, {}).items()},
                    {key: sorted(ts) for key, ts in self._ptimers.get(group, {}).items()},
                )
                inner = inner_of[group] = pickle.dumps(
                    parts if v4 else (_KEYED_STATE_FORMAT, kinds, *parts),
                    protocol=pickle.HIGHEST_PROTOCOL,
                )
                self.pickled_groups += 1
            if not v4:
                out[group] = inner
                continue
            cached = blobs.get(group)
            if (
                cached is not None
                and cached[2] is inner
                and cached[0] == self.watermark
                and cached[1] == kinds
            ):
                out[group] = cached[3]
                continue
            blob = pickle.dumps(
                (_V4_FORMAT, self.watermark, kinds, inner), protocol=pickle.HIGHEST_PROTOCOL
            )
            blobs[group] = (self.watermark, kinds, inner, blob)
            out[group] = blob
        # Key groups left empty hold nothing any more.
        for group in [g for g in inner_of if g not in groups]:
            del inner_of[group]
            blobs.pop(group, None)
        dirty.clear()
        return out

    def restore(self, data: Any) -> None:
        """Restores values, timers and the watermark.

        ``([watermark entries], {key_group: blob})`` (format v5; the entries
        alone when no key group came with them) or ``{key_group: blob}``. Also
        the formats of earlier versions, whose key groups carry the watermark
        (the largest of those given is taken): v4, v3, values with timers but
        no watermark, values only, and v2 without the states' kinds.
        """
        if isinstance(data, tuple):
            entries, data = data
            self._restore_watermarks(entries)
        elif isinstance(data, list):
            self._restore_watermarks(data)
            return
        if isinstance(data, bytes | bytearray | memoryview):
            # A whole ``{key_group: {key: {name: value}}}`` table (values only).
            for group, values in pickle.loads(bytes(data)).items():
                self._spread(int(group), values)
            return
        if not isinstance(data, dict):
            raise TypeError(f"keyed state must be {{key_group: bytes}}, got {type(data).__name__}")
        for group, blob in data.items():
            if b"_Expiring" in blob:
                # State with a ttl (its class's name is in the pickle).
                self._ttl_restored = self._context._ttl_seen = True
            restored = as_v3(pickle.loads(blob))
            group = int(group)
            self._dirty.add(group)
            if isinstance(restored, dict):  # values only
                self._spread(group, restored)
                continue
            _, values, timers, *rest = restored
            if rest and rest[0] is not None:
                self.watermark = max(self.watermark, int(rest[0]))
            if len(rest) > 1:
                self._restored_kinds.update(rest[1])
            if values:
                self._spread(group, values)
            self._restore_timers(self._timers, self._heap, group, timers)
            if len(rest) > 2:
                self._restore_timers(self._ptimers, self._pheap, group, rest[2])

    def _spread(self, group: int, values: dict[Hashable, dict[str, Any]]) -> None:
        """Puts a key group's restored values (``{key: {name: value}}``, the layout
        of checkpoints) into the states' columns and registers their keys."""
        members = self._members.setdefault(group, {})
        group_of, cols = self._group_of, self._cols
        for key, named in values.items():
            if not named:
                continue
            group_of[key] = group
            members[key] = None
            for name, value in named.items():
                column = cols.get(name)
                if column is None:
                    column = cols[name] = {}
                column[key] = value
        if not members:
            del self._members[group]

    def _restore_watermarks(self, entries: Any) -> None:
        if not isinstance(entries, list):
            raise CheckpointError(
                f"operator '{self.name}': its operator state must be a list of watermark "
                f"entries, got {type(entries).__name__}"
            )
        for entry in entries:
            restored = pickle.loads(entry)
            if not (isinstance(restored, tuple) and restored[0] == _WATERMARK_FORMAT):
                raise CheckpointError(
                    f"operator '{self.name}': unknown watermark entry in its operator state "
                    f"({short(restored)})"
                )
            _, watermark, subtask, parallelism, max_parallelism = restored
            self._watermark_entries.append(
                (int(watermark), int(subtask), int(parallelism), int(max_parallelism))
            )

    def _restore_timers(
        self,
        into: dict[int, dict[Hashable, set[int]]],
        heap: list[tuple[int, int, int, Hashable]],
        group: int,
        timers: dict[Hashable, Sequence[int]],
    ) -> None:
        keyed = into.setdefault(group, {})
        for key, stamps in timers.items():
            keyed.setdefault(key, set()).update(stamps)
            for ts in stamps:
                heapq.heappush(heap, (ts, next(self._seq), group, key))

    def close(self) -> None:
        self._close_pool()
        if self._function is not None:
            call_user(self.name, self._function.close)


def _overrides(function: Any, hook: str) -> bool:
    """True if ``function``'s class overrides its base class's ``hook``
    (:class:`~eddyline.ProcessFunction`, :class:`~eddyline.BroadcastProcessFunction`
    or :class:`~eddyline.KeyedBroadcastProcessFunction`)."""
    base: type = ProcessFunction
    if isinstance(function, KeyedBroadcastProcessFunction):
        base = KeyedBroadcastProcessFunction
    elif isinstance(function, BroadcastProcessFunction):
        base = BroadcastProcessFunction
    return getattr(type(function), hook, None) is not getattr(base, hook, None)


def as_v3(blob: Any) -> Any:
    """A v4 or v5 key-group blob (unpickled) in the v3 shape ``(format, values,
    timers, watermark, kinds, processing-time timers)``, the watermark ``None``
    for v5 (also for ``ed.read_state``); other blobs unchanged."""
    if isinstance(blob, tuple) and blob:
        if blob[0] == _KEYED_STATE_FORMAT:
            fmt, kinds, values, timers, ptimers = blob
            return (fmt, values, timers, None, kinds, ptimers)
        if blob[0] == _V4_FORMAT:
            fmt, watermark, kinds, inner = blob
            values, timers, ptimers = pickle.loads(inner)
            return (fmt, values, timers, watermark, kinds, ptimers)
    return blob


def restored_watermark(
    entries: Sequence[tuple[int, int, int, int]],
    subtask: int,
    parallelism: int,
    max_parallelism: int,
) -> int:
    """The watermark of subtask ``subtask`` of ``parallelism`` restored from the
    watermark ``entries`` ``(watermark, old subtask, old parallelism, max
    parallelism)`` of the old subtasks: the smallest of those whose key groups
    overlap its own (an old subtask that wrote no entry had none).

    The smallest, not the largest: a timer of a key group whose old subtask
    was at watermark ``w`` is still pending when above ``w``, and fires as
    the watermark passes it, exactly as without the restore; a larger
    watermark would hold it back until the next watermark above that one.
    At the same parallelism every subtask gets its own watermark back.
    """
    mine = key_group_range(subtask, parallelism, max_parallelism)
    old: dict[int, int] = {}
    sizes: set[tuple[int, int]] = set()
    for watermark, old_subtask, old_parallelism, old_max in entries:
        old[old_subtask] = watermark
        sizes.add((old_parallelism, old_max))
    if len(sizes) != 1:
        return MIN_WATERMARK  # (entries of different jobs: never written by one checkpoint)
    ((old_parallelism, old_max),) = sizes
    overlapping = [
        s
        for s in range(old_parallelism)
        if _overlap(key_group_range(s, old_parallelism, old_max), mine)
    ]
    return min((old.get(s, MIN_WATERMARK) for s in overlapping), default=MIN_WATERMARK)


def _overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


class KeyedCoProcessRunner(KeyedProcessRunner):
    """``a.connect(b).key_by(ka, kb).process(fn)``: a :class:`~eddyline.CoProcessFunction`
    over two inputs keyed on their own columns, sharing one state and one
    timer service per key (a key of input 0 equal to one of input 1 is the
    same key). The binding hashes each input on its own key columns."""

    def __init__(
        self,
        node: str,
        input_keys: Sequence[Sequence[str]],
        fn: Any,
        schema: pa.Schema | None,
        time_columns: Sequence[str | None],
        side_outputs: dict[str, tuple[int, pa.Schema | None]] | None = None,
    ) -> None:
        super().__init__(node, input_keys[0], fn, schema, time_columns[0], side_outputs)
        self._input_keys = [tuple(k) for k in input_keys]
        self._time_columns = list(time_columns)
        self._fns = [fn.process_element1, fn.process_element2]

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        self._keys = self._input_keys[input]
        self._fn = self._fns[input]
        self._time_column = self._time_columns[input]
        return super().process(input, batch, key_groups)
