"""The executor of ``key_by(...).process(fn)``: per-key value state and event-time timers.

Timers fire when the watermark passes them (DESIGN.md "Event time per
split"); values and timers are checkpointed per key group, and a
:class:`~eddyline.ProcessFunction` that declares ``null_state_watermark``
rebuilds its state by replay instead (FLINK-4120).
"""

from __future__ import annotations

import copy
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
)
from .base import RunnerOutput
from .codegen import compile_process, frame_of, pylist
from .event_time import event_times, key_group_range
from .keyed import KeyedRunner
from .keyed_store import KeyedStateStore, as_v3
from .output import RowWriter, schema_line
from .process_pool import _IN_PROCESS_HOOKS, PooledProcess
from .timer_queue import TimerQueue
from .user_code import UserCode, call_user, short, user_error

__all__ = ["KeyedCoProcessRunner", "KeyedProcessRunner", "as_v3", "restored_watermark"]

_WATERMARK_FORMAT = "eddyline.keyed_process.watermark.v1"
"""A subtask's operator state entry: ``(format, watermark, subtask_index,
parallelism, max_parallelism)``, union list state (``Runner.union_state``):
a subtask restored at another parallelism gets every old subtask's entry and
takes the smallest watermark of the old subtasks whose key groups overlap its
own (see :meth:`KeyedProcessRunner.open`)."""


class KeyedProcessRunner(KeyedRunner, PooledProcess):
    """``key_by(...).process(fn)`` with per-key value state and event-time timers.

    The keyed state is a :class:`~eddyline._exec.keyed_store.KeyedStateStore`
    (by column, with its versioned per-key-group codec); the timers are two
    :class:`~eddyline._exec.timer_queue.TimerQueue`, by event time and by
    processing time. Timers fire in :meth:`on_watermark`, in timestamp order,
    also those that ``on_timer`` registers at or below the watermark. Both are
    checkpointed per key group, the watermark once per subtask (its operator
    state, union list state).
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
        seq = itertools.count()
        self._timers = TimerQueue(seq)
        self._ptimers = TimerQueue(seq)
        """Processing-time timers: the same queue, by processing time."""
        self._group = 0
        self.watermark = MIN_WATERMARK
        self._ttl_restored = False
        self._store = KeyedStateStore()
        # The store's dicts (cleared, never replaced) under the names the keyed
        # broadcast runner's ``apply_to_keyed_state`` reads.
        self._cols = self._store.cols
        self._group_of = self._store.group_of
        self._members = self._store.members
        self._entry: tuple[tuple[int, ...], bytes] | None = None
        """The last watermark entry written, with what it holds."""
        self._watermark_entries: list[tuple[int, int, int, int]] = []
        """Restored ``(watermark, subtask, parallelism, max_parallelism)`` entries,
        resolved into :attr:`watermark` by :meth:`open` (which knows the subtask)."""
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
        context._cols = self._store.cols
        context._gone = self._store.gone

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
        self._store.clear()

    @property
    def pickled_groups(self) -> int:
        """How many key groups' state was pickled by :meth:`snapshot` (a counter for tests)."""
        return self._store.pickled_groups

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
        self._register(self._timers, timestamp, "event-time")

    def delete_timer(self, timestamp: int) -> None:
        """Deletes the current key's event-time timer at ``timestamp``, if any."""
        self._delete(self._timers, timestamp)

    def register_processing_timer(self, timestamp: int) -> None:
        """Registers a processing-time timer at ``timestamp`` for the current key."""
        self._register(self._ptimers, timestamp, "processing-time")

    def delete_processing_timer(self, timestamp: int) -> None:
        """Deletes the current key's processing-time timer at ``timestamp``, if any."""
        self._delete(self._ptimers, timestamp)

    def _register(self, timers: TimerQueue, timestamp: int, what: str) -> None:
        if self._function is None or not _overrides(self._function, "on_timer"):
            raise EddylineError(
                f"operator '{self.name}': {what} timers need an ed.ProcessFunction (or an "
                "ed.KeyedBroadcastProcessFunction) that implements on_timer(timestamp, ctx)",
                operator=self.name,
            )
        if timers.register(self._group, self._context.key, timestamp):
            self._store.dirty.add(self._group)

    def _delete(self, timers: TimerQueue, timestamp: int) -> None:
        if timers.delete(self._group, self._context.key, timestamp):
            self._store.dirty.add(self._group)

    def timers_pending(self) -> int:
        """How many timers are registered (for tests)."""
        return self._timers.pending()

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
                    self._store.bind,
                    self._store.group_of,
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
            self._store.dirty.update((0,) if key_groups is None else groups)
            self._store.settle()
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

    def state_by_group(self) -> dict[int, dict[Hashable, dict[str, Any]]]:
        """The keyed state in the layout of checkpoints: ``{key_group: {key: {name:
        value}}}``, key groups and keys with state only (for tests and tools)."""
        return self._store.state_by_group()

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
        store = self._store
        store.dirty.add(group)
        if key not in store.group_of:
            store.bind(key, group)
        ctx.key = key
        ctx.timestamp = timestamp
        ctx._bound = True
        self._group = group
        try:
            return fn(arg, ctx)
        finally:
            store.settle()

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
        return self._fire(self._timers, watermark, "event_time")

    def processing_timer(self) -> tuple[int, int] | None:
        """``(due, now)`` of the next live processing-time timer, by :func:`processing_time`."""
        timestamp = self._ptimers.next_timestamp()
        return None if timestamp is None else (timestamp, processing_time())

    def on_processing_time(self) -> RunnerOutput:
        """Fires the processing-time timers at or before the current processing time."""
        return self._fire(self._ptimers, processing_time(), "processing_time")

    def _fire(self, timers: TimerQueue, until: int, domain: str) -> RunnerOutput:
        """Fires ``timers`` at or before ``until`` in timestamp order (``on_timer``
        sees ``ctx.time_domain`` = ``domain``)."""
        if not timers.due(until):
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
                for timestamp, group, key in timers.pop_due(until):
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
        store = self._store
        if self._context._ttl_seen:
            # State with a ttl: expired entries are not part of the checkpoint.
            store.purge_expired(processing_time())
        kinds = {**store.restored_kinds, **self._context._kinds}
        if not self._watermark_per_key_group:
            return store.snapshot(kinds, self._timers, self._ptimers)
        owned: range | tuple[()] = ()
        if self.watermark > MIN_WATERMARK:
            # v4: every owned key group carries the watermark, so
            # that it survives a restore at any parallelism.
            ctx = self.ctx
            owned = key_group_range(
                int(ctx.get("subtask_index", 0)),
                int(ctx.get("parallelism", 1)),
                int(ctx.get("max_parallelism", 128)),
            )
        return store.snapshot(kinds, self._timers, self._ptimers, self.watermark, owned)

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
                self._store.spread(int(group), values)
            return
        if not isinstance(data, dict):
            raise TypeError(f"keyed state must be {{key_group: bytes}}, got {type(data).__name__}")
        for group, blob in data.items():
            if b"_Expiring" in blob:
                # State with a ttl (its class's name is in the pickle).
                self._ttl_restored = self._context._ttl_seen = True
            watermark = self._store.restore_group(int(group), blob, self._timers, self._ptimers)
            if watermark is not None:
                self.watermark = max(self.watermark, watermark)

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
