"""Executors of per-record functions: fused map/flat_map/filter chains and ``connect().map``.

Rows are looped over by code generated for the batch's schema
(:mod:`eddyline._exec.codegen`); a failure names the stage that raised and
its input row, found in the generated loop's frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import CodeType
from typing import Any

import pyarrow as pa

from .._registry import Stage, register_record_chain
from ..errors import EddylineError, SchemaError
from ..process_functions import Row
from .base import Runner, RunnerOutput
from .codegen import FlatMapDict, compile_chain, frame_of
from .factory import RunnerFactory
from .output import RowWriter, one_or_many
from .pool import (
    BATCH,
    PoolUser,
    WorkerPool,
    batch_slices,
    decode_batches,
    encode_batches,
)
from .user_code import UserCode, short, user_error


class RecordChainRunner(Runner, PoolUser):
    """Runs rows through fused per-record stages (map, flat_map, filter)."""

    recomputable = True  # stateless; user functions must be deterministic
    # A batch's output rows are returned by the call that got it, in order, also
    # from the worker processes (pool.py waits for every slice before it returns).
    passes_source_progress = True

    def __init__(
        self,
        node: str,
        stages: Sequence[Stage],
        schema: pa.Schema | None,
        max_rows: int = 8192,
    ) -> None:
        self._max_rows = max(1, max_rows)
        self.name = node
        self._kinds = tuple(kind for kind, _, _ in stages)
        self._fns = tuple(fn for _, fn, _ in stages)
        self._names = tuple(name for _, _, name in stages)
        self._filter_only = all(kind == "filter" for kind in self._kinds)
        producer = [name for kind, _, name in stages if kind != "filter"]
        self._writer = RowWriter(producer[-1] if producer else node, schema, self.agree_schema)
        self._stages = tuple(stages)
        # Worker processes (pool.py): started when pool.start_due (open() sets the size).
        self._no_pool()

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        self._size_pool(ctx)

    def close(self) -> None:
        self._close_pool()

    def _ready_pool(self, rows: int) -> WorkerPool | None:
        """The worker pool once it is ready; starts it when pool.start_due."""
        # The workers get the output schema (inferred in-process from the first output
        # when not declared), so that every worker converts rows to the same one.
        pool = self._started_pool(
            rows,
            self._filter_only or self._writer.schema is not None,
            lambda: (
                RecordChainRunner,
                (self.name, self._stages, self._writer.schema, self._max_rows),
            ),
        )
        if pool is None:
            return None
        if pool.ready():
            return pool
        self._drop_if_failed(pool)
        return None

    def _in_pool(self, pool: WorkerPool, batch: pa.RecordBatch) -> RunnerOutput:
        parts = [(BATCH, encode_batches([part])) for part in batch_slices(batch, pool.count)]
        return one_or_many([b for answer in pool.run(parts) for b in decode_batches(answer)])

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows == 0:
            return None
        pool = self._ready_pool(batch.num_rows)
        if pool is not None:
            return self._in_pool(pool, batch)
        started = time.perf_counter()
        try:
            return self._in_process(batch)
        finally:
            self._python_s += time.perf_counter() - started

    def _in_process(self, batch: pa.RecordBatch) -> RunnerOutput:
        schema = self._writer.schema
        if schema is not None and len(schema) and not self._filter_only:
            return self._to_columns(batch, schema)
        chain, where = compile_chain(tuple(batch.schema.names), self._kinds)
        out: list[Any] = []
        with UserCode(self.name, describe=lambda exc: self._failure(exc, chain.__code__, where)):
            chain(
                batch.num_rows,
                out.append,
                *self._fns,
                *(column.to_pylist() for column in batch.columns),
            )
        if self._filter_only:
            if all(out):
                return batch
            if not any(out):
                return None
            return batch.filter(pa.array(out, type=pa.bool_()))
        if len(out) <= self._max_rows:
            return self._writer.encode(out)
        # flat_map may multiply rows: emit batches of at most batch_size rows, so
        # that batches do not grow without bound (e.g. pass after pass in a loop).
        step = self._max_rows
        chunks = [self._writer.encode(out[i : i + step]) for i in range(0, len(out), step)]
        return [chunk for chunk in chunks if chunk is not None]

    def _to_columns(self, batch: pa.RecordBatch, schema: pa.Schema) -> RunnerOutput:
        """Runs the chain with its output fields appended straight to column lists
        (the output schema is known): no list of output rows is walked again."""
        chain, where = compile_chain(tuple(batch.schema.names), self._kinds, tuple(schema.names))
        columns: list[list[Any]] = [[] for _ in schema.names]
        appenders = [column.append for column in columns]
        fields_of = self._writer.fields_of

        def checked(row: Any) -> None:  # a row that is not a plain dict with the fields
            for append, value in zip(appenders, fields_of(row), strict=True):
                append(value)

        with UserCode(self.name, describe=lambda exc: self._failure(exc, chain.__code__, where)):
            chain(
                batch.num_rows,
                checked,
                *self._fns,
                *(column.to_pylist() for column in batch.columns),
                *appenders,
            )
        rows = len(columns[0])
        if rows == 0:
            return None
        out = self._writer.encode_columns(columns)
        if rows <= self._max_rows:
            return out
        step = self._max_rows  # flat_map may multiply rows: batches of at most batch_size rows
        return [out.slice(start, step) for start in range(0, rows, step)]

    def _failure(
        self, exc: Exception, code: CodeType, where: dict[int, tuple[int, str]]
    ) -> EddylineError:
        """The error for ``exc``, naming the stage that raised and its input row."""
        if isinstance(exc, FlatMapDict):
            name = self._names[exc.stage]
            return SchemaError(
                f"operator '{name}' (flat_map) returned a dict ({short(exc.value, 80)}) where "
                "an iterable of dicts was expected; return [row] to emit one row",
                operator=name,
            )
        tb = frame_of(exc, code)
        if tb is None:  # pragma: no cover - the failure is always inside the chain
            return user_error(exc, self.name)
        stage, variable = where.get(tb.tb_lineno, (len(self._names) - 1, "_r0"))
        row = tb.tb_frame.f_locals.get(variable)
        return user_error(
            exc,
            self._names[stage],
            node=self.name,
            detail=f"row: {short(row)}",
            tb=tb.tb_next or tb,
        )


class ConnectedRecordRunner(Runner):
    """``connect(...).map(fn1, fn2)``: rows of input ``i`` go through ``fns[i]``."""

    recomputable = True  # stateless; user functions must be deterministic

    def __init__(self, node: str, fns: Sequence[Callable[[Row], Row]], schema: pa.Schema | None):
        self.name = node
        self._fns = tuple(fns)
        self._writer = RowWriter(node, schema, self.agree_schema)

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows == 0:
            return None
        chain, _ = compile_chain(tuple(batch.schema.names), ("map",))
        out: list[Any] = []
        with UserCode(self.name, describe=lambda exc: self._failure(exc, chain.__code__, input)):
            chain(
                batch.num_rows,
                out.append,
                self._fns[input],
                *(column.to_pylist() for column in batch.columns),
            )
        return self._writer.encode(out)

    def _failure(self, exc: Exception, code: CodeType, input: int) -> EddylineError:
        """The error for ``exc``, naming the input and the row."""
        tb = frame_of(exc, code)
        row = tb.tb_frame.f_locals.get("_r0") if tb is not None else None
        return user_error(
            exc,
            self.name,
            detail=f"input {input}, row: {short(row)}",
            tb=(tb.tb_next or tb) if tb is not None else None,
        )


# The plan fuses per-record stages and makes their runner factory here.
register_record_chain(
    lambda name, stages, schema, batch_size: RunnerFactory(
        RecordChainRunner, name, stages, schema, batch_size
    )
)
