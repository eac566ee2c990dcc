"""User sources: :class:`Source`, read by ``env.from_source(source)``.

A source is a list of *splits* (files, partitions, log segments, ...); each
split is read from an *offset* that the source itself defines and reports.
The splits are dealt round-robin to the source's parallel subtasks; each
subtask reads its splits one after the other. The offsets are checkpointed,
so after a failure every split is read again from where the last completed
checkpoint left it: a source whose ``read`` returns the same rows for the same
``(split, offset)`` is replayed exactly once.

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


class SourceSubtaskReader:
    """One subtask's reader over its share of a :class:`Source`'s splits.

    The binding calls :meth:`poll` (a batch, ``None`` for "nothing yet" or
    ``False`` for "exhausted"), :meth:`offset` (bytes) and :meth:`seek`.
    """

    def __init__(
        self, source: Source, operator: str, subtask: int, parallelism: int, batch_size: int
    ) -> None:
        self._source = source
        self._operator = operator
        self._schema = source.schema()
        self._splits = [s for i, s in enumerate(source.splits()) if i % parallelism == subtask]
        self._batch_size = batch_size
        self._index = 0
        self._offset: Any = source.initial_offset(self._splits[0]) if self._splits else None

    def poll(self) -> pa.RecordBatch | bool | None:
        while self._index < len(self._splits):
            split = self._splits[self._index]
            result = self._source.read(split, self._offset, self._batch_size)
            if result is None:
                self._index += 1
                if self._index < len(self._splits):
                    self._offset = self._source.initial_offset(self._splits[self._index])
                continue
            batch, next_offset = result
            if batch is None:
                return None
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
            self._offset = next_offset
            if batch.num_rows == 0:
                continue
            return batch
        self._source.close()
        return False

    def offset(self) -> bytes:
        return pickle.dumps((self._index, self._offset), protocol=pickle.HIGHEST_PROTOCOL)

    def seek(self, data: bytes) -> None:
        index, offset = pickle.loads(data)
        if index > len(self._splits):
            raise CheckpointError(
                f"source '{self._operator}' has {len(self._splits)} splits in this subtask, "
                f"fewer than its checkpointed split index {index}",
                operator=self._operator,
            )
        self._index, self._offset = index, offset


class SourceReaderFactory:
    """The picklable ``make_reader(subtask, parallelism, batch_size)`` of a Python source node."""

    def __init__(self, source: Source, operator: str) -> None:
        self.source = source
        self.operator = operator

    def __call__(self, subtask: int, parallelism: int, batch_size: int) -> SourceSubtaskReader:
        from ._runners import private_copy

        return SourceSubtaskReader(
            private_copy(self.source), self.operator, subtask, parallelism, batch_size
        )
