"""User sources: :class:`Source`, read by ``env.from_source(source)``.

A source is a list of *splits* (files, partitions, log segments, ...); each
split is read from an *offset* that the source itself defines and reports.
The splits are dealt round-robin to the source's parallel subtasks; each
subtask reads its splits interleaved, a batch of each in turn, so every split
makes progress (also when all are unbounded) and event time advances per
split (FLIP-27: ``assign_timestamps`` right after the source keeps one
watermark per split and emits their minimum). The offsets are checkpointed,
so after a failure every split is read again from where the last completed
checkpoint left it: a source whose ``read`` returns the same rows for the same
``(split, offset)`` is replayed exactly once. A checkpoint records the offset
of every split not yet read to its end, so a job can be restored at another
parallelism: the splits left over are dealt to the new subtasks.

Example:
    >>> import pyarrow as pa
    >>> import eddyline as ed
    >>> class Countdown(ed.Source):
    ...     def schema(self):
    ...         return pa.schema([("n", pa.int64())])
    ...     def splits(self):
    ...         return [3, 5]                      # two splits: count down from 3 and 5
    ...     def initial_offset(self, split):
    ...         return split
    ...     def read(self, split, offset, max_rows):
    ...         if offset == 0:
    ...             return None                     # this split is exhausted
    ...         batch = pa.record_batch([pa.array([offset], pa.int64())], names=["n"])
    ...         return batch, offset - 1
    >>> env = ed.StreamEnvironment()
    >>> env.from_source(Countdown()).schema
    n: int64
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from .errors import CheckpointError, SchemaError

__all__ = ["Source"]


class Source:
    """Base class of replayable user sources (``env.from_source(source)``).

    Implement :meth:`schema` and :meth:`read`; override :meth:`splits` and
    :meth:`initial_offset` when the source has several splits or does not
    start at offset ``0``. Offsets and splits must be picklable. Every
    parallel subtask gets its own copy of the source object.
    """

    def schema(self) -> pa.Schema:
        """The schema of every batch the source returns."""
        raise NotImplementedError

    def splits(self) -> Sequence[Any]:
        """The splits to read (default: one split, ``None``)."""
        return [None]

    def initial_offset(self, split: Any) -> Any:
        """Where reading ``split`` starts in a fresh job (default ``0``)."""
        return 0

    def read(
        self, split: Any, offset: Any, max_rows: int
    ) -> tuple[pa.RecordBatch | None, Any] | None:
        """Reads from ``split`` at ``offset``.

        Args:
            split: One of :meth:`splits`.
            offset: Where to read: the initial offset or one this method returned.
            max_rows: The preferred maximum batch size (the environment's ``batch_size``).

        Returns:
            ``(batch, next_offset)`` with the next rows, ``(None, offset)`` when
            nothing is available yet (an unbounded split; the engine asks again
            soon), or ``None`` when the split is exhausted.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Optional hook: called when a subtask stops reading (not guaranteed on a crash)."""


_INITIAL = object()
"""Marks a split that starts at its :meth:`Source.initial_offset`."""


class SourceSubtaskReader:
    """One subtask's reader over its share of a :class:`Source`'s splits.

    The splits are read interleaved (DESIGN.md "Event time per split"): each
    :meth:`poll` asks the next open split in turn, skipping splits that have
    nothing now, and returns ``(batch, split index, open)`` where ``open`` is
    the tuple of open split indices when it changed since the last answer
    (else ``None``); ``None`` when no split has anything now (``(None, None,
    open)`` if the open splits changed meanwhile) and ``False`` when every
    split is exhausted. The binding also calls :meth:`open_splits`,
    :meth:`entries` and :meth:`seek_entries`.

    Its checkpointed offset is a list of entries, one per split it has not
    read to its end, each ``pickle((split index, offset))`` with the split's
    position in :meth:`Source.splits`: any subtask can continue any split, so
    when a job is restored at another parallelism the splits left over are
    dealt to the new subtasks (FLIP-147), and splits that were read to their
    end are not read again. :meth:`seek` still takes the offset of older
    checkpoints (``pickle((position among this subtask's splits, offset))``).
    """

    def __init__(
        self, source: Source, operator: str, subtask: int, parallelism: int, batch_size: int
    ) -> None:
        self._source = source
        self._operator = operator
        self._schema = source.schema()
        self._all = list(source.splits())
        self._batch_size = batch_size
        # The subtask's own splits of a fresh start (for older offsets).
        self._own = [i for i in range(len(self._all)) if i % parallelism == subtask]
        self._set_open(dict.fromkeys(self._own, _INITIAL))

    def _set_open(self, offsets: dict[int, Any]) -> None:
        """Reads the splits of ``offsets`` (index -> offset or ``_INITIAL``)."""
        self._open: list[int] = list(offsets)
        self._offsets: dict[int, Any] = {
            i: self._source.initial_offset(self._all[i]) if o is _INITIAL else o
            for i, o in offsets.items()
        }
        self._cursor = 0
        self._changed = True

    def _open_if_changed(self) -> tuple[int, ...] | None:
        if not self._changed:
            return None
        self._changed = False
        return tuple(self._open)

    def open_splits(self) -> list[int]:
        """The indices (in :meth:`Source.splits`) of the splits not read to their end."""
        return list(self._open)

    def poll(
        self,
    ) -> tuple[pa.RecordBatch | None, int | None, tuple[int, ...] | None] | bool | None:
        quiet = 0  # splits in a row that had nothing
        while self._open:
            if quiet >= len(self._open):
                opened = self._open_if_changed()
                return None if opened is None else (None, None, opened)
            pos = self._cursor % len(self._open)
            index = self._open[pos]
            result = self._source.read(self._all[index], self._offsets[index], self._batch_size)
            if result is None:
                # Exhausted: the split leaves; the next one moves up to ``pos``.
                del self._open[pos]
                del self._offsets[index]
                self._cursor = pos
                self._changed = True
                continue
            self._cursor = pos + 1
            batch, next_offset = result
            if batch is None:
                quiet += 1
                continue
            if not isinstance(batch, pa.RecordBatch):
                raise SchemaError(
                    f"source '{self._operator}' returned {type(batch).__name__} from read(), "
                    "not a pyarrow.RecordBatch",
                    operator=self._operator,
                )
            if not batch.schema.equals(self._schema):
                raise SchemaError(
                    f"source '{self._operator}' returned a batch with schema\n{batch.schema}\n"
                    f"but declared\n{self._schema}",
                    operator=self._operator,
                )
            self._offsets[index] = next_offset
            if batch.num_rows == 0:
                continue  # progress without rows (e.g. the end of a file): read on
            return batch, index, self._open_if_changed()
        self._source.close()
        return False

    def entries(self) -> list[bytes]:
        """One ``pickle((split index, offset))`` per split not read to its end."""
        return [
            pickle.dumps((index, self._offsets[index]), protocol=pickle.HIGHEST_PROTOCOL)
            for index in self._open
        ]

    def seek_entries(self, entries: list[bytes]) -> None:
        """Reads exactly the splits of ``entries``, each from its offset."""
        offsets: dict[int, Any] = {}
        for data in entries:
            split, offset = pickle.loads(data)
            if not isinstance(split, int) or not 0 <= split < len(self._all):
                raise CheckpointError(
                    f"source '{self._operator}' has {len(self._all)} splits, but its checkpoint "
                    f"holds an offset of split {split!r}",
                    operator=self._operator,
                )
            offsets[split] = offset
        self._set_open(offsets)

    def seek(self, data: bytes) -> None:
        """Restores an offset of an older checkpoint (this subtask's own splits).

        The splits before the checkpointed one had been read to their end.
        """
        index, offset = pickle.loads(data)
        if index > len(self._own):
            raise CheckpointError(
                f"source '{self._operator}' has {len(self._own)} splits in this subtask, "
                f"fewer than its checkpointed split index {index}",
                operator=self._operator,
            )
        left: dict[int, Any] = dict.fromkeys(self._own[index:], _INITIAL)
        if left:
            left[self._own[index]] = offset
        self._set_open(left)


class SourceReaderFactory:
    """The picklable ``make_reader(subtask, parallelism, batch_size)`` of a Python source node."""

    def __init__(self, source: Source, operator: str) -> None:
        self.source = source
        self.operator = operator

    def __call__(self, subtask: int, parallelism: int, batch_size: int) -> SourceSubtaskReader:
        from ._exec.factory import private_copy

        return SourceSubtaskReader(
            private_copy(self.source, self.operator),
            self.operator,
            subtask,
            parallelism,
            batch_size,
        )
