"""The executor of a :class:`~eddyline.sinks.TwoPhaseCommitSink` (FLIP-147 final checkpoints, 2PC).

Transactions are pre-committed on a checkpoint's barrier and committed when
the checkpoint completes (DESIGN.md "Checkpoints"); pending transactions are
operator state as a list of entries, so a restore at another parallelism
deals them to the new subtasks.

A pending transaction is pickled with protocol 5: its large immutable buffers
(the Arrow buffers of the batches it holds, read-only numpy views of them) go out of band and
are handed to the engine by reference, without a copy; a checkpoint writer
thread concatenates them into the entry off the task thread and without the GIL
(python/src/entries.rs). Entry layout (little-endian u64 words):
``"EDPKL5B1"`` | buffer count n | pickle length | n buffer lengths | the pickle |
the n buffers, each part zero-padded to a multiple of 8 bytes. An entry without
the magic is a plain pickle (every transaction without such buffers, and
checkpoints written before this layout).
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, ClassVar

import pyarrow as pa

from ..errors import CheckpointError
from ..user_api import TwoPhaseCommitSink
from .base import Runner, RunnerOutput, State
from .user_code import call_user

END_OF_JOB = 2**64 - 1
"""The pseudo-checkpoint that commits everything when a job runs without checkpointing."""

_OUT_OF_BAND = b"EDPKL5B1"
_MIN_OUT_OF_BAND = 4096
"""Smaller buffers stay in the pickle: a part per tiny buffer costs more than its copy."""


def _pad(n: int) -> int:
    return -n % 8


def _immutable_arrow(obj: object) -> bool:
    """An Arrow buffer (not a resizable one): pyarrow exports them writable, but the
    buffers of Arrow arrays and batches never change (Arrow's immutability contract)."""
    return isinstance(obj, pa.Buffer) and not isinstance(obj, pa.ResizableBuffer)


def encode_pending(checkpoint_id: int, txn: Any) -> bytes | tuple[bytes | memoryview, ...]:
    """One pending transaction as a state entry: ``bytes``, or the parts of one
    (read-only buffers by reference) when it holds large read-only buffers."""
    buffers: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: pickle copies it in band
            return True
        if raw.nbytes >= _MIN_OUT_OF_BAND and (raw.readonly or _immutable_arrow(raw.obj)):
            buffers.append(raw if raw.readonly else raw.toreadonly())
            return False
        # A writable buffer may change after the snapshot: copied now, in band.
        return True

    data = pickle.dumps((checkpoint_id, txn), protocol=5, buffer_callback=out_of_band)
    if not buffers:
        return data
    head = struct.pack(
        f"<8sQQ{len(buffers)}Q", _OUT_OF_BAND, len(buffers), len(data), *(b.nbytes for b in buffers)
    )
    parts: list[bytes | memoryview] = [head, data]
    if _pad(len(data)):
        parts.append(bytes(_pad(len(data))))
    for b in buffers:
        parts.append(b)
        if _pad(b.nbytes):
            parts.append(bytes(_pad(b.nbytes)))
    return tuple(parts)


def decode_pending(operator: str, entry: bytes | bytearray | memoryview) -> tuple[int, Any]:
    """Reads an entry :func:`encode_pending` wrote (or a plain pickle)."""
    view = memoryview(entry)
    if view[:8] != _OUT_OF_BAND:
        return pickle.loads(view)  # type: ignore[no-any-return]
    try:
        n, length = struct.unpack_from("<QQ", view, 8)
        lengths = struct.unpack_from(f"<{n}Q", view, 24)
        at = 24 + 8 * n
        data = view[at : at + length]
        at += length + _pad(length)
        buffers = []
        for size in lengths:
            buffers.append(view[at : at + size])
            at += size + _pad(size)
    except struct.error as e:
        raise CheckpointError(
            f"operator '{operator}': a pending transaction in the checkpoint is truncated: {e}"
        ) from e
    if at != len(view) or len(data) != length:
        raise CheckpointError(
            f"operator '{operator}': a pending transaction in the checkpoint has "
            f"{len(view)} bytes, its header describes {at}"
        )
    return pickle.loads(data, buffers=buffers)  # type: ignore[no-any-return]


class TwoPhaseCommitRunner(Runner):
    """Drives a :class:`~eddyline.sinks.TwoPhaseCommitSink`.

    A transaction is open at all times. On a checkpoint it is pre-committed
    and remembered as pending, and a new one begins; pending transactions
    commit when their checkpoint completes (and, on restore, again: commit is
    idempotent). After the end of the input, the final checkpoint (or, without
    checkpointing, the end-of-job pseudo-checkpoint ``END_OF_JOB``) pre-commits
    the open transaction and commits it; no transaction begins after it.

    The engine restores state before it opens an operator (Flink's
    ``initializeState`` before ``open``), but the sink's ``open`` comes
    before anything else it is asked to do: the restored transactions are
    committed again in :meth:`open`, right after the sink's own ``open``.
    """

    redistributable: ClassVar[bool] = True

    def __init__(self, node: str, sink: TwoPhaseCommitSink) -> None:
        self.name = node
        self._sink = sink
        self._txn: Any = None
        self._open = False
        self._opened = False
        self._finished = False
        self._pending: dict[int, Any] = {}
        self._restored: dict[int, Any] = {}

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        call_user(self.name, self._sink.open, ctx)
        self._opened = True
        self._commit_restored()
        self._begin()

    def _commit_restored(self) -> None:
        # Every pending transaction restored belongs to a completed checkpoint:
        # commit it (idempotent). At another parallelism each one was dealt to
        # exactly one subtask.
        restored, self._restored = self._restored, {}
        for checkpoint_id in sorted(restored):
            call_user(self.name, self._sink.commit, restored[checkpoint_id])

    def _begin(self) -> None:
        self._txn = call_user(self.name, self._sink.begin_transaction)
        self._open = True

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows:
            call_user(self.name, self._sink.write, self._txn, batch)
        return None

    def snapshot(self, checkpoint_id: int) -> State | None:
        if self._open:
            call_user(self.name, self._sink.on_checkpoint, self._txn, checkpoint_id)
            call_user(self.name, self._sink.pre_commit, self._txn)
            self._pending[checkpoint_id] = self._txn
            self._open = False
            if checkpoint_id != END_OF_JOB and not self._finished:
                self._begin()
        return [
            encode_pending(checkpoint, txn)
            for checkpoint, txn in sorted(self._pending.items(), key=lambda item: item[0])
        ]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for done in sorted(c for c in self._pending if c <= checkpoint_id):
            call_user(self.name, self._sink.commit, self._pending.pop(done))

    def restore(self, data: State) -> None:
        # The transactions are committed once the sink is open.
        if isinstance(data, list):
            pending: dict[int, Any] = {}
            for entry in data:
                if not isinstance(entry, bytes | bytearray | memoryview):
                    raise TypeError(
                        f"operator '{self.name}': a pending transaction restored is "
                        f"{type(entry).__name__}, not bytes"
                    )
                checkpoint, txn = decode_pending(self.name, entry)
                pending[checkpoint] = txn
        elif isinstance(data, bytes | bytearray | memoryview):
            pending = pickle.loads(data)  # a checkpoint written before entry lists
        else:
            raise TypeError(
                f"operator '{self.name}': a two-phase-commit sink has operator state "
                f"(a list of bytes), got {type(data).__name__}"
            )
        self._restored.update(pending)
        if self._opened:
            self._commit_restored()

    def finish(self) -> RunnerOutput:
        # Nothing commits here: only a completed checkpoint may commit.
        self._finished = True
        return None

    def close(self) -> None:
        try:
            if self._open:
                self._open = False
                call_user(self.name, self._sink.abort, self._txn)
        finally:
            call_user(self.name, self._sink.close)
