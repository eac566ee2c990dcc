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

from ._checks import SchemaLike
from ._exec.factory import RunnerFactory
from ._graph import LogicalEdge, LogicalGraph, LogicalNode
from ._specs import OperatorSpec
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
    and the few public operators they compose."""

    _node: LogicalNode
    _port: int

    @property
    def _env(self) -> StreamEnv: ...

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
    ) -> Self: ...

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
    ) -> Self: ...

    def _native(
        self,
        op: str,
        spec: OperatorSpec,
        *,
        keys: list[str] | None = None,
        columns: Iterable[str] = (),
        inputs: list[LogicalEdge] | None = None,
    ) -> Self: ...

    def _same_env(self, other: Self, what: str) -> None: ...


S = TypeVar("S", bound=StreamCore)
"""The stream type of a generic DSL class (:class:`~eddyline.DataStream`)."""
