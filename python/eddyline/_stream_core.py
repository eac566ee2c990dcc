"""What the DSL's operator modules need of a stream, and a stream of its environment.

``stream.py`` builds on ``keyed``, ``joins``, ``loops``, ``connected`` and
``sinks`` (``stream.key_by(...)`` returns a ``KeyedStream``), so those modules
cannot name :class:`~eddyline.DataStream` back, not even for type checks, or
the DSL forms an import cycle (docs/ARCHITECTURE.md, "Keeping the layers
apart"). They are generic instead, in a stream type ``S`` bound to
:class:`StreamCore`, the few members they call: ``stream.key_by("k")`` is a
``KeyedStream[DataStream]`` whose ``sum(...)`` is a ``DataStream``. In the
same way a stream reaches its environment through :class:`StreamEnv`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, Self, TypeVar

import pyarrow as pa

from ._checks import SchemaLike, missing_columns_error
from ._exec.factory import RunnerFactory
from ._graph import LogicalEdge, LogicalGraph, LogicalNode
from ._specs import OperatorSpec, PythonPlanSpec
from .expr import ExprLike
from .scope import StreamScope
from .sinks import CollectHandle

__all__ = ["S", "StreamCore", "StreamEnv"]


class StreamEnv(Protocol):
    """What a stream uses of its :class:`~eddyline.StreamEnvironment`."""

    _graph: LogicalGraph
    _collects: dict[int, CollectHandle]
    _before_run: list[Callable[[str | None], None]]
    max_parallelism: int
    storage_options: dict[str, str]

    def _check_parallelism(self, parallelism: object, what: str) -> None: ...

    # ``stream`` is a DataStream, which this module cannot name.
    def create_temporary_view(self, name: str, stream: Any, *, state_ttl: Any = None) -> None: ...


class StreamCore(Protocol):
    """What ``keyed``, ``joins``, ``loops`` and ``connected`` call on a stream
    (:class:`~eddyline.DataStream` is the one implementation): its internals
    and the few public operators they compose.

    The three methods that add a node to the plan (``_add``, ``_python``,
    ``_native``) are written here once, in terms of the other members;
    :class:`~eddyline.DataStream` inherits them."""

    _env: StreamEnv
    _port: int

    @property
    def _node(self) -> LogicalNode: ...

    @property
    def _plan(self) -> LogicalGraph: ...

    @property
    def scope(self) -> StreamScope: ...

    @property
    def schema(self) -> pa.Schema | None: ...

    @property
    def operator_name(self) -> str: ...

    @property
    def time_column(self) -> str | None: ...

    def name(self, name: str) -> Self: ...

    def map_batches(
        self,
        fn: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table | None],
        *,
        schema: SchemaLike | None = None,
    ) -> Self: ...

    def with_columns(self, **exprs: ExprLike) -> Self: ...

    def _edge(self, input: int = 0) -> LogicalEdge: ...

    def _on(self, node: LogicalNode, port: int = 0) -> Self: ...

    def _add(
        self,
        op: str,
        spec: OperatorSpec,
        *,
        schema: pa.Schema | None = None,
        keys: list[str] | None = None,
        inputs: list[LogicalEdge] | None = None,
    ) -> Self:
        """Adds a node reading ``inputs`` (this stream, by default); the
        event-time and window-end columns carry over when the inputs agree."""
        edges = inputs if inputs is not None else [self._edge()]
        graph = self._env._graph
        inherited = {graph.nodes[edge.node].time_column for edge in edges}
        window_ends = {graph.nodes[edge.node].window_end for edge in edges}
        node = graph.add(
            op,
            spec,
            edges,
            scope=self._node.scope,
            schema=schema,
            keys=keys,
            time_column=inherited.pop() if len(inherited) == 1 else None,
            window_end=window_ends.pop() if len(window_ends) == 1 else None,
        )
        return self._on(node)

    def _python(
        self,
        op: str,
        make_factory: Callable[[str], RunnerFactory],
        *,
        schema: pa.Schema | None,
        keys: list[str] | None = None,
        inputs: list[LogicalEdge] | None = None,
        is_sink: bool = False,
        declares_side_outputs: bool = False,
        input_keys: list[list[str]] | None = None,
    ) -> Self:
        """Adds Python code whose runner factory ``make_factory`` makes from
        the node's final name."""
        spec = PythonPlanSpec(
            make_factory,
            schema,
            is_sink=is_sink,
            declares_side_outputs=declares_side_outputs,
            input_keys=input_keys,
        )
        return self._add(op, spec, schema=schema, keys=keys, inputs=inputs)

    def _native(
        self,
        op: str,
        spec: OperatorSpec,
        *,
        keys: list[str] | None = None,
        columns: Iterable[str] = (),
        inputs: list[LogicalEdge] | None = None,
    ) -> Self:
        """Adds a native operator; checks it at once when the input schema is known."""
        stream = self._add(op, spec, keys=keys, inputs=inputs)
        node = stream._node
        if self.schema is not None:
            graph = self._env._graph
            try:
                for name in columns:
                    if name not in self.schema.names:
                        raise missing_columns_error(node.display_name, name, self.schema)
                graph.update(node.id, schema=graph.output_schema(node, self._env.max_parallelism))
            except BaseException:
                graph.discard_last(node)
                raise
        return stream

    def _same_env(self, other: Self, what: str) -> None: ...

    def _update_node(self, **changes: Any) -> None:
        """Replaces the node this stream reads by a copy with ``changes``."""
        self._plan.update(self._node.id, **changes)


S = TypeVar("S", bound=StreamCore)
"""The stream type of a generic DSL class (:class:`~eddyline.DataStream`)."""
