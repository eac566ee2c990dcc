"""Keyed executors: the shared key extraction and per-key-group state, and ``reduce``.

Keyed state is held per key group (the binding computes each row's key group
with the engine's key hash) so that a checkpoint can be restored at another
parallelism (DESIGN.md "Runtime", "Keyed state layer and the operators on it").
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import pyarrow as pa

from ..errors import SchemaError
from ..functions import Row
from .base import Runner, RunnerOutput, State
from .codegen import compile_rows
from .output import RowWriter, schema_line
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


class KeyedReduceRunner(KeyedRunner):
    """``key_by(...).reduce(fn)``: one accumulated row per key; emits the updated rows."""

    def __init__(self, node: str, keys: Sequence[str], fn: Callable[[Row, Row], Row]) -> None:
        super().__init__(node, keys)
        self._fn = fn
        self._writer = RowWriter(node)

    def _process_keyed(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if self._writer.schema is None:
            self._writer.schema = batch.schema
        rows, keys, groups = self._rows(batch, key_groups)
        state = self._state
        fn = self._fn
        touched: dict[Hashable, dict[Hashable, Any]] = {}
        row: Row | None = None
        key: Hashable = None
        with UserCode(self.name, detail=lambda v: f"key {short(v['key'])}, row: {short(v['row'])}"):
            for row, key, group in zip(rows, keys, groups, strict=True):
                entries = state.get(group)
                if entries is None:
                    entries = state[group] = {}
                if key in entries:
                    entries[key] = fn(entries[key], row)
                else:
                    entries[key] = row
                touched[key] = entries
        return self._writer.encode([entries[key] for key, entries in touched.items()])
