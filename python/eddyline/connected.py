"""Two streams feeding one two-input operator: :class:`ConnectedStreams`.

``stream.connect(other)`` pairs two streams of the same loop scope (FLIP-15:
binary operations only within one scope), possibly of different schemas; a
co-loop's body (``iterate_with_feedback``) receives the loop input and the
feedback as one.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> a, b = env.from_collection([{"x": 1}]), env.from_collection([{"y": "a"}])
    >>> a.connect(b)
    ConnectedStreams('from_collection_0', 'from_collection_1')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ._checks import SchemaLike, as_schema, require_callable
from ._exec.base import Runner
from ._exec.batches import BatchRunner
from ._exec.factory import RunnerFactory
from ._exec.records import ConnectedRecordRunner
from ._graph import LogicalEdge
from .functions import Row

if TYPE_CHECKING:
    from .stream import DataStream

__all__ = ["ConnectedStreams"]


class ConnectedStreams:
    """Two streams feeding one two-input operator (``stream.connect(other)``)."""

    def __init__(self, first: DataStream, second: DataStream) -> None:
        self.first = first
        self.second = second

    def __repr__(self) -> str:
        return f"ConnectedStreams({self.first.operator_name!r}, {self.second.operator_name!r})"

    def _inputs(self) -> list[LogicalEdge]:
        return [self.first._edge(0), self.second._edge(1)]

    def _co_python(
        self,
        op: str,
        what: str,
        runner: type[Runner],
        fns: tuple[Callable[..., Any], Callable[..., Any]],
        schema: SchemaLike | None,
    ) -> DataStream:
        """Adds a two-input Python operator running ``fns[i]`` on input ``i``."""
        for fn in fns:
            require_callable(fn, what)
        declared = as_schema(schema, what)
        return self.first._python(
            op,
            lambda name: RunnerFactory(runner, name, fns, declared),
            schema=declared,
            inputs=self._inputs(),
        )

    def map(
        self,
        fn1: Callable[[Row], Row],
        fn2: Callable[[Row], Row],
        *,
        schema: SchemaLike | None = None,
    ) -> DataStream:
        """Maps rows of the first stream with ``fn1`` and of the second with ``fn2``.

        Both must return rows of the same schema.
        """
        return self._co_python("co_map", "map()", ConnectedRecordRunner, (fn1, fn2), schema)

    def map_batches(
        self,
        fn1: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table | None],
        fn2: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table | None],
        *,
        schema: SchemaLike | None = None,
    ) -> DataStream:
        """Maps batches of the first stream with ``fn1`` and of the second with ``fn2``.

        Both must return batches of the same schema.
        """
        return self._co_python("co_map_batches", "map_batches()", BatchRunner, (fn1, fn2), schema)
