"""Keyed executors: the shared key extraction and per-key-group state, and ``reduce``.

Keyed state is held per key group (the binding computes each row's key group
with the engine's key hash) so that a checkpoint can be restored at another
parallelism (DESIGN.md "Runtime", "Keyed state layer and the operators on it").
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import pyarrow as pa

from ..errors import SchemaError
from ..process_functions import Row
from .base import Runner, RunnerOutput, State
from .codegen import compile_rows
from .output import RowWriter, schema_line
from .pool import (
    SNAPSHOT,
    STATE,
    PoolUser,
    WorkerPool,
    run_keyed,
)
from .user_code import UserCode, short


class KeyedRunner(Runner):
    """Shared parts of keyed runners: key extraction and per-key-group state."""

    def __init__(self, node: str, keys: Sequence[str]) -> None:
        self.name = node
        self._keys = tuple(keys)
        self._state: dict[int, dict[Hashable, Any]] = {}

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows == 0:
            return None
        return self._process_keyed(batch, key_groups)

    def _process_keyed(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        """Handles a non-empty batch; ``key_groups`` as in :meth:`process`."""
        raise NotImplementedError

    def _rows(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> tuple[list[Row], list[Any], list[int]]:
        """The batch's rows, each row's key and each row's key group.

        Raises:
            SchemaError: A key column is missing.
        """
        n = batch.num_rows
        columns = [column.to_pylist() for column in batch.columns]
        rows = compile_rows(tuple(batch.schema.names))(n, *columns)
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
        if len(indices) == 1:
            keys = columns[indices[0]]
        else:
            keys = list(zip(*(columns[i] for i in indices), strict=True))
        groups: list[int] = [0] * n if key_groups is None else key_groups.to_pylist()
        return rows, keys, groups

    def snapshot(self, checkpoint_id: int) -> dict[int, bytes] | None:
        """One pickled ``{key: value}`` blob per non-empty key group."""
        return {
            group: pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
            for group, entries in self._state.items()
            if entries
        }

    def restore(self, data: State) -> None:
        """Restores the key groups given (``{key_group: blob}``).

        A single ``bytes`` blob (a whole ``{key_group: {key: value}}`` table)
        is accepted too.
        """
        if isinstance(data, bytes | bytearray | memoryview):
            table: dict[int, dict[Hashable, Any]] = pickle.loads(data)
            for group, entries in table.items():
                self._state.setdefault(int(group), {}).update(entries)
            return
        if not isinstance(data, dict):
            raise TypeError(f"keyed state must be {{key_group: bytes}}, got {type(data).__name__}")
        for group, blob in data.items():
            restored: dict[Hashable, Any] = pickle.loads(blob)
            self._state.setdefault(int(group), {}).update(restored)


class KeyedReduceRunner(KeyedRunner, PoolUser):
    """``key_by(...).reduce(fn)``: one accumulated row per key; emits the updated rows.

    When pool.start_due the reduce moves to worker processes
    (``pool.py``): each owns the key groups ``group % workers``, holds their
    state and returns the rows it updated; ``snapshot`` gathers the state back.
    """

    def __init__(
        self,
        node: str,
        keys: Sequence[str],
        fn: Callable[[Row, Row], Row],
        track_first: bool = False,
    ) -> None:
        super().__init__(node, keys)
        self._fn = fn
        self._writer = RowWriter(node)
        # In a worker of several: the row (of the batch) that first touched each output row's key.
        self._track_first = track_first
        self.first_rows: list[int] | None = [] if track_first else None
        self._no_pool()
        self._pooled = False  # the state lives in the pool's workers

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        self._size_pool(ctx)

    def close(self) -> None:
        self._close_pool()

    def _process_keyed(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if self._writer.schema is None:
            self._writer.schema = batch.schema
        pool = self._ready_pool(batch.num_rows)
        if pool is not None and key_groups is not None:
            return self._in_pool(pool, batch, key_groups)
        started = time.perf_counter()
        try:
            return self._reduce(batch, key_groups)
        finally:
            self._python_s += time.perf_counter() - started

    def _reduce(self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None) -> RunnerOutput:
        rows, keys, groups = self._rows(batch, key_groups)
        state = self._state
        fn = self._fn
        touched: dict[Hashable, dict[Hashable, Any]] = {}
        row: Row | None = None
        key: Hashable = None
        first = self.first_rows
        with UserCode(self.name, detail=lambda v: f"key {short(v['key'])}, row: {short(v['row'])}"):
            if first is None:
                for row, key, group in zip(rows, keys, groups, strict=True):
                    entries = state.get(group)
                    if entries is None:
                        entries = state[group] = {}
                    if key in entries:
                        entries[key] = fn(entries[key], row)
                    else:
                        entries[key] = row
                    touched[key] = entries
            else:
                first.clear()
                for i, (row, key, group) in enumerate(zip(rows, keys, groups, strict=True)):
                    entries = state.get(group)
                    if entries is None:
                        entries = state[group] = {}
                    if key in entries:
                        entries[key] = fn(entries[key], row)
                    else:
                        entries[key] = row
                    if key not in touched:
                        first.append(i)
                        touched[key] = entries
        return self._writer.encode([entries[key] for key, entries in touched.items()])

    def _ready_pool(self, rows: int) -> WorkerPool | None:
        """The worker pool once it is ready (its state handed over); starts it when due."""
        pool = self._started_pool(
            rows,
            True,
            lambda: (
                KeyedReduceRunner,
                (self.name, self._keys, self._fn, self._pool_size > 1),
            ),
        )
        if pool is None:
            return None
        if self._pooled:
            return pool
        if pool.ready():
            # Hand each worker the state of its key groups (group % workers).
            blobs = super().snapshot(0) or {}
            parts = [
                (STATE, pickle.dumps({g: b for g, b in blobs.items() if g % pool.count == i}))
                for i in range(pool.count)
            ]
            pool.run(parts)
            self._state.clear()
            self._pooled = True
            return pool
        self._drop_if_failed(pool)
        return None

    def _in_pool(
        self, pool: WorkerPool, batch: pa.RecordBatch, key_groups: pa.UInt32Array
    ) -> RunnerOutput:
        return run_keyed(pool, batch, key_groups)

    def snapshot(self, checkpoint_id: int) -> dict[int, bytes] | None:
        if not self._pooled:
            return super().snapshot(checkpoint_id)
        assert self._pool is not None
        merged: dict[int, bytes] = {}
        for answer in self._pool.run([(SNAPSHOT, b"")] * self._pool.count):
            merged.update(pickle.loads(answer) or {})
        return merged
