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

A source whose splits grow while it runs (Kafka partitions added to a topic)
sets :attr:`Source.discovery_interval` and names each split by a stable
:meth:`Source.split_id`: split ``i`` is read by subtask ``i % parallelism``,
:meth:`Source.splits` is asked again every ``discovery_interval`` seconds,
and its checkpoint holds every owned split (finished ones too), so a split in
no checkpoint entry is one found later and is read from
:meth:`Source.discovered_offset`. Such a checkpoint is restored by union (every
subtask sees every entry and keeps the splits it owns now). Such a source may
also be :attr:`Source.bounded` (Kafka with ``stopping_offsets``): it looks for
splits only when it starts or is restored and ends when its splits are read to
their end. Bounded or not, its checkpoints have one form, so a job can be
restored bounded from the checkpoint of an unbounded run and back.

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
import time
from collections.abc import Callable, Sequence
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

    discovery_interval: float | None = None
    """Seconds between calls of :meth:`splits` while running, to pick up new
    splits (e.g. partitions added to a topic); ``None`` (default): the splits
    are fixed when the job starts. A source that sets it names each split by
    :meth:`split_id`; a split with id ``i`` is read by subtask
    ``i % parallelism`` (also after a restore at another parallelism), and a
    split that appears while running, or since the checkpoint a job is
    restored from, is read from :meth:`discovered_offset`."""

    bounded: bool = False
    """Only with :attr:`discovery_interval`: the source ends. Its splits are
    listed when a job starts or is restored (never every
    ``discovery_interval``), and each subtask ends once its splits are read to
    their end. Its checkpoints take the same form as those of the unbounded
    source, so a job can be restored bounded from an unbounded run and back;
    a split it read to its end keeps its last offset in them, and after a
    restore :meth:`read` is asked again from there (a restored job whose bound
    lies further on reads on; otherwise ``read`` answers ``None`` again)."""

    def split_id(self, split: Any) -> int:
        """A stable id of ``split`` in ``0 .. 2**63`` (sources with :attr:`discovery_interval`).

        It names the split in checkpoints and for per-split watermarks, so it
        must not depend on the order :meth:`splits` lists them in.
        """
        raise NotImplementedError(
            f"{type(self).__name__} sets discovery_interval but does not implement split_id()"
        )

    def discovered_offset(self, split: Any) -> Any:
        """Where reading a split found while running starts (default :meth:`initial_offset`)."""
        return self.initial_offset(split)

    def checkpoint_complete(self, offsets: dict[Any, Any]) -> None:
        """Optional hook: a checkpoint completed; ``offsets`` maps each split this
        subtask reads to its offset in that checkpoint. For side effects such as
        telling an external system how far the job got; never needed to restore.
        """


_INITIAL = object()
"""Marks a split that starts at its :meth:`Source.initial_offset`."""


class _Completions:
    """The offsets of the checkpoints taken and not yet completed, by id."""

    def __init__(self, source: Source) -> None:
        self._source = source
        self._pending: list[tuple[int, dict[Any, Any]]] = []
        # Only sources that override the hook pay for remembering offsets.
        self._wanted = type(source).checkpoint_complete is not Source.checkpoint_complete

    def taken(self, checkpoint_id: int, offsets: Callable[[], dict[Any, Any]]) -> None:
        if self._wanted:
            self._pending.append((checkpoint_id, offsets()))

    def complete(self, checkpoint_id: int) -> None:
        """Tells the source the newest offsets at or before ``checkpoint_id``."""
        done = [p for p in self._pending if p[0] <= checkpoint_id]
        if not done:
            return
        self._pending = [p for p in self._pending if p[0] > checkpoint_id]
        self._source.checkpoint_complete(done[-1][1])


class _InterleavedReads:
    """Reading a subtask's open splits in turn (DESIGN.md "Event time per split"),
    shared by :class:`SourceSubtaskReader` and :class:`DynamicReader`: both keep
    ``_open`` (split ids in reading order), ``_offsets``, ``_cursor`` and ``_changed``."""

    _source: Source
    _schema: pa.Schema
    _operator: str
    _batch_size: int
    _open: list[int]
    _offsets: dict[int, Any]
    _cursor: int
    _changed: bool

    def _read_open(self, split_of: Callable[[int], Any]) -> tuple[pa.RecordBatch, int] | None:
        """The next batch with rows of the open splits, read in turn from the cursor, and
        its split's id; ``None`` when every open split had nothing now (or none is open).
        An exhausted split leaves (the next one moves up to its place)."""
        quiet = 0  # splits in a row that had nothing
        while quiet < len(self._open):
            pos = self._cursor % len(self._open)
            sid = self._open[pos]
            result = self._source.read(split_of(sid), self._offsets[sid], self._batch_size)
            if result is None:
                del self._open[pos]
                self._ended(sid, self._offsets.pop(sid))
                self._cursor = pos
                self._changed = True
                continue
            self._cursor = pos + 1
            batch, next_offset = result
            if batch is None:
                quiet += 1
                continue
            _check_batch(batch, self._schema, self._operator)
            self._offsets[sid] = next_offset
            if batch.num_rows == 0:
                continue  # progress without rows (e.g. the end of a file): read on
            return batch, sid
        return None

    def _ended(self, sid: int, offset: Any) -> None:
        """Split ``sid`` was read to its end at ``offset``."""


