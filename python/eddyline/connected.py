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
from typing import Any, Generic

import pyarrow as pa

from ._checks import SchemaLike, as_schema, missing_columns_error, require_callable
from ._exec.base import Runner
from ._exec.batches import BatchRunner
from ._exec.broadcast import BroadcastProcessRunner, KeyedBroadcastProcessRunner
from ._exec.factory import RunnerFactory
from ._exec.process import KeyedCoProcessRunner
from ._exec.records import ConnectedRecordRunner
from ._graph import LogicalEdge
from ._stream_core import S
from .broadcast_functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from .process_functions import CoProcessFunction, Row

__all__ = [
    "BroadcastConnectedStreams",
    "BroadcastStream",
    "ConnectedStreams",
    "KeyedConnectedStreams",
]


class BroadcastStream(Generic[S]):
    """A stream every consumer subtask reads whole (``stream.broadcast()``), for
    ``other.connect(broadcast_stream).process(ed.BroadcastProcessFunction)``."""

    def __init__(self, stream: S) -> None:
        self.stream = stream

    def __repr__(self) -> str:
        return f"BroadcastStream({self.stream.operator_name!r})"


class BroadcastConnectedStreams(Generic[S]):
    """A stream connected with a broadcast stream (``a.connect(rules.broadcast())``),
    or a keyed stream connected with one (``keyed.connect(rules.broadcast())``:
    ``keys`` are its key columns)."""

    def __init__(
        self, first: S, broadcast: BroadcastStream[S], keys: list[str] | None = None
    ) -> None:
        self.first = first
        self.broadcast = broadcast
        self.keys = list(keys) if keys else None

    def __repr__(self) -> str:
        keyed = f", keys={self.keys!r}" if self.keys else ""
        return f"BroadcastConnectedStreams({self.first.operator_name!r}, {self.broadcast!r}{keyed})"

    def process(
        self,
        fn: BroadcastProcessFunction | type[BroadcastProcessFunction],
        *,
        schema: SchemaLike | None = None,
    ) -> S:
        """Runs ``fn`` with broadcast state (see :class:`~eddyline.BroadcastProcessFunction`).

        On a keyed stream ``fn`` also gets the key's state and timers in
        ``process_element`` (and ``on_timer`` of an
        :class:`~eddyline.KeyedBroadcastProcessFunction`), and
        ``ctx.apply_to_keyed_state`` in ``process_broadcast_element``.

        Args:
            fn: A BroadcastProcessFunction (instance or subclass).
            schema: The output schema; inferred from the first output if omitted.
        """
        if isinstance(fn, type) and issubclass(fn, BroadcastProcessFunction):
            fn = fn()
        if not isinstance(fn, BroadcastProcessFunction):
            raise TypeError(
                "connect(stream.broadcast()).process() needs an ed.BroadcastProcessFunction, "
                f"got {fn!r}"
            )
        declared = as_schema(schema, "process()")
        function = fn
        rules = self.broadcast.stream
        inputs = [self.first._edge(0), LogicalEdge(rules._node.id, 1, rules._port, broadcast=True)]
        if self.keys is not None:
            return self._keyed(function, declared, inputs, self.keys)
        if isinstance(fn, KeyedBroadcastProcessFunction):
            raise TypeError(
                "an ed.KeyedBroadcastProcessFunction needs a keyed stream: "
                "stream.key_by(...).connect(rules.broadcast()).process(fn)"
            )
        return self.first._python(
            "broadcast_process",
            lambda name: RunnerFactory(
                BroadcastProcessRunner, name, function, declared, private=(1,)
            ),
            schema=declared,
            inputs=inputs,
        )

    def _keyed(
        self,
        fn: BroadcastProcessFunction,
        declared: pa.Schema | None,
        inputs: list[LogicalEdge],
        keys: list[str],
    ) -> S:
        """The keyed form: input 0 hashed on ``keys``, input 1 broadcast."""
        first = self.first
        schema_in = first.schema
        missing = [k for k in keys if schema_in is not None and k not in schema_in.names]
        if missing:
            raise missing_columns_error("broadcast process key_by", missing[0], schema_in)
        time_column = first.time_column
        # Side outputs (tag name -> (port, schema)), as for KeyedStream.process.
        ports: dict[str, tuple[int, pa.Schema | None]] = {}
        out = first._python(
            "broadcast_process",
            lambda name: RunnerFactory(
                KeyedBroadcastProcessRunner,
                name,
                keys,
                fn,
                declared,
                time_column,
                ports,
                private=(2,),
            ),
            schema=declared,
            inputs=inputs,
            declares_side_outputs=True,
            # The broadcast input has no key: its rows belong to no key group.
            input_keys=[list(keys), []],
        )
        out._update_node(side_outputs=ports)
        return out


