"""The executor of broadcast process functions:
``stream.connect(rules.broadcast()).process(ed.BroadcastProcessFunction)``.

Input 0 is the stream (forwarded or rebalanced), input 1 the broadcast
stream (every subtask gets every row). The broadcast state (one dict) is the
same in every subtask, so subtask 0 alone writes it into a checkpoint and
every subtask of a restore, at any parallelism, reads that copy
(``Runner.broadcast_state``; the engine's ``Redistribution::Broadcast``).
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa

from ..errors import CheckpointError
from ..functions import BroadcastContext, BroadcastProcessFunction
from .base import Runner, RunnerOutput, State
from .output import RowWriter
from .user_code import UserCode, call_user, short

__all__ = ["BroadcastProcessRunner"]

_FORMAT = "eddyline.broadcast.v1"


class BroadcastProcessRunner(Runner):
    """Runs a :class:`~eddyline.BroadcastProcessFunction` (see the module docs)."""

    broadcast_state = True

    def __init__(self, node: str, fn: BroadcastProcessFunction, schema: pa.Schema | None) -> None:
        self.name = node
        self._fn = fn
        self._writer = RowWriter(node, schema)
        self._state: dict[str, Any] = {}
        self._subtask = 0
        self._contexts = self._make_contexts(0, 1)

    def _make_contexts(self, subtask: int, parallelism: int) -> tuple[Any, Any]:
        read = BroadcastContext(self.name, subtask, parallelism, read_only=True)
        write = BroadcastContext(self.name, subtask, parallelism, read_only=False)
        read._values = write._values = self._state
        return read, write

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        self._subtask = int(ctx.get("subtask_index", 0))
        self._contexts = self._make_contexts(self._subtask, int(ctx.get("parallelism", 1)))
        call_user(self.name, self._fn.open, self._contexts[1])

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows == 0:
            return None
        fn = self._fn.process_broadcast_element if input == 1 else self._fn.process_element
        ctx = self._contexts[1 if input == 1 else 0]
        out: list[Any] = []
        row: Any = None
        with UserCode(self.name, detail=lambda v: f"input {input}, row: {short(v['row'])}"):
            for row in batch.to_pylist():
                result = fn(row, ctx)
                if result is None:
                    continue
                if isinstance(result, dict):
                    out.append(result)
                else:
                    out.extend(result)
        return self._writer.encode(out)

    def snapshot(self, checkpoint_id: int) -> State | None:
        """Subtask 0 writes the broadcast state; the others hold the same."""
        if self._subtask != 0:
            return None
        return pickle.dumps((_FORMAT, self._state), protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, data: State) -> None:
        if not isinstance(data, bytes):
            raise CheckpointError(
                f"operator '{self.name}': broadcast state must be one blob, got "
                f"{type(data).__name__}"
            )
        fmt, state = pickle.loads(data)
        if fmt != _FORMAT:
            raise CheckpointError(f"operator '{self.name}': unknown broadcast state {fmt!r}")
        self._state.clear()
        self._state.update(state)

    def close(self) -> None:
        call_user(self.name, self._fn.close)
