"""Streams and operators: :class:`DataStream`, :class:`KeyedStream`, :class:`ConnectedStreams`.

A :class:`DataStream` is a typed stream of Arrow record batches. Per-record
functions (``map``, ``flat_map``, ``filter(fn)``) see each row as a ``dict``;
batch functions (``map_batches``) see ``pyarrow.RecordBatch`` objects; native
expressions (``filter(expr)``, ``with_columns``, ``select``) and keyed
aggregates run in Rust without the GIL.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> s = env.from_collection([{"k": 1, "v": 2}]).map(lambda r: {**r, "w": 1}).name("add_w")
    >>> s.scope.level
    0
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from ._exec.batches import BatchRunner
from ._exec.event_time import is_event_time_type
from ._exec.factory import RunnerFactory
from ._exec.keyed import KeyedReduceRunner
from ._exec.process import KeyedProcessRunner
from ._exec.records import ConnectedRecordRunner
from ._exec.two_phase import TwoPhaseCommitRunner
from ._exec.window import LATE_PORT, PythonWindowRunner, window_output_schema
from ._graph import LogicalEdge, LogicalNode
from .config import Duration, parse_duration, parse_size
from .errors import GraphError, SchemaError, ScopeError
from .expr import Expr, ExprLike, lit
from .functions import ProcessContext, ProcessFunction, Row
from .loops import CoLoopFunction, LoopFunction, call_loop_function
from .scope import StreamScope
from .sinks import CollectHandle, ParquetSink, TwoPhaseCommitSink
from .windows import TimeWindow, WindowAssigner

if TYPE_CHECKING:
    from .environment import StreamEnvironment

__all__ = [
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "KeyedStream",
    "OutputTag",
    "WindowedStream",
]

SchemaLike: TypeAlias = pa.Schema | Sequence[pa.Field] | Sequence[tuple[str, pa.DataType]]
ProcessFn: TypeAlias = (
    ProcessFunction | type[ProcessFunction] | Callable[[Row, ProcessContext], Any]
)
WindowFn: TypeAlias = Callable[[Any, TimeWindow, list[Row]], Iterable[Row] | None]
"""``fn(key, window, rows) -> iterable of rows`` for :meth:`WindowedStream.apply`."""


def _as_schema(schema: SchemaLike | None, what: str) -> pa.Schema | None:
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    try:
        return pa.schema(schema)
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise TypeError(f"{what}: schema must be a pyarrow.Schema, got {schema!r}") from exc


def _require_callable(fn: object, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what} needs a callable, got {type(fn).__name__}")


def _missing_columns_error(
    operator: str, missing: str, schema: pa.Schema, role: str = "column"
) -> GraphError:
    columns = ", ".join(f"{f.name}: {f.type}" for f in schema) or "none"
    return GraphError(
        f"operator '{operator}': {role} '{missing}' is not in the input schema "
        f"(columns: {columns})",
        operator=operator,
    )


class OutputTag:
    """Names a side output of an operator (Flink's ``OutputTag``).

    Give it to :meth:`KeyedStream.window` as ``late_output`` to receive the
    window's late records, then read them with :meth:`DataStream.side_output`.
    Tags are equal when their names are.

    Example:
        >>> import eddyline as ed
        >>> ed.OutputTag("late")
        OutputTag('late')
    """

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"OutputTag() needs a non-empty str name, got {name!r}")
        self._name = name

    @property
    def name(self) -> str:
        """The tag's name."""
        return self._name

    def __repr__(self) -> str:
        return f"OutputTag({self._name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other._name == self._name

    def __hash__(self) -> int:
        return hash((OutputTag, self._name))


class _Operators:
    """Behaviour shared by streams and sink handles: naming and parallelism."""

    _env: StreamEnvironment
    _node: LogicalNode

    def name(self, name: str) -> Any:
        """Names the last operator (used in metrics, errors and logs); returns ``self``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"name() needs a non-empty str, got {name!r}")
        self._node.name = name
        if self._node.collect is not None:
            self._node.collect._operator = name
        return self

    def uid(self, uid: str) -> Any:
        """Sets the last operator's stable id (matches its state on restore); returns ``self``."""
        if not isinstance(uid, str) or not uid:
            raise TypeError(f"uid() needs a non-empty str, got {uid!r}")
        for other in self._env._graph.nodes:
            if other is not self._node and other.uid == uid:
                raise GraphError(
                    f"uid {uid!r} is already used by operator '{other.display_name}'",
                    operator=self._node.display_name,
                )
        self._node.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> Any:
        """Sets the last operator's parallelism; returns ``self``."""
        self._env._check_parallelism(parallelism, f"operator '{self._node.display_name}'")
        self._node.parallelism = parallelism
        return self

    @property
    def parallelism(self) -> int:
        """The last operator's parallelism (the environment's unless set)."""
        return self._env._graph.parallelism_of(self._node)


class DataStream(_Operators):
    """A stream of Arrow record batches; build on it with operator methods.

    Streams are created by the sources of a :class:`~eddyline.StreamEnvironment`.
    """

    def __init__(self, env: StreamEnvironment, node: LogicalNode, port: int = 0) -> None:
        self._env = env
        self._node = node
        self._port = port

    def __repr__(self) -> str:
        if self._port:
            tag = self._side_output_name()
            if tag is not None:
                return f"DataStream({self._node.display_name!r}, side_output={tag!r})"
            return f"DataStream({self._node.display_name!r}, feedback)"
        return f"DataStream({self._node.display_name!r})"

    def _side_output_name(self) -> str | None:
        """The tag name of the side output this stream reads, if it reads one."""
        if self._port:
            for name, (port, _) in self._node.side_outputs.items():
                if port == self._port:
                    return name
        return None

    def _edge(self, input: int = 0) -> LogicalEdge:
        """An edge reading this stream into logical input ``input``."""
        return LogicalEdge(self._node.id, input, self._port)

    # ---- properties ---------------------------------------------------------

    @property
    def scope(self) -> StreamScope:
        """The loop scope of the stream (level 0 outside loops)."""
        return self._node.scope

    @property
    def schema(self) -> pa.Schema | None:
        """The stream's schema if it is known before running, else ``None``."""
        if self._port:
            tag = self._side_output_name()
            if tag is not None:
                return self._node.side_outputs[tag][1]
            schema: pa.Schema | None = self._node.params.get("feedback_schema")
            return schema
        return self._node.schema

    @property
    def operator_name(self) -> str:
        """The name of the operator producing this stream."""
        return self._node.display_name

    @property
    def time_column(self) -> str | None:
        """The event-time column (of the nearest upstream ``assign_timestamps``), if any."""
        return self._node.time_column

    # ---- helpers ------------------------------------------------------------

    def _add(
        self,
        op: str,
        kind: str,
        *,
        schema: pa.Schema | None = None,
        params: dict[str, Any] | None = None,
        keys: list[str] | None = None,
        stage: tuple[str, Callable[..., Any]] | None = None,
        inputs: list[LogicalEdge] | None = None,
    ) -> DataStream:
        edges = inputs if inputs is not None else [self._edge()]
        graph = self._env._graph
        inherited = {graph.nodes[edge.node].time_column for edge in edges}
        node = graph.add(
            op,
            kind,
            edges,
            scope=self._node.scope,
            schema=schema,
            params=params,
            keys=keys,
            stage=stage,
            time_column=inherited.pop() if len(inherited) == 1 else None,
        )
        return DataStream(self._env, node)

    def _python(
        self,
        op: str,
        make_factory: Callable[[str], RunnerFactory],
        *,
        schema: pa.Schema | None,
        keys: list[str] | None = None,
        inputs: list[LogicalEdge] | None = None,
        is_sink: bool = False,
    ) -> DataStream:
        params: dict[str, Any] = {
            "make_factory": make_factory,
            "output_schema": schema,
            "num_inputs": len(inputs) if inputs else 1,
        }
        if is_sink:
            params["is_sink"] = True
        return self._add(op, "python", schema=schema, params=params, keys=keys, inputs=inputs)

    def _native(
        self,
        op: str,
        kind: str,
        params: dict[str, Any],
        *,
        keys: list[str] | None = None,
        columns: Iterable[str] = (),
    ) -> DataStream:
        """Adds a native operator; checks it at once when the input schema is known."""
        stream = self._add(op, kind, params=params, keys=keys)
        node = stream._node
        if self.schema is not None:
            graph = self._env._graph
            try:
                for name in columns:
                    if name not in self.schema.names:
                        raise _missing_columns_error(node.display_name, name, self.schema)
                node.schema = graph.output_schema(node, self._env.max_parallelism)
            except BaseException:
                graph.discard_last(node)
                raise
        return stream

    def _same_env(self, other: DataStream, what: str) -> None:
        if not isinstance(other, DataStream):
            raise TypeError(f"{what} needs DataStream arguments, got {type(other).__name__}")
        if other._env is not self._env:
            raise GraphError(f"{what}: the streams belong to different StreamEnvironments")
        if other.scope != self.scope:
            raise ScopeError(
                f"{what}: cannot combine '{self.operator_name}' ({self.scope!r}) with "
                f"'{other.operator_name}' ({other.scope!r}); streams must be in the same loop "
                "scope",
                operator=self.operator_name,
            )

    # ---- per-record functions -----------------------------------------------

    def map(self, fn: Callable[[Row], Row], *, schema: SchemaLike | None = None) -> DataStream:
        """Applies ``fn`` to every row (a dict) and emits the returned dict.

        Args:
            fn: ``fn(row) -> row``.
            schema: The output schema; inferred from the first output if omitted.
        """
        _require_callable(fn, "map()")
        return self._add("map", "record", schema=_as_schema(schema, "map()"), stage=("map", fn))

    def flat_map(
        self, fn: Callable[[Row], Iterable[Row] | None], *, schema: SchemaLike | None = None
    ) -> DataStream:
        """Applies ``fn`` to every row and emits every dict of the iterable it returns.

        Args:
            fn: ``fn(row) -> iterable of rows`` (``None`` emits nothing).
            schema: The output schema; inferred from the first output if omitted.
        """
        _require_callable(fn, "flat_map()")
        return self._add(
            "flat_map",
            "record",
            schema=_as_schema(schema, "flat_map()"),
            stage=("flat_map", fn),
        )

    def filter(self, predicate: Callable[[Row], Any] | Expr) -> DataStream:
        """Keeps the rows for which ``predicate`` is true.

        Args:
            predicate: A native boolean expression such as ``ed.col("x") > 0``
                (run in Rust), or a function ``fn(row) -> bool``.
        """
        if isinstance(predicate, Expr):
            return self._native(
                "filter", "filter", {"expr": predicate._tree()}, columns=predicate.columns()
            )
        _require_callable(predicate, "filter()")
        return self._add("filter", "record", schema=self.schema, stage=("filter", predicate))

    # ---- batch functions ----------------------------------------------------

    def map_batches(
        self,
        fn: Callable[[pa.RecordBatch], pa.RecordBatch | pa.Table | None],
        *,
        schema: SchemaLike | None = None,
    ) -> DataStream:
        """Applies ``fn`` to every ``pyarrow.RecordBatch``.

        ``fn`` may return a RecordBatch, a Table (its batches are emitted) or
        ``None`` (nothing). Every output must have the same schema.

        Args:
            fn: ``fn(batch) -> batch``.
            schema: The output schema, if known in advance.
        """
        _require_callable(fn, "map_batches()")
        declared = _as_schema(schema, "map_batches()")
        return self._python(
            "map_batches",
            lambda name: RunnerFactory(BatchRunner, name, (fn,), declared),
            schema=declared,
        )

    # ---- native expressions -------------------------------------------------

    def with_columns(self, **exprs: ExprLike) -> DataStream:
        """Adds or replaces columns computed by native expressions.

        Example:
            >>> import eddyline as ed
            >>> env = ed.StreamEnvironment()
            >>> s = env.from_sequence(0, 10)
            >>> s.with_columns(double=ed.col("value") * 2)  # doctest: +SKIP
        """
        if not exprs:
            raise TypeError("with_columns() needs at least one name=expression")
        columns = [(name, lit(value)._tree()) for name, value in exprs.items()]
        used: dict[str, None] = {}
        for value in exprs.values():
            if isinstance(value, Expr):
                used.update(dict.fromkeys(value.columns()))
        return self._native("with_columns", "with_columns", {"columns": columns}, columns=used)

    def select(self, *cols: str | Expr) -> DataStream:
        """Keeps (and computes) the given columns, in order.

        Args:
            cols: Column names, or expressions; expressions other than a bare
                ``col(...)`` need ``.alias(name)``.
        """
        if not cols:
            raise TypeError("select() needs at least one column")
        columns: list[tuple[str, tuple[object, ...]]] = []
        used: dict[str, None] = {}
        for item in cols:
            expr = Expr(("col", item)) if isinstance(item, str) else item
            if not isinstance(expr, Expr):
                raise TypeError(f"select() takes column names or expressions, got {item!r}")
            name = expr.output_name
            if name is None:
                raise TypeError(f"select(): expression {expr!r} needs a name: use .alias('name')")
            if any(existing == name for existing, _ in columns):
                raise GraphError(f"select(): column '{name}' is selected twice")
            columns.append((name, expr._tree()))
            used.update(dict.fromkeys(expr.columns()))
        return self._native("select", "select", {"columns": columns}, columns=used)

    # ---- event time ---------------------------------------------------------

    def assign_timestamps(
        self,
        column: str,
        *,
        max_out_of_orderness: Duration = "0s",
        idle_timeout: Duration | None = None,
    ) -> DataStream:
        """Gives the stream event time from ``column`` and emits watermarks.

        The watermark follows the largest event time seen minus
        ``max_out_of_orderness`` (minus 1 ms): records up to that much older
        than the newest one are still on time for windows and timers
        downstream. Batches pass through unchanged. Right after a source,
        the watermark is kept per split (file, range, user-source split) and
        the smallest is emitted (FLIP-27): records are late only by their
        own split's order.

        Args:
            column: An Arrow timestamp column (any unit) or int64 milliseconds
                since the epoch; must not hold nulls.
            max_out_of_orderness: How far records may arrive out of order (a
                duration: seconds as a number, or a string like ``"250ms"``).
            idle_timeout: A split that delivered nothing for this long stops
                holding the watermark back until it delivers again (Flink's
                ``withIdleness``). Only right after a source (at its
                parallelism, as its only consumer).

        Raises:
            SchemaError: The column has another type.
            GraphError: The column is not in the stream's schema, or
                ``idle_timeout`` is given away from a source.
            ValueError: A duration is invalid (``idle_timeout`` must be positive).

        Example:
            >>> import eddyline as ed
            >>> env = ed.StreamEnvironment()
            >>> s = env.from_collection([{"t": 1000, "v": 1}])
            >>> s.assign_timestamps("t", max_out_of_orderness="2s").time_column
            't'
        """
        if not isinstance(column, str) or not column:
            raise TypeError(f"assign_timestamps() needs a column name, got {column!r}")
        bound_s = parse_duration(max_out_of_orderness, what="max_out_of_orderness")
        bound_ms = round(bound_s * 1000.0)
        if abs(bound_ms - bound_s * 1000.0) > 1e-6:
            raise ValueError(
                f"invalid max_out_of_orderness {max_out_of_orderness!r}: must be a whole number of "
                "milliseconds"
            )
        params: dict[str, Any] = {"column": column, "max_out_of_orderness_ms": bound_ms}
        if idle_timeout is not None:
            idle_ms = parse_duration(idle_timeout, what="idle_timeout") * 1000.0
            if idle_ms < 1 or abs(round(idle_ms) - idle_ms) > 1e-6:
                raise ValueError(
                    f"invalid idle_timeout {idle_timeout!r}: must be a positive whole number of "
                    "milliseconds"
                )
            if not self._node.kind.startswith("source_"):
                raise GraphError(
                    f"operator 'assign_timestamps after {self.operator_name}': idle_timeout "
                    "works only right after a source (env.from_...()); elsewhere nothing tells "
                    "the operator that its input is idle",
                    operator=self.operator_name,
                )
            params["idle_timeout_ms"] = round(idle_ms)
        if self.schema is not None and column in self.schema.names:
            found = self.schema.field(column).type
            if not is_event_time_type(found):
                raise SchemaError(
                    f"operator 'assign_timestamps after {self.operator_name}': event-time column "
                    f"'{column}' has type {found}, expected a timestamp or int64 milliseconds",
                    operator=self.operator_name,
                )
        stream = self._native("assign_timestamps", "assign_timestamps", params, columns=[column])
        stream._node.time_column = column
        return stream

    # ---- keyed, binary ------------------------------------------------------

    def key_by(self, keys: str | Sequence[str]) -> KeyedStream:
        """Partitions the stream by the value of one or more key columns.

        Rows with null keys form their own group.
        """
        key_list = [keys] if isinstance(keys, str) else list(keys)
        if not key_list or not all(isinstance(k, str) and k for k in key_list):
            raise TypeError(f"key_by() needs a column name or a list of names, got {keys!r}")
        if len(set(key_list)) != len(key_list):
            raise GraphError(f"key_by(): duplicate key columns in {key_list}")
        if self.schema is not None:
            for key in key_list:
                if key not in self.schema.names:
                    raise _missing_columns_error(
                        f"key_by after {self.operator_name}", key, self.schema, "key column"
                    )
        return KeyedStream(self, key_list)

    def union(self, *streams: DataStream) -> DataStream:
        """Merges this stream with others of the same schema and scope."""
        if not streams:
            return self
        for other in streams:
            self._same_env(other, "union()")
        schema = self.schema
        for other in streams:
            if schema is not None and other.schema is not None and not other.schema.equals(schema):
                raise SchemaError(
                    f"union(): '{self.operator_name}' has schema\n{schema}\nbut "
                    f"'{other.operator_name}' has schema\n{other.schema}\nstreams of a union "
                    "must have the same schema",
                    operator=self.operator_name,
                )
        known = all(s.schema is not None for s in streams)
        inputs = [self._edge()] + [s._edge() for s in streams]
        return self._add("union", "union", schema=schema if known else None, inputs=inputs)

    def connect(self, other: DataStream) -> ConnectedStreams:
        """Connects two streams (possibly of different schemas) for a two-input operator."""
        self._same_env(other, "connect()")
        return ConnectedStreams(self, other)

    # ---- loops --------------------------------------------------------------

    def _open_loop(
        self,
        what: str,
        *,
        co: bool,
        feedback_memory: int | str,
        priority: str,
        spill_dir: str | os.PathLike[str] | None,
        feedback_schema: pa.Schema | None,
    ) -> LogicalNode:
        if priority not in ("feedback_first", "adaptive"):
            raise ValueError(
                f"{what}: priority must be 'feedback_first' or 'adaptive', got {priority!r}"
            )
        memory = parse_size(feedback_memory, what=f"{what}: feedback_memory")
        params: dict[str, Any] = {
            "feedback_node": None,
            "feedback_memory": memory,
            "priority": priority,
            "co": co,
            "spill_dir": os.fspath(spill_dir) if spill_dir is not None else None,
            "feedback_schema": _nullable(feedback_schema),
        }
        return self._env._graph.add(
            "iterate",
            "loop_head",
            [self._edge()],
            scope=self.scope.nest(),
            schema=_nullable(self.schema),
            params=params,
            time_column=self.time_column,
        )

    def _close_loop(
        self, what: str, head: LogicalNode, result: tuple[Any, Any], expected: pa.Schema | None
    ) -> DataStream:
        feedback, output = result
        for role, stream in (("feedback", feedback), ("output", output)):
            if not isinstance(stream, DataStream):
                raise TypeError(
                    f"{what}: the loop function must return (feedback, output) DataStreams; "
                    f"its {role} is a {type(stream).__name__}"
                )
            if stream._env is not self._env:
                raise GraphError(f"{what}: the loop's {role} belongs to another StreamEnvironment")
            if stream.scope != head.scope:
                raise ScopeError(
                    f"{what}: the loop's {role} '{stream.operator_name}' is in scope "
                    f"{stream.scope!r}, not in the loop's scope {head.scope!r}; build it from "
                    "the stream the loop function received",
                    operator=stream.operator_name,
                )
        if feedback._port:
            raise GraphError(
                f"{what}: the feedback stream of the loop cannot be fed back unchanged",
                operator=head.display_name,
            )
        got = feedback.schema
        if expected is not None and got is not None and not _same_columns(expected, got):
            raise SchemaError(
                f"{what}: the feedback '{feedback.operator_name}' has schema\n{got}\nbut the "
                f"loop's feedback must have schema\n{expected}",
                operator=feedback.operator_name,
            )
        head.params["feedback_node"] = feedback._node.id
        node = self._env._graph.add(
            "loop_output",
            "loop_exit",
            [output._edge()],
            scope=self.scope,
            schema=output.schema,
            time_column=output.time_column,
        )
        return DataStream(self._env, node)

    def _loop(
        self,
        what: str,
        fn: Any,
        *,
        co: bool,
        feedback_memory: int | str,
        priority: str,
        spill_dir: str | os.PathLike[str] | None,
        feedback_schema: pa.Schema | None,
    ) -> DataStream:
        """Opens a loop, builds its body with ``fn`` and closes it; a failing body
        leaves nothing behind in the graph."""
        head = self._open_loop(
            what,
            co=co,
            feedback_memory=feedback_memory,
            priority=priority,
            spill_dir=spill_dir,
            feedback_schema=feedback_schema,
        )
        try:
            inner = DataStream(self._env, head)
            arg: Any = ConnectedStreams(inner, DataStream(self._env, head, port=1)) if co else inner
            result = call_loop_function(fn, arg, what)
            expected = feedback_schema if co else self.schema
            return self._close_loop(what, head, result, expected)
        except BaseException:
            if head.params.get("feedback_node") is None:
                _abandon_loop(self._env._graph, head)
            raise

    def iterate(
        self,
        loop_fn: LoopFunction | Callable[[DataStream], tuple[DataStream, DataStream]],
        *,
        feedback_memory: int | str = "64MiB",
        priority: str = "feedback_first",
        spill_dir: str | os.PathLike[str] | None = None,
    ) -> DataStream:
        """Runs ``loop_fn`` as a loop over this stream and returns the loop's output.

        ``loop_fn(stream)`` (or ``loop_fn.loop(stream)``) gets the stream
        inside the loop (this stream's records plus everything fed back) and
        returns ``(feedback, output)``. The feedback must have this stream's
        schema. Feedback is buffered without ever blocking the loop; above
        ``feedback_memory`` (per loop head subtask) it spills to ``spill_dir``
        (a temporary directory by default) as Arrow IPC. ``priority`` decides
        which input the loop head reads first: ``"feedback_first"``, or
        ``"adaptive"`` (feedback first only while it is above its memory
        budget, otherwise loop input and feedback take turns). The loop ends
        when its input ended and no record is left inside it; there is no
        timeout.

        Raises:
            ScopeError: If the feedback or output is not built inside the loop.
            SchemaError: If the feedback's schema differs from this stream's.
        """
        return self._loop(
            "iterate()",
            loop_fn,
            co=False,
            feedback_memory=feedback_memory,
            priority=priority,
            spill_dir=spill_dir,
            feedback_schema=None,
        )

    def iterate_with_feedback(
        self,
        co_loop_fn: CoLoopFunction | Callable[[ConnectedStreams], tuple[DataStream, DataStream]],
        *,
        feedback_schema: SchemaLike,
        feedback_memory: int | str = "64MiB",
        priority: str = "feedback_first",
        spill_dir: str | os.PathLike[str] | None = None,
    ) -> DataStream:
        """Like :meth:`iterate`, but the body sees the loop input and the feedback apart.

        ``co_loop_fn`` gets a :class:`ConnectedStreams` of (loop input,
        feedback) and returns ``(feedback, output)``; the feedback has
        ``feedback_schema``, which may differ from this stream's schema.
        """
        declared = _as_schema(feedback_schema, "iterate_with_feedback()")
        if declared is None:
            raise TypeError("iterate_with_feedback() needs a feedback_schema")
        return self._loop(
            "iterate_with_feedback()",
            co_loop_fn,
            co=True,
            feedback_memory=feedback_memory,
            priority=priority,
            spill_dir=spill_dir,
            feedback_schema=declared,
        )

    # ---- side outputs -------------------------------------------------------

    def side_output(self, tag: OutputTag) -> DataStream:
        """The side output ``tag`` of the operator producing this stream.

        A window given ``late_output=tag`` (see :meth:`KeyedStream.window`)
        emits its late records there, unchanged, with the window's input
        schema, in order with its other output and covered by checkpoints
        like any output. They are still counted in ``late_records``.

        Raises:
            TypeError: ``tag`` is not an :class:`OutputTag`.
            GraphError: The operator has no side output ``tag``.

        Example:
            >>> import eddyline as ed
            >>> env = ed.StreamEnvironment(1, batch_size=1)
            >>> rows = [{"k": "a", "t": 5000}, {"k": "a", "t": 1000}]
            >>> late = ed.OutputTag("late")
            >>> s = env.from_collection(rows).assign_timestamps("t")
            >>> counts = s.key_by("k").window(ed.Tumbling("1s"), late_output=late).count()
            >>> handle = counts.side_output(late).collect()
            >>> _ = env.execute()
            >>> handle.to_pylist()
            [{'k': 'a', 't': 1000}]
        """
        name = self._node.display_name
        if not isinstance(tag, OutputTag):
            raise TypeError(
                f"side_output() of operator '{name}' needs an ed.OutputTag, got {tag!r}"
            )
        entry = self._node.side_outputs.get(tag.name) if not self._port else None
        if entry is None:
            if self._port:
                what = "a side output or loop feedback stream has no side outputs"
            elif self._node.side_outputs:
                known = ", ".join(repr(t) for t in self._node.side_outputs)
                what = f"its side outputs are {known}"
            else:
                what = (
                    "only a window given the tag as window(..., late_output=tag) has a side output"
                )
            raise GraphError(
                f"operator '{name}' has no side output {tag.name!r}: {what}", operator=name
            )
        return DataStream(self._env, self._node, entry[0])

    # ---- sinks --------------------------------------------------------------

    def collect(self) -> CollectHandle:
        """Collects the stream's rows in the driver; read them after ``execute``.

        The handle takes ``.uid(...)`` and ``.name(...)`` like every sink.
        """
        stream = self._add("collect", "sink_collect", params={})
        handle = CollectHandle(
            stream._node.display_name, self.schema, DataStreamSink(self._env, stream._node)
        )
        stream._node.collect = handle
        return handle

    def sink_to(self, sink: ParquetSink | TwoPhaseCommitSink) -> DataStreamSink:
        """Writes the stream to ``sink`` (``ParquetSink`` or a ``TwoPhaseCommitSink``)."""
        if isinstance(sink, ParquetSink):
            options = {**self._env.storage_options, **sink.storage_options}
            params = {"dir": sink.dir, "storage_options": options}
            stream = self._add("parquet_sink", "sink_parquet", params=params)
        elif isinstance(sink, TwoPhaseCommitSink):
            stream = self._python(
                "sink",
                lambda name: RunnerFactory(TwoPhaseCommitRunner, name, sink, private=(1,)),
                schema=None,
                is_sink=True,
            )
            bind = getattr(sink, "_bind", None)  # sinks that check their target when attached
            if bind is not None:
                try:
                    bind(stream._node.display_name, self.schema)
                except BaseException:
                    self._env._graph.discard_last(stream._node)
                    raise
        else:
            raise TypeError(
                f"sink_to() needs an ed.ParquetSink or an ed.TwoPhaseCommitSink, got "
                f"{type(sink).__name__}"
            )
        return DataStreamSink(self._env, stream._node)


def _nullable(schema: pa.Schema | None) -> pa.Schema | None:
    """``schema`` with every field nullable (what a loop head emits)."""
    if schema is None:
        return None
    return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(x.type == y.type for x, y in zip(a, b, strict=True))


def _abandon_loop(graph: Any, head: LogicalNode) -> None:
    """Removes a loop whose function failed: its head and everything built on it."""
    while graph.nodes and graph.nodes[-1].id >= head.id:
        graph.nodes.pop()


class DataStreamSink(_Operators):
    """The handle :meth:`DataStream.sink_to` returns: name, uid and parallelism of the sink."""

    def __init__(self, env: StreamEnvironment, node: LogicalNode) -> None:
        self._env = env
        self._node = node

    def __repr__(self) -> str:
        return f"DataStreamSink({self._node.display_name!r})"


class KeyedStream:
    """A stream partitioned by key; every key is handled by one parallel instance.

    Aggregates are running: after each input batch they emit one updated row
    per key seen in that batch, holding the key columns and the aggregate.
    """

    def __init__(self, stream: DataStream, keys: list[str]) -> None:
        self._stream = stream
        self._keys = keys

    @property
    def keys(self) -> list[str]:
        """The key columns."""
        return list(self._keys)

    def __repr__(self) -> str:
        return f"KeyedStream({self._stream.operator_name!r}, keys={self._keys!r})"

    def _agg(self, agg: str, column: str | None) -> DataStream:
        if column is not None and not isinstance(column, str):
            raise TypeError(f"{agg}() needs a column name, got {column!r}")
        params = {"keys": list(self._keys), "agg": agg, "column": column}
        return self._stream._native(
            agg,
            "keyed_agg",
            params,
            keys=list(self._keys),
            columns=[column] if column is not None else [],
        )

    def sum(self, column: str) -> DataStream:
        """Running sum of ``column`` per key."""
        return self._agg("sum", column)

    def count(self) -> DataStream:
        """Running row count per key, in column ``count``."""
        return self._agg("count", None)

    def min(self, column: str) -> DataStream:
        """Running minimum of ``column`` per key."""
        return self._agg("min", column)

    def max(self, column: str) -> DataStream:
        """Running maximum of ``column`` per key."""
        return self._agg("max", column)

    def reduce(self, fn: Callable[[Row, Row], Row]) -> DataStream:
        """Running reduction per key: ``fn(acc_row, row) -> row`` (rows keep the input schema).

        After each input batch, emits the accumulated row of every key seen in
        that batch, in first-occurrence order.
        """
        _require_callable(fn, "reduce()")
        keys = list(self._keys)
        return self._stream._python(
            "reduce",
            lambda name: RunnerFactory(KeyedReduceRunner, name, keys, fn),
            schema=self._stream.schema,
            keys=keys,
        )

    def process(self, fn: ProcessFn, *, schema: SchemaLike | None = None) -> DataStream:
        """Runs a keyed function with per-key state.

        Args:
            fn: ``fn(row, ctx) -> iterable of rows | None``, or an
                :class:`~eddyline.ProcessFunction` (instance or subclass). ``ctx``
                has ``ctx.key``, ``ctx.state`` and ``ctx.get_state(name)``.
            schema: The output schema; inferred from the first output if omitted.
        """
        if isinstance(fn, type) and issubclass(fn, ProcessFunction):
            fn = fn()
        if not isinstance(fn, ProcessFunction):
            _require_callable(fn, "process()")
        keys = list(self._keys)
        declared = _as_schema(schema, "process()")
        private = (2,) if isinstance(fn, ProcessFunction) else ()
        function = fn
        time_column = self._stream.time_column
        return self._stream._python(
            "process",
            lambda name: RunnerFactory(
                KeyedProcessRunner, name, keys, function, declared, time_column, private=private
            ),
            schema=declared,
            keys=keys,
        )

    def dedup(self, ttl: Duration) -> DataStream:
        """Drops duplicate records per key within ``ttl`` of event time.

        The first record of a key is emitted; later records of that key are
        dropped until the watermark passes the first one's event time plus
        ``ttl``, after which the next record is emitted again (PySpark's
        ``dropDuplicatesWithinWatermark``, Flink SQL's keep-first-row
        deduplication with a state TTL). Needs event time
        (:meth:`DataStream.assign_timestamps` upstream). Its state can be
        recomputed: with ``CheckpointConfig(recovery="recompute")`` it is not
        persisted but rebuilt by replaying the input.

        Raises:
            GraphError: The stream has no event time.
            ValueError: ``ttl`` is not positive.

        Example:
            >>> import eddyline as ed
            >>> env = ed.StreamEnvironment()
            >>> s = env.from_collection([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 2, "v": 2}])
            >>> out = s.assign_timestamps("t").key_by("k").dedup("1s").collect()
            >>> _ = env.execute()
            >>> out.to_pylist()
            [{'k': 'a', 't': 1, 'v': 1}]
        """
        from ._exec.dedup import Deduplicate

        seconds = parse_duration(ttl, what="dedup ttl")
        if seconds <= 0:
            raise ValueError(f"dedup ttl must be positive, got {ttl!r}")
        if self._stream.time_column is None:
            raise GraphError(
                f"dedup(): stream '{self._stream.operator_name}' has no event time; call "
                "assign_timestamps(...) before key_by(...).dedup(...)"
            )
        return self.process(Deduplicate(round(seconds * 1000)), schema=self._stream.schema).name(
            "dedup"
        )

    def window(
        self, assigner: WindowAssigner, *, late_output: OutputTag | None = None
    ) -> WindowedStream:
        """Groups each key's records into event-time windows (``ed.Tumbling``, ``ed.Sliding``).

        The event time is the column given to the nearest upstream
        :meth:`DataStream.assign_timestamps`. Records arriving after all
        their windows fired are late: counted in the operator's
        ``late_records`` metric and dropped, or, with ``late_output``, sent
        unchanged to the window's side output, read with
        ``windowed_result.side_output(late_output)``.

        Raises:
            TypeError: ``late_output`` is not an :class:`OutputTag`.
            GraphError: The stream has no event time.

        Example:
            >>> import eddyline as ed
            >>> env = ed.StreamEnvironment()
            >>> s = env.from_collection([{"k": "a", "t": 1000, "v": 1}])
            >>> s.assign_timestamps("t").key_by("k").window(ed.Tumbling("10s"))
            WindowedStream(keys=['k'], Tumbling(size_ms=10000), time_column='t')
        """
        if not isinstance(assigner, WindowAssigner):
            raise TypeError(
                f"window() needs ed.Tumbling(size) or ed.Sliding(size, slide), got {assigner!r}"
            )
        if late_output is not None and not isinstance(late_output, OutputTag):
            raise TypeError(
                f"window(): late_output must be an ed.OutputTag, got {late_output!r} (after "
                f"operator '{self._stream.operator_name}')"
            )
        time_column = self._stream.time_column
        if time_column is None:
            raise GraphError(
                f"window() after '{self._stream.operator_name}': the stream has no event time; "
                "call .assign_timestamps(column) upstream first",
                operator=self._stream.operator_name,
            )
        schema = self._stream.schema
        if schema is not None and time_column not in schema.names:
            where = f"window after {self._stream.operator_name}"
            raise _missing_columns_error(where, time_column, schema, "event-time column")
        return WindowedStream(self, assigner, time_column, late_output)


class WindowedStream:
    """A keyed stream grouped into event-time windows (``keyed.window(assigner)``).

    Each window emits one row per key when the watermark passes its end:
    the key columns, ``window_start``, ``window_end`` (of the event-time
    column's type) and the result. Records arriving after all their windows
    fired are late: counted in the operator's ``late_records`` metric and
    dropped, or, if the window was given ``late_output=tag``, emitted
    unchanged on the result's ``side_output(tag)``.
    """

    def __init__(
        self,
        keyed: KeyedStream,
        assigner: WindowAssigner,
        time_column: str,
        late_output: OutputTag | None = None,
    ) -> None:
        self._keyed = keyed
        self._stream = keyed._stream
        self._assigner = assigner
        self._time_column = time_column
        self._late_output = late_output

    def _declare_late_output(self, stream: DataStream) -> DataStream:
        """Registers the late-record side output on the window's node."""
        stream._node.time_column = None
        if self._late_output is not None:
            stream._node.side_outputs[self._late_output.name] = (LATE_PORT, self._stream.schema)
        return stream

    @property
    def assigner(self) -> WindowAssigner:
        """The window assigner."""
        return self._assigner

    @property
    def time_column(self) -> str:
        """The event-time column."""
        return self._time_column

    def __repr__(self) -> str:
        return (
            f"WindowedStream(keys={self._keyed.keys!r}, {self._assigner!r}, "
            f"time_column={self._time_column!r})"
        )

    def _agg(self, agg: str, column: str | None) -> DataStream:
        if column is not None and not isinstance(column, str):
            raise TypeError(f"{agg}() needs a column name, got {column!r}")
        keys = self._keyed.keys
        params = {
            "keys": keys,
            "time_column": self._time_column,
            "assigner": self._assigner._to_param(),
            "agg": agg,
            "column": column,
        }
        columns = [self._time_column] + ([column] if column is not None else [])
        stream = self._stream._native(f"window_{agg}", "window", params, keys=keys, columns=columns)
        return self._declare_late_output(stream)

    def sum(self, column: str) -> DataStream:
        """The sum of ``column`` per key and window (nulls ignored)."""
        return self._agg("sum", column)

    def count(self) -> DataStream:
        """The number of records per key and window, in column ``count``."""
        return self._agg("count", None)

    def min(self, column: str) -> DataStream:
        """The minimum of ``column`` per key and window (nulls ignored)."""
        return self._agg("min", column)

    def max(self, column: str) -> DataStream:
        """The maximum of ``column`` per key and window (nulls ignored)."""
        return self._agg("max", column)

    def _python(
        self, op: str, mode: str, fn: Callable[..., Any], schema: pa.Schema | None
    ) -> DataStream:
        keys = self._keyed.keys
        size, slide = self._assigner.size_ms, self._assigner.slide_ms
        time_column = self._time_column
        late_output = self._late_output is not None
        stream = self._stream._python(
            op,
            lambda name: RunnerFactory(
                PythonWindowRunner,
                name,
                keys,
                size,
                slide,
                time_column,
                mode,
                fn,
                schema,
                late_output,
            ),
            schema=schema,
            keys=keys,
        )
        return self._declare_late_output(stream)

    def reduce(self, fn: Callable[[Row, Row], Row]) -> DataStream:
        """Reduces each key's records per window: ``fn(acc_row, row) -> row``.

        The first record of a window is its accumulator; each output row holds
        the key columns, ``window_start``, ``window_end``, then the other
        fields of the reduced row (which keeps the input schema).
        """
        _require_callable(fn, "reduce()")
        schema = self._stream.schema
        declared = (
            window_output_schema(schema, self._keyed.keys, self._time_column)
            if schema is not None
            else None
        )
        return self._python("window_reduce", "reduce", fn, declared)

    def apply(self, fn: WindowFn, *, schema: SchemaLike | None = None) -> DataStream:
        """Evaluates ``fn(key, window, rows)`` once per key and window when the window fires.

        ``key`` is the key value (a tuple for several key columns), ``window``
        an :class:`~eddyline.TimeWindow` (``start``/``end`` in ms), ``rows``
        the window's records as dicts in arrival order. ``fn`` returns an
        iterable of dicts (or ``None``); each output row is the key columns,
        ``window_start`` and ``window_end`` followed by the dict's fields (a
        field of the same name in the dict wins).

        Args:
            fn: The window function.
            schema: The full output schema (key columns and window bounds
                included); inferred from the first output if omitted.
        """
        _require_callable(fn, "apply()")
        return self._python("window_apply", "apply", fn, _as_schema(schema, "apply()"))


class ConnectedStreams:
    """Two streams feeding one two-input operator (``stream.connect(other)``)."""

    def __init__(self, first: DataStream, second: DataStream) -> None:
        self.first = first
        self.second = second

    def __repr__(self) -> str:
        return f"ConnectedStreams({self.first.operator_name!r}, {self.second.operator_name!r})"

    def _inputs(self) -> list[LogicalEdge]:
        return [self.first._edge(0), self.second._edge(1)]

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
        _require_callable(fn1, "map()")
        _require_callable(fn2, "map()")
        declared = _as_schema(schema, "map()")
        fns = (fn1, fn2)
        return self.first._python(
            "co_map",
            lambda name: RunnerFactory(ConnectedRecordRunner, name, fns, declared),
            schema=declared,
            inputs=self._inputs(),
        )

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
        _require_callable(fn1, "map_batches()")
        _require_callable(fn2, "map_batches()")
        declared = _as_schema(schema, "map_batches()")
        fns = (fn1, fn2)
        return self.first._python(
            "co_map_batches",
            lambda name: RunnerFactory(BatchRunner, name, fns, declared),
            schema=declared,
            inputs=self._inputs(),
        )
