"""User sources: :class:`Source`, read by ``env.from_source(source)``.

A source is a list of *splits* (files, partitions, log segments, ...); each
split is read from an *offset* that the source itself defines and reports.
The splits are dealt round-robin to the source's parallel subtasks; each
subtask reads its splits one after the other. The offsets are checkpointed,
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


class SourceSubtaskReader:
    """One subtask's reader over its share of a :class:`Source`'s splits.

    The binding calls :meth:`poll` (a batch, ``None`` for "nothing yet" or
    ``False`` for "exhausted"), :meth:`entries` and :meth:`seek_entries`.

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
        # Indices into ``self._all`` of the splits to read, in order.
        self._queue = [i for i in range(len(self._all)) if i % parallelism == subtask]
        # Restored offsets of queued splits not started yet.
        self._restored: dict[int, Any] = {}
        self._batch_size = batch_size
        self._index = 0
        self._offset: Any = self._start(0)

    def _start(self, index: int) -> Any:
        if index >= len(self._queue):
            return None
        split = self._queue[index]
        if split in self._restored:
            return self._restored.pop(split)
        return self._source.initial_offset(self._all[split])

    def poll(self) -> pa.RecordBatch | bool | None:
        while self._index < len(self._queue):
            split = self._all[self._queue[self._index]]
            result = self._source.read(split, self._offset, self._batch_size)
            if result is None:
                self._index += 1
                self._offset = self._start(self._index)
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

    def entries(self) -> list[bytes]:
        """One ``pickle((split index, offset))`` per split not read to its end."""
        out = []
        for pos in range(self._index, len(self._queue)):
            split = self._queue[pos]
            if pos == self._index:
                offset = self._offset
            elif split in self._restored:
                offset = self._restored[split]
            else:
                offset = self._source.initial_offset(self._all[split])
            out.append(pickle.dumps((split, offset), protocol=pickle.HIGHEST_PROTOCOL))
        return out

    def seek_entries(self, entries: list[bytes]) -> None:
        """Reads exactly the splits of ``entries``, each from its offset."""
        queue: list[int] = []
        restored: dict[int, Any] = {}
        for data in entries:
            split, offset = pickle.loads(data)
            if not isinstance(split, int) or not 0 <= split < len(self._all):
                raise CheckpointError(
                    f"source '{self._operator}' has {len(self._all)} splits, but its checkpoint "
                    f"holds an offset of split {split!r}",
                    operator=self._operator,
                )
            queue.append(split)
            restored[split] = offset
        self._queue, self._restored, self._index = queue, restored, 0
        self._offset = self._start(0)

    def offset(self) -> bytes:
        """The offset format of older checkpoints (kept for :meth:`seek`)."""
        return pickle.dumps((self._index, self._offset), protocol=pickle.HIGHEST_PROTOCOL)

    def seek(self, data: bytes) -> None:
        """Restores an offset of an older checkpoint (this subtask's own splits)."""
        index, offset = pickle.loads(data)
        if index > len(self._queue):
            raise CheckpointError(
                f"source '{self._operator}' has {len(self._queue)} splits in this subtask, "
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
            private_copy(self.source, self.operator),
            self.operator,
            subtask,
            parallelism,
            batch_size,
        )
