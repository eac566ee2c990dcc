"""Keyed process functions in Python worker processes (on ``pool.py``'s pool).

A per-record ``key_by(...).process(fn)`` is bound by one interpreter's GIL like
any per-record Python. Once ``pool.start_due`` (after
:data:`~eddyline._exec.pool.START_AFTER_ROWS` rows in-process, or sooner for a long
bounded input), a subtask hands its batches to its worker
processes (``pool.py``, DESIGN.md "Runtime"), dealt by key group
(``group % workers``): each worker runs the same
:class:`~eddyline._exec.process.KeyedProcessRunner` (opened with the subtask's
context, so ``open`` takes its state handles there) and holds the keyed state
(value, list and map state, with their ttl) of the key groups it owns, as a
Flink subtask holds the state of its key-group range.

- Order: a worker returns with its output the index of the input row of each
  output row; the outputs are put back in input order, so the operator's output
  is the same as in-process.
- Exactly-once: a batch is answered by every worker before ``process``
  returns, so a barrier finds nothing in flight; ``snapshot`` gathers each
  worker's key groups (the blobs of ``KeyedProcessRunner.snapshot``, unchanged
  key groups not pickled again), and a restore goes to the in-process runner,
  which hands each worker its key groups when the pool starts.
- Watermarks are forwarded to the workers (``ctx.current_watermark``), also
  when the pool starts; the watermark is checkpointed once per subtask by the
  in-process runner (its operator state), not in the workers' key groups.
- What stays in-process (decided when the operator opens, documented in
  docs/DESIGN.md "Runtime"): functions with timers (``on_timer``: their firing
  order across keys is global), side outputs, ``on_barrier`` /
  ``null_state_watermark`` (recompute recovery), ``end_input`` / ``finish``
  (they would not see what ``process_element`` kept in the function object),
  and the two-input and broadcast variants (``KeyedCoProcessRunner``,
  ``KeyedBroadcastProcessRunner``).
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import pyarrow as pa

from ..process_functions import MIN_WATERMARK
from .base import RunnerOutput
from .pool import (
    SNAPSHOT,
    STATE,
    WATERMARK,
    PoolUser,
    WorkerPool,
    run_keyed,
)

_IN_PROCESS_HOOKS = ("on_timer", "on_barrier", "null_state_watermark", "end_input", "finish")
"""ProcessFunction hooks that keep the operator in-process (see the module's docstring)."""


def worker_runner(cls: type, args: tuple[Any, ...], ctx: dict[str, Any], track: bool) -> Any:
    """Builds and opens the runner a worker process runs (``record_worker.py`` calls it).

    ``ctx`` is the subtask's open context; with ``track`` (several workers) the
    runner records the input row of each output row in ``first_rows``.
    """
    runner = cls(*args)
    runner.open(ctx)
    runner._pool_size = 0  # a worker never starts workers of its own
    runner.first_rows = [] if track else None
    return runner


class PooledProcess(PoolUser):
    """The worker-pool side of :class:`~eddyline._exec.process.KeyedProcessRunner`."""

    first_rows: list[int] | None
    """In a worker process of several: per output row of the last batch, its input row."""
    _pooled: bool
    _sent_watermark: int
    _open_ctx: dict[str, Any]
    _writer: Any

    def _poolable(self) -> bool:
        raise NotImplementedError

    def _open_pool(self, ctx: dict[str, Any]) -> None:
        """Sizes the pool (``open``): none when the operator must stay in-process."""
        if self._poolable():
            self._size_pool(ctx)
        plain = (int, float, str, bool, type(None))
        self._open_ctx = {k: v for k, v in ctx.items() if isinstance(v, plain)}

    def _ready_pool(self, rows: int) -> WorkerPool | None:
        """The pool once it is ready and holds the state; starts it when due."""
        # The workers get the output schema (inferred in-process from the first
        # output when not declared), so that every worker converts rows to the same one.
        pool = self._started_pool(
            rows,
            self._writer.schema is not None,
            lambda: (
                worker_runner,
                (type(self), self._started_args(), self._open_ctx, self._pool_size > 1),
            ),
        )
        if pool is None:
            return None
        if self._pooled:
            return pool
        if pool.ready():
            self._hand_over(pool)
            return pool
        self._drop_if_failed(pool)
        return None

    def _hand_over(self, pool: WorkerPool) -> None:
        """Moves the in-process state to the workers: each its key groups."""
        blobs = self._local_snapshot() or {}
        parts = [
            (STATE, pickle.dumps({g: b for g, b in blobs.items() if g % pool.count == i}))
            for i in range(pool.count)
        ]
        pool.run(parts)
        self._drop_local_state()
        self._pooled = True
        # The key groups' blobs do not carry the watermark (it is the subtask's
        # operator state, format v5): the workers get it as a watermark.
        self._sent_watermark = MIN_WATERMARK
        self._forward_watermark(pool)

    def _process_maybe_pooled(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        """``process`` of a non-empty batch: in the workers once they hold the state."""
        pool = self._ready_pool(batch.num_rows) if self._pool_size else None
        if pool is not None:
            if key_groups is None:  # (no key hash given: key group 0, as in-process)
                key_groups = pa.array([0] * batch.num_rows, pa.uint32())
            return self._in_pool(pool, batch, key_groups)
        started = time.perf_counter()
        try:
            return self._in_process(batch, key_groups)
        finally:
            self._python_s += time.perf_counter() - started

    def _in_pool(
        self, pool: WorkerPool, batch: pa.RecordBatch, key_groups: pa.UInt32Array
    ) -> RunnerOutput:
        self._forward_watermark(pool)
        return run_keyed(pool, batch, key_groups)

    def _forward_watermark(self, pool: WorkerPool) -> None:
        watermark = self._watermark()
        if watermark != self._sent_watermark:
            pool.run([(WATERMARK, str(watermark).encode())] * pool.count)
            self._sent_watermark = watermark

    def _pooled_snapshot(self) -> dict[int, bytes]:
        """The workers' key groups (each worker's own: ``group % workers``)."""
        pool = self._pool
        assert pool is not None
        self._forward_watermark(pool)
        merged: dict[int, bytes] = {}
        for i, answer in enumerate(pool.run([(SNAPSHOT, b"")] * pool.count)):
            blobs = pickle.loads(answer) or {}
            if isinstance(blobs, tuple):  # (its watermark entry, its key groups)
                blobs = blobs[1]
            merged.update((g, b) for g, b in blobs.items() if g % pool.count == i)
        return merged

    # Implemented by KeyedProcessRunner.
    def _started_args(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def _in_process(self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None) -> Any:
        raise NotImplementedError

    def _local_snapshot(self) -> dict[int, bytes] | None:
        raise NotImplementedError

    def _drop_local_state(self) -> None:
        raise NotImplementedError

    def _watermark(self) -> int:
        raise NotImplementedError
