"""The executor protocol: what the Rust operator of a ``python`` node calls.

The binding (``python/src/udf.rs``) creates one :class:`Runner` per parallel
subtask by calling the node's :class:`~eddyline._exec.factory.RunnerFactory`,
then calls :meth:`~Runner.open`, :meth:`~Runner.process` (once per batch,
with the GIL held for the whole batch), :meth:`~Runner.finish`,
:meth:`~Runner.snapshot`/:meth:`~Runner.restore`/
:meth:`~Runner.notify_checkpoint_complete` and :meth:`~Runner.close`.
:meth:`~Runner.on_watermark` (when the input watermark advances, before it
is forwarded; ``2**63 - 1`` ends event time) and :meth:`~Runner.end_input`
(when one input ended) are called only for runner classes that override
them, and :attr:`~Runner.late_records` is read after each batch only for
classes with :attr:`~Runner.counts_late_records`: the factory reports these
class flags once, when the graph is built.

A runner returns ``None``, a batch or a list of batches; an item
``(port, batch)`` emits on an output port instead of port 0 (a window's late
records go to port 1, its side output). Stopping a job with a savepoint
without draining calls neither ``finish`` nor ``on_watermark`` with the
maximum watermark. The checkpoint hooks follow DESIGN.md "Checkpointing"
(ABS barriers), FLIP-147 (redistributable operator state) and FLINK-4120
(recomputable state).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, TypeAlias

import pyarrow as pa

PortBatch: TypeAlias = tuple[int, pa.RecordBatch]
"""A batch for output port ``port`` (a side output), as ``(port, batch)``."""
RunnerOutput: TypeAlias = (
    pa.RecordBatch | PortBatch | list[pa.RecordBatch] | list[pa.RecordBatch | PortBatch] | None
)
State: TypeAlias = (
    bytes | list[bytes] | list[bytes | tuple[bytes | memoryview, ...]] | dict[int, bytes]
)
"""A runner's checkpointed state: operator state (``bytes``, or a list of
independent entries that a restore at another parallelism deals to the new
subtasks), or keyed state (one blob per key group, ``{key_group: bytes}``)."""


class Runner:
    """Base of every executor of user functions: no-op lifecycle, no state.

    Subclasses implement :meth:`process`. FLINK-4120: a runner class whose
    ``recomputable`` is true (or whose :meth:`recomputable_for` says so for
    its arguments) persists no state with
    ``CheckpointConfig(recovery="recompute")``; it reports
    :meth:`null_state_watermark` with every checkpoint and hears of every
    barrier (also replayed ones) through :meth:`on_barrier`.
    """

    name: str = "python"
    ctx: Mapping[str, Any] = MappingProxyType({})
    """The subtask's context given to :meth:`open` (empty before)."""
    late_records: int = 0
    """A running count of dropped late records, reported as a metric."""
    input_rows: int | None = None
    """How many rows the job's bounded sources upstream of the operator read in all
    (every subtask's share together), or ``None`` when one of them is unbounded or of
    unknown size, or the operator is in a loop. Set by the factory; a hint, not a
    bound (filters drop rows, ``flat_map`` adds some): per-record runners start their
    worker processes at once when it says the job is long (``pool.start_due``)."""
    # True only for stateless runners: a replay from any earlier checkpoint
    # rebuilds their (empty) state; keyed process functions start exactly
    # at their null-state watermark.
    recomputable: ClassVar[bool] = False
    # True for runners whose operator state is a list of entries that any
    # subtask can restore (FLIP-147: dealt round-robin to the subtasks of a
    # restore at another parallelism). Other operator state stays with its
    # subtask, and such a restore is refused with a CheckpointError.
    redistributable: ClassVar[bool] = False
    # True for runners with broadcast state: subtask 0 writes it (bytes) and
    # every subtask of any restore gets that copy.
    broadcast_state: ClassVar[bool] = False
    # True for runners whose operator state is a list of entries that every
    # subtask of a restore at another parallelism gets all of (Flink's union
    # list state; the engine's Redistribution::Union): a keyed process
    # function's watermark, one entry per subtask (docs/DESIGN.md "Keyed state
    # layer").
    union_state: ClassVar[bool] = False
    counts_late_records: ClassVar[bool] = False
    """Whether :attr:`late_records` is kept (read by the binding after each batch)."""
    passes_source_progress: ClassVar[bool] = False
    """Whether the runner emits what it makes of a batch in the :meth:`process` call
    that got it, and only there (nothing from :meth:`on_watermark`, timers,
    :meth:`end_input` or :meth:`finish`): the rows of one batch, in batch order. The
    binding then passes the source's progress on, so an ``assign_timestamps`` chained
    behind the runner still knows the split of every batch and keeps one watermark per
    split (docs/DESIGN.md "Event time per split")."""
    handles_watermarks: ClassVar[bool] = False
    """Whether the class overrides :meth:`on_watermark` (set for every subclass)."""
    handles_end_input: ClassVar[bool] = False
    """Whether the class overrides :meth:`end_input` (set for every subclass)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.handles_watermarks = cls.on_watermark is not Runner.on_watermark
        cls.handles_end_input = cls.end_input is not Runner.end_input

    @classmethod
    def processing_time_for(cls, *args: Any) -> bool:
        """Whether a runner built from ``args`` has processing-time timers."""
        return False

    def processing_timer(self) -> tuple[int, int] | None:
        """``(due, now)`` of the next processing-time timer by the runner's clock (ms)."""
        return None

    def on_processing_time(self) -> RunnerOutput:
        """Fires the processing-time timers that are due; returns what they emit."""
        return None

    @classmethod
    def recomputable_for(cls, *args: Any) -> bool:
        """Whether a runner built from ``args`` can rebuild its state by replay."""
        return cls.recomputable

    def null_state_watermark(self, checkpoint_id: int) -> int | None:
        """The earliest checkpoint its state can be rebuilt from (stateless: this one)."""
        return checkpoint_id

    def on_barrier(self, checkpoint_id: int) -> None:
        """The barrier of checkpoint ``checkpoint_id`` passed (also when replayed)."""

    def open(self, ctx: dict[str, Any]) -> None:
        """Called once per subtask before any batch, after :meth:`restore` (if any)."""
        self.ctx = ctx

    def agree_schema(self, schema: pa.Schema) -> pa.Schema:
        """The operator's output schema, given the one this subtask inferred.

        One operator has one schema (DESIGN.md "One schema per operator"): the
        first subtask to infer one fixes it for all, and a restore keeps it. The
        engine's ``ctx["agree_schema"]`` answers; without it (a runner used on its
        own, or in a pool worker) ``schema`` is the answer. Called for a subtask's
        first output only: in a worker process it waits for the driver.
        """
        agree = self.ctx.get("agree_schema")
        return schema if agree is None else agree(schema)

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        """Handles one input batch; returns the output batches.

        ``key_groups`` holds each row's key group for a keyed runner (computed
        by the binding with the engine's key hash), else ``None``.
        """
        raise NotImplementedError

    def on_watermark(self, watermark: int) -> RunnerOutput:
        """The input watermark advanced to ``watermark``; returns what fires."""
        return None

    def end_input(self, input: int) -> RunnerOutput:
        """Input ``input`` ended; returns final output for it."""
        return None

    def finish(self) -> RunnerOutput:
        """Called once when all inputs have ended; returns final output."""
        return None

    def snapshot(self, checkpoint_id: int) -> State | None:
        """Returns the state for checkpoint ``checkpoint_id``.

        ``bytes`` is operator state (restored into the same subtask index);
        ``list[bytes]`` is operator state as independent entries (runners with
        ``redistributable``: at another parallelism each entry goes to one new
        subtask); ``{key_group: bytes}`` is keyed state, redistributed by key
        group, so that it can be restored at another parallelism. ``None``: no
        state.
        """
        return None

    def restore(self, data: State) -> None:
        """Restores state written by :meth:`snapshot`.

        Keyed state arrives as ``{key_group: bytes}`` holding only the key
        groups this subtask owns now; entry lists as ``list[bytes]``, the
        entries dealt to this subtask.
        """

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Called when checkpoint ``checkpoint_id`` has completed."""

    def close(self) -> None:
        """Called once per subtask at the end, also after failures."""