class SourceSubtaskReader(_InterleavedReads):
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
        self._completions = _Completions(source)
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
        got = self._read_open(lambda index: self._all[index])
        if got is not None:
            return got[0], got[1], self._open_if_changed()
        if self._open:  # every open split had nothing now
            opened = self._open_if_changed()
            return None if opened is None else (None, None, opened)
        self._source.close()
        return False

    def entries(self, checkpoint_id: int | None = None) -> list[bytes]:
        """One ``pickle((split index, offset))`` per split not read to its end.

        With ``checkpoint_id`` (a checkpoint's snapshot) the offsets are also
        kept for :meth:`notify_checkpoint_complete`.
        """
        if checkpoint_id is not None:
            self._completions.taken(
                checkpoint_id, lambda: {self._all[i]: self._offsets[i] for i in self._open}
            )
        return [
            pickle.dumps((index, self._offsets[index]), protocol=pickle.HIGHEST_PROTOCOL)
            for index in self._open
        ]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: tells :meth:`Source.checkpoint_complete`."""
        self._completions.complete(checkpoint_id)

    def seek_entries(self, entries: list[bytes]) -> None:
        """Reads exactly the splits of ``entries``, each from its offset."""
        offsets: dict[int, Any] = {}
        for data in entries:
            entry = pickle.loads(data)
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise CheckpointError(
                    f"source '{self._operator}' has a fixed split list, but its checkpoint "
                    "holds the offsets of a source that discovers its splits",
                    operator=self._operator,
                )
            split, offset = entry
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


class DynamicReader(_InterleavedReads):
    """One subtask's reader of a source whose splits grow (:attr:`Source.discovery_interval`).

    It reads the splits whose :meth:`Source.split_id` ``i`` has ``i %
    parallelism == subtask``, interleaved like :class:`SourceSubtaskReader`,
    and asks :meth:`Source.splits` again every ``discovery_interval``
    seconds (by ``clock``). Its checkpointed offset is one entry
    ``pickle((id, split, offset, done))`` per split it owns, also those
    read to their end (``done``), so that a split in no entry is one found
    after the checkpoint. The binding restores these entries by union: every
    restored subtask sees all of them and keeps those it owns now.

    A :attr:`Source.bounded` source is listed only on start and restore, and
    its reader ends (``poll`` answers ``False``) once its splits are read to
    their end. The ``offset`` of its finished splits is the one ``read``
    ended at (an unbounded source's is ``None``: its ends do not move), and a
    restore reopens them there, so the restored job's bound decides whether
    they read on: both kinds restore each other's checkpoints.
    """

    def __init__(
        self,
        source: Source,
        operator: str,
        subtask: int,
        parallelism: int,
        batch_size: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._operator = operator
        self._subtask = subtask
        self._parallelism = parallelism
        self._schema = source.schema()
        self._batch_size = batch_size
        self._clock = clock
        self._bounded = bool(source.bounded)
        self._completions = _Completions(source)
        self._splits: dict[int, Any] = {}  # id -> split, of every owned split
        self._offsets: dict[int, Any] = {}  # id -> offset, of the open ones
        self._ends: dict[int, Any] = {}  # id -> last offset, of finished ones (bounded)
        self._open: list[int] = []
        self._cursor = 0
        self._changed = True
        for split in source.splits():
            self._add(split, source.initial_offset)
        self._next_discovery = clock() + float(source.discovery_interval or 0)

    def _id(self, split: Any) -> int:
        sid = self._source.split_id(split)
        if not isinstance(sid, int) or not 0 <= sid < 2**63:
            raise SchemaError(
                f"source '{self._operator}': split_id({split!r}) returned {sid!r}, "
                "not an int in 0 .. 2**63",
                operator=self._operator,
            )
        return sid

    def _add(self, split: Any, offset_of: Callable[[Any], Any]) -> None:
        sid = self._id(split)
        if sid % self._parallelism != self._subtask or sid in self._splits:
            return
        self._splits[sid] = split
        self._offsets[sid] = offset_of(split)
        self._open.append(sid)
        self._changed = True

    def _discover(self) -> None:
        for split in self._source.splits():
            self._add(split, self._source.discovered_offset)
        self._next_discovery = self._clock() + float(self._source.discovery_interval or 0)

    def _ended(self, sid: int, offset: Any) -> None:
        if self._bounded:
            self._ends[sid] = offset  # where a later, further bound reads on

    def open_splits(self) -> list[int]:
        """The ids of the splits this subtask reads and has not read to their end."""
        return list(self._open)

    def _open_if_changed(self) -> tuple[int, ...] | None:
        if not self._changed:
            return None
        self._changed = False
        return tuple(self._open)

    def poll(
        self,
    ) -> tuple[pa.RecordBatch | None, int | None, tuple[int, ...] | None] | bool | None:
        if not self._bounded and self._clock() >= self._next_discovery:
            self._discover()
        got = self._read_open(lambda sid: self._splits[sid])
        if got is not None:
            return got[0], got[1], self._open_if_changed()
        if self._bounded and not self._open:
            self._source.close()
            return False
        # Unbounded: more splits may appear, so an empty reader waits for them.
        opened = self._open_if_changed()
        return None if opened is None else (None, None, opened)

    def entries(self, checkpoint_id: int | None = None) -> list[bytes]:
        """One ``pickle((id, split, offset, done))`` per split this subtask owns."""
        if checkpoint_id is not None:
            self._completions.taken(
                checkpoint_id, lambda: {self._splits[i]: self._offsets[i] for i in self._open}
            )
        return [
            pickle.dumps(
                (
                    sid,
                    split,
                    self._offsets[sid] if sid in self._offsets else self._ends.get(sid),
                    sid not in self._offsets,
                ),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            for sid, split in self._splits.items()
        ]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: tells :meth:`Source.checkpoint_complete`."""
        self._completions.complete(checkpoint_id)

    def seek_entries(self, entries: list[bytes]) -> None:
        """Reads the owned splits of ``entries`` from their offsets, and every other
        owned split that :meth:`Source.splits` lists from its discovered offset.

        A finished split with an offset (one a bounded reader ended) is read
        again from it; one without stays finished.
        """
        self._splits, self._offsets, self._ends, self._open = {}, {}, {}, []
        decoded = [pickle.loads(data) for data in entries]
        if self._bounded and decoded and all(_fixed_entry(e) for e in decoded):
            self._seek_fixed(decoded)
            return
        for entry in decoded:
            if not (isinstance(entry, tuple) and len(entry) == 4):
                raise CheckpointError(
                    f"source '{self._operator}' discovers its splits, but its checkpoint "
                    "holds offsets of a source with a fixed split list (only a bounded "
                    "read, such as Kafka's with stopping_offsets, restores those)",
                    operator=self._operator,
                )
            sid, split, offset, done = entry
            if sid % self._parallelism != self._subtask:
                continue
            self._splits[sid] = split
            if not done or offset is not None:
                self._offsets[sid] = offset
                self._open.append(sid)
        self._cursor = 0
        self._changed = True
        self._discover()

    def _seek_fixed(self, entries: list[tuple[int, Any]]) -> None:
        """Restores the checkpoint of a bounded source that had a fixed split list
        (``(index in splits(), offset)`` per split left): the splits it does not
        name had been read to their end, and stay finished."""
        splits = list(self._source.splits())
        offsets = dict(entries)
        bad = [i for i in offsets if not 0 <= i < len(splits)]
        if bad:
            raise CheckpointError(
                f"source '{self._operator}' has {len(splits)} splits, but its checkpoint "
                f"holds an offset of split {bad[0]!r}",
                operator=self._operator,
            )
        for index, split in enumerate(splits):
            sid = self._id(split)
            if sid % self._parallelism != self._subtask:
                continue
            self._splits[sid] = split
            if index in offsets:
                self._offsets[sid] = offsets[index]
                self._open.append(sid)
        self._cursor = 0
        self._changed = True

    def seek(self, data: bytes) -> None:
        raise CheckpointError(
            f"source '{self._operator}' discovers its splits, but its checkpoint holds the "
            "offset of a source with a fixed split list",
            operator=self._operator,
        )


def _fixed_entry(entry: Any) -> bool:
    """``entry`` is ``(split index, offset)``, of a :class:`SourceSubtaskReader`."""
    return isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], int)


def _check_batch(batch: Any, schema: pa.Schema, operator: str) -> None:
    if not isinstance(batch, pa.RecordBatch):
        raise SchemaError(
            f"source '{operator}' returned {type(batch).__name__} from read(), "
            "not a pyarrow.RecordBatch",
            operator=operator,
        )
    if not batch.schema.equals(schema):
        raise SchemaError(
            f"source '{operator}' returned a batch with schema\n{batch.schema}\n"
            f"but declared\n{schema}",
            operator=operator,
        )


class SourceReaderFactory:
    """The picklable ``make_reader(subtask, parallelism, batch_size)`` of a Python source node."""

    def __init__(self, source: Source, operator: str) -> None:
        self.source = source
        self.operator = operator

    def __call__(
        self, subtask: int, parallelism: int, batch_size: int
    ) -> SourceSubtaskReader | DynamicReader:
        from ._exec.factory import private_copy

        reader = SourceSubtaskReader if self.source.discovery_interval is None else DynamicReader
        return reader(
            private_copy(self.source, self.operator),
            self.operator,
            subtask,
            parallelism,
            batch_size,
        )
