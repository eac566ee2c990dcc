"""The types user code implements or is handed, below the DSL and the executors.

:class:`TimeWindow` (the window a window function is given), :class:`OutputTag`
(a side output's name), :class:`Sink` and :class:`TwoPhaseCommitSink` (the sink
API users implement). They are public as ``ed.TimeWindow``, ``ed.OutputTag``,
``ed.TwoPhaseCommitSink`` and from :mod:`eddyline.windows` and
:mod:`eddyline.sinks`, whose names they keep (``__module__``), so pickles name
the same place whichever way they were imported. Defining them here lets the
executors (``_exec``) and the user-function API use them without importing
the DSL (docs/ARCHITECTURE.md, "Keeping the layers apart").
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pyarrow as pa

__all__ = ["OutputTag", "Sink", "TimeWindow", "TwoPhaseCommitSink"]


class TimeWindow(NamedTuple):
    """One event-time window ``[start, end)`` in milliseconds since the epoch.

    Example:
        >>> w = TimeWindow(0, 10)
        >>> w.max_timestamp, 9 in w, 10 in w
        (9, True, False)
    """

    start: int
    end: int

    @property
    def max_timestamp(self) -> int:
        """The window's last millisecond (it fires once the watermark reaches it)."""
        return self.end - 1

    def __contains__(self, timestamp: object) -> bool:
        return isinstance(timestamp, int) and self.start <= timestamp < self.end

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


class OutputTag:
    """Names a side output of an operator (Flink's ``OutputTag``).

    Give it to :meth:`KeyedStream.window` as ``late_output`` to receive the
    window's late records, or emit rows to it from a keyed
    :class:`~eddyline.ProcessFunction` with ``ctx.output(tag, row)``; read them
    with :meth:`DataStream.side_output`. ``schema`` is the rows' schema for a
    process function's side output (inferred from the first rows when not
    given). Tags are equal when their names are.

    Example:
        >>> import eddyline as ed
        >>> ed.OutputTag("late")
        OutputTag('late')
    """

    __slots__ = ("_name", "_schema")

    def __init__(self, name: str, schema: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"OutputTag() needs a non-empty str name, got {name!r}")
        self._name = name
        if schema is not None:
            import pyarrow as pa

            from ._checks import as_schema

            schema = as_schema(schema, f"OutputTag({name!r})")
            assert isinstance(schema, pa.Schema)
        self._schema = schema

    @property
    def name(self) -> str:
        """The tag's name."""
        return self._name

    @property
    def schema(self) -> Any:
        """The side output's ``pyarrow.Schema`` if given, else ``None``."""
        return self._schema

    def __repr__(self) -> str:
        return f"OutputTag({self._name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other._name == self._name

    def __hash__(self) -> int:
        return hash((OutputTag, self._name))


class Sink:
    """Marker base class of everything :meth:`DataStream.sink_to` accepts."""


class TwoPhaseCommitSink(Sink):
    """Base class of exactly-once sinks with transactions.

    Subclass it and implement the five methods. Each parallel instance of the
    sink gets its own copy of the object. The engine begins a transaction,
    writes batches into it, pre-commits it when a checkpoint is taken (or the
    input ends) and commits it when that checkpoint completes. ``commit``
    must be idempotent: after a failure a pre-committed transaction may be
    committed again. Transactions must be picklable (they are checkpointed).
    Large read-only buffers a transaction holds (the Arrow buffers of batches,
    read-only numpy views of them) are written to the checkpoint by reference,
    without a copy, shortly after the snapshot; writable ones are copied.

    Example:
        >>> class ListSink(TwoPhaseCommitSink):
        ...     def __init__(self):
        ...         self.committed = []
        ...     def begin_transaction(self):
        ...         return []
        ...     def write(self, txn, batch):
        ...         txn.append(batch)
        ...     def pre_commit(self, txn):
        ...         pass
        ...     def commit(self, txn):
        ...         self.committed.extend(txn)
        ...     def abort(self, txn):
        ...         txn.clear()
    """

    def open(self, ctx: dict[str, Any]) -> None:
        """Optional hook: called once per parallel instance before anything else.

        After a failure, the transactions of the checkpoint the job restarts
        from are committed again only after ``open`` returned.

        Args:
            ctx: ``{"name", "subtask_index", "parallelism", "max_parallelism", "attempt"}``.
        """

    def begin_transaction(self) -> Any:
        """Starts a transaction and returns it."""
        raise NotImplementedError

    def write(self, txn: Any, batch: pa.RecordBatch) -> None:
        """Writes one batch into the transaction."""
        raise NotImplementedError

    def on_checkpoint(self, txn: Any, checkpoint_id: int) -> None:
        """Optional hook: ``txn`` is about to be pre-committed for ``checkpoint_id``.

        Called right before :meth:`pre_commit`; the transaction commits when
        that checkpoint completes. Without checkpointing, the id is the
        end-of-job pseudo-checkpoint ``2**64 - 1``.
        """

    def pre_commit(self, txn: Any) -> None:
        """Makes the transaction durable so that it can be committed later."""
        raise NotImplementedError

    def commit(self, txn: Any) -> None:
        """Makes the transaction visible. Must be idempotent."""
        raise NotImplementedError

    def abort(self, txn: Any) -> None:
        """Discards the transaction."""
        raise NotImplementedError

    def close(self) -> None:
        """Optional hook: called once per parallel instance at the end."""


for _cls, _module in (
    (TimeWindow, "eddyline.windows"),
    (OutputTag, "eddyline.windows"),
    (Sink, "eddyline.sinks"),
    (TwoPhaseCommitSink, "eddyline.sinks"),
):
    _cls.__module__ = _module
