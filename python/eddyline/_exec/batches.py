"""The executor of vectorized functions: ``map_batches(fn)`` and ``connect().map_batches``.

The user's function gets each input batch as a ``pyarrow.RecordBatch``
(handed over zero-copy, DESIGN.md "Runtime") and returns batches whose schema
stays the same from one call to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from .base import Runner, RunnerOutput
from .output import check_batches, one_or_many, schema_line
from .user_code import UserCode


class BatchRunner(Runner):
    """``map_batches(fn)`` and ``connect(...).map_batches(fn1, fn2)``."""

    recomputable = True  # stateless; user functions must be deterministic
    # what fn makes of a batch is returned by the call that got it
    passes_source_progress = True

    def __init__(
        self,
        node: str,
        fns: Sequence[Callable[[pa.RecordBatch], Any]],
        schema: pa.Schema | None,
    ) -> None:
        self.name = node
        self._fns = tuple(fns)
        self._schema = schema

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        with UserCode(self.name, detail=lambda v: self._describe(v["input"], v["batch"])):
            result = self._fns[input](batch)
        batches, self._schema = check_batches(self.name, result, self._schema, self.agree_schema)
        return one_or_many(batches)

    def _describe(self, input: int, batch: pa.RecordBatch) -> str:
        detail = f"input batch of {batch.num_rows} rows with schema ({schema_line(batch)})"
        return f"input {input}, {detail}" if len(self._fns) > 1 else detail