class KeyedConnectedStreams(Generic[S]):
    """Two connected streams keyed on their own columns (``a.connect(b).key_by(ka, kb)``)."""

    def __init__(
        self, connected: ConnectedStreams[S], first_keys: list[str], second_keys: list[str]
    ) -> None:
        self._connected = connected
        self.keys = (first_keys, second_keys)

    def __repr__(self) -> str:
        return f"KeyedConnectedStreams({self.keys[0]!r}, {self.keys[1]!r})"

    def process(
        self, fn: CoProcessFunction | type[CoProcessFunction], *, schema: SchemaLike | None = None
    ) -> S:
        """Runs a :class:`~eddyline.CoProcessFunction` with one keyed state and one
        timer service per key, shared by both inputs.

        Args:
            fn: A CoProcessFunction (instance or subclass).
            schema: The output schema; inferred from the first output if omitted.
        """
        if isinstance(fn, type) and issubclass(fn, CoProcessFunction):
            fn = fn()
        if not isinstance(fn, CoProcessFunction):
            raise TypeError(
                f"connect(...).key_by(...).process() needs an ed.CoProcessFunction, got {fn!r}"
            )
        first, second = self._connected.first, self._connected.second
        declared = as_schema(schema, "process()")
        input_keys = [list(self.keys[0]), list(self.keys[1])]
        times = [first.time_column, second.time_column]
        ports: dict[str, tuple[int, pa.Schema | None]] = {}
        function = fn
        for stream, keys in ((first, input_keys[0]), (second, input_keys[1])):
            schema_in = stream.schema
            missing = [k for k in keys if schema_in is not None and k not in schema_in.names]
            if missing:
                raise missing_columns_error("co-process key_by", missing[0], schema_in)
        out = first._python(
            "co_process",
            lambda name: RunnerFactory(
                KeyedCoProcessRunner,
                name,
                input_keys,
                function,
                declared,
                times,
                ports,
                private=(2,),
            ),
            schema=declared,
            inputs=self._connected._inputs(),
            declares_side_outputs=True,
            input_keys=input_keys,
        )
        out._update_node(side_outputs=ports)
        return out


class ConnectedStreams(Generic[S]):
    """Two streams feeding one two-input operator (``stream.connect(other)``)."""

    def __init__(self, first: S, second: S) -> None:
        self.first = first
        self.second = second

    def __repr__(self) -> str:
        return f"ConnectedStreams({self.first.operator_name!r}, {self.second.operator_name!r})"

    def key_by(
        self, first_keys: str | list[str], second_keys: str | list[str]
    ) -> KeyedConnectedStreams[S]:
        """Keys both inputs (each on its own columns) for a :class:`~eddyline.CoProcessFunction`."""
        a = [first_keys] if isinstance(first_keys, str) else list(first_keys)
        b = [second_keys] if isinstance(second_keys, str) else list(second_keys)
        if not a or len(a) != len(b):
            raise TypeError(
                f"connect(...).key_by() needs as many key columns for each input, got {a} and {b}"
            )
        return KeyedConnectedStreams(self, a, b)

    def _inputs(self) -> list[LogicalEdge]:
        return [self.first._edge(0), self.second._edge(1)]

    def _co_python(
        self,
        op: str,
        what: str,
        runner: type[Runner],
        fns: tuple[Callable[..., Any], Callable[..., Any]],
        schema: SchemaLike | None,
    ) -> S:
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
    ) -> S:
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
    ) -> S:
        """Maps batches of the first stream with ``fn1`` and of the second with ``fn2``.

        Both must return batches of the same schema.
        """
        return self._co_python("co_map_batches", "map_batches()", BatchRunner, (fn1, fn2), schema)
