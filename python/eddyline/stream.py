"""Streams and operators: :class:`DataStream` and :class:`DataStreamSink`.

A :class:`DataStream` is a typed stream of Arrow record batches. Per-record
functions (``map``, ``flat_map``, ``filter(fn)``) see each row as a ``dict``;
batch functions (``map_batches``) see ``pyarrow.RecordBatch`` objects; native
expressions (``filter(expr)``, ``with_columns``, ``select``) and keyed
aggregates run in Rust without the GIL.

The DSL's modules depend one way (docs/ARCHITECTURE.md): ``environment`` builds streams;
this module builds on ``keyed``, ``connected`` and ``loops``, generic in the stream type.

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
from typing import Any, Self, overload

import pyarrow as pa

from ._checks import SchemaLike, as_schema, missing_columns_error, require_callable
from ._exec.batches import BatchRunner
from ._exec.event_time import is_event_time_type
from ._exec.factory import RunnerFactory
from ._exec.global_commit import GlobalCommitRunner
from ._exec.two_phase import TwoPhaseCommitRunner
from ._explain import explain
from ._generators import explode_spec, generator_names, generator_of, select_explode_spec
from ._graph import LogicalEdge, LogicalGraph, LogicalNode
from ._specs import (
    AssignTimestampsSpec,
    FilterSpec,
    RecordStageSpec,
    SelectSpec,
    SinkCollectSpec,
    SinkDiscardSpec,
    UnionSpec,
    WithColumnsSpec,
)
from ._stream_core import StreamCore, StreamEnv
from .aggregates import GroupingWindow, reject_aggregate
from .config import Duration, parse_duration
from .connected import BroadcastConnectedStreams, BroadcastStream, ConnectedStreams
from .errors import GraphError, SchemaError, ScopeError
from .expr import Expr, ExprLike, col, lit
from .joins import JoinType, build_join, build_window_join
from .keyed import GroupedData, KeyedStream
from .loops import CoLoopFunction, LoopFunction, build_loop
from .process_functions import Row
from .scope import StreamScope
from .sinks import CollectHandle, DiscardSink, Sink, TwoPhaseCommitSink
from .windows import OutputTag, WindowAssigner

__all__ = ["DataStream", "DataStreamSink"]


class _Operators:
    """Behaviour shared by streams and sink handles: naming and parallelism."""

    _env: StreamEnv
    _node_id: int
    _node_serial: int

    @property
    def _node(self) -> LogicalNode:
        """The current version of the node this handle names (nodes are
        frozen; the graph holds the latest)."""
        return self._env._graph.node(self._node_id, self._node_serial)

    def name(self, name: str) -> Self:
        """Names the last operator (used in metrics, errors and logs); returns ``self``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"name() needs a non-empty str, got {name!r}")
        self._env._graph.update(self._node.id, name=name)
        handle = self._env._collects.get(self._node.id)
        if handle is not None:
            handle._operator = name
        return self

    def uid(self, uid: str) -> Self:
        """Sets the last operator's stable id (matches its state on restore); returns ``self``.

        Where the last operator only presents the state of the one before it
        (``group_by(F.window(...)).agg(...)``'s projection of the window aggregate),
        the id is that stateful operator's."""
        if not isinstance(uid, str) or not uid:
            raise TypeError(f"uid() needs a non-empty str, got {uid!r}")
        target = self._node.state_node
        if target is None:
            target = self._node.id
        for other in self._env._graph.nodes:
            if other.id != target and other.uid == uid:
                raise GraphError(
                    f"uid {uid!r} is already used by operator '{other.display_name}'",
                    operator=self._node.display_name,
                )
        self._env._graph.update(target, uid=uid)
        return self

    def set_parallelism(self, parallelism: int) -> Self:
        """Sets the last operator's parallelism; returns ``self``."""
        self._env._check_parallelism(parallelism, f"operator '{self._node.display_name}'")
        self._env._graph.update(self._node.id, parallelism=parallelism)
        return self

    @property
    def parallelism(self) -> int:
        """The last operator's parallelism (the environment's unless set)."""
        return self._env._graph.parallelism_of(self._node)

    @property
    def _plan(self) -> LogicalGraph:
        """The logical plan this stream's operators are added to (the DSL's
        modules build nodes through its methods)."""
        return self._env._graph


class DataStream(_Operators, StreamCore):
    """A stream of Arrow record batches; build on it with operator methods.

    Streams are created by the sources of a :class:`~eddyline.StreamEnvironment`.
    """

    def __init__(self, env: StreamEnv, node: LogicalNode, port: int = 0) -> None:
        self._env = env
        self._node_id = node.id
        self._node_serial = node.serial
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

    def _on(self, node: LogicalNode, port: int = 0) -> DataStream:
        """A stream of this environment reading output ``port`` of ``node``."""
        return DataStream(self._env, node, port)

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
            return getattr(self._node.spec, "feedback_schema", None)
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

    def _record(self, op: str, stage: RecordStageSpec) -> DataStream:
        """Adds a per-record Python stage (fused with its neighbours when compiled)."""
        return self._add(op, stage, schema=stage.output_schema)

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
        require_callable(fn, "map()")
        return self._record("map", RecordStageSpec("map", fn, as_schema(schema, "map()")))

    def flat_map(
        self, fn: Callable[[Row], Iterable[Row] | None], *, schema: SchemaLike | None = None
    ) -> DataStream:
        """Applies ``fn`` to every row and emits every dict of the iterable it returns.

        Args:
            fn: ``fn(row) -> iterable of rows`` (``None`` emits nothing).
            schema: The output schema; inferred from the first output if omitted.
        """
        require_callable(fn, "flat_map()")
        return self._record(
            "flat_map", RecordStageSpec("flat_map", fn, as_schema(schema, "flat_map()"))
        )

    def filter(self, predicate: Callable[[Row], Any] | Expr) -> DataStream:
        """Keeps the rows for which ``predicate`` is true.

        Args:
            predicate: A native boolean expression such as ``ed.col("x") > 0``
                (run in Rust), or a function ``fn(row) -> bool``.
        """
        reject_aggregate(predicate, "filter()")
        if isinstance(predicate, Expr):
            reads = list(predicate.columns())
            return self._native("filter", FilterSpec(predicate, reads), columns=reads)
        require_callable(predicate, "filter()")
        return self._record("filter", RecordStageSpec("filter", predicate, self.schema))

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
        require_callable(fn, "map_batches()")
        declared = as_schema(schema, "map_batches()")
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
            >>> s = ed.StreamEnvironment().from_sequence(0, 10)
            >>> s.with_columns(double=ed.col("value") * 2)  # doctest: +SKIP
        """
        if not exprs:
            raise TypeError("with_columns() needs at least one name=expression")
        for value in exprs.values():
            reject_aggregate(value, "with_columns()")
        [(only, first), *rest] = exprs.items()
        generator = generator_of(first) if isinstance(first, Expr) and not rest else None
        if generator is not None:
            if generator.position:
                raise GraphError(
                    f"with_columns({only}=...): posexplode makes two columns; use "
                    "select(..., F.posexplode(c).alias(pos, col)) or stream.posexplode(c)",
                    operator=self.operator_name,
                )
            return self.explode(generator.array, alias=only, outer=generator.outer)
        columns = [(name, lit(value)) for name, value in exprs.items()]
        used: dict[str, None] = {}
        for value in exprs.values():
            if isinstance(value, Expr):
                used.update(dict.fromkeys(value.columns()))
        spec = WithColumnsSpec(columns, list(used))
        return self._native("with_columns", spec, columns=used)

    def select(self, *cols: str | Expr) -> DataStream:
        """Keeps (and computes) the given columns, in order.

        Args:
            cols: Column names, or expressions; expressions other than a bare
                ``col(...)`` need ``.alias(name)``.
        """
        if not cols:
            raise TypeError("select() needs at least one column")
        columns: list[tuple[str, Expr]] = []
        used: dict[str, None] = {}
        for item in cols:
            reject_aggregate(item, "select()")
            expr = col(item) if isinstance(item, str) else item
            if not isinstance(expr, Expr):
                raise TypeError(f"select() takes column names or expressions, got {item!r}")
            name = expr.output_name
            generator = generator_of(expr)
            if generator is not None:
                # Spark's names for an unnamed generator's columns: col (and pos).
                name = generator_names(expr, generator, self.operator_name)[1]
            if name is None:
                raise TypeError(f"select(): expression {expr!r} needs a name: use .alias('name')")
            if any(existing == name for existing, _ in columns):
                raise GraphError(f"select(): column '{name}' is selected twice")
            columns.append((name, expr))
            used.update(dict.fromkeys(expr.columns()))
        exploded = select_explode_spec(columns, self.operator_name)
        if exploded is not None:
            return self._native("explode", exploded, columns=exploded.reads)
        return self._native("select", SelectSpec(columns, list(used)), columns=used)

    def explode(
        self, column: str | Expr, *, alias: str | None = None, outer: bool = False
    ) -> DataStream:
        """One row per element of an array column, the other columns repeated
        (a native flat-map, Spark's ``withColumn(alias, explode(column))``).

        Args:
            column: An array column's name, an array expression, or
                ``F.explode(...)`` / ``F.explode_outer(...)``.
            alias: The elements' column (replaced in place if it exists);
                default the column's name, else ``"col"`` as in Spark.
            outer: Keep rows whose array is null or empty, with a null
                element (``explode_outer``); otherwise they are dropped.
        """
        array = col(column) if isinstance(column, str) else column
        if not isinstance(array, Expr):
            raise TypeError(f"explode() takes a column name or an expression, got {column!r}")
        generator = generator_of(array)
        if generator is not None:
            if generator.position:
                return self.posexplode(array, alias=alias, outer=outer)
            outer, array = outer or generator.outer, generator.array
        name = alias if alias is not None else (array.output_name or "col")
        if not isinstance(name, str) or not name:
            raise TypeError(f"explode() needs a non-empty alias (str), got {alias!r}")
        spec = explode_spec(array, name, outer)
        return self._native("explode", spec, columns=spec.reads)

    def posexplode(
        self,
        column: str | Expr,
        *,
        alias: str | None = None,
        pos: str = "pos",
        outer: bool = False,
    ) -> DataStream:
        """:meth:`explode` with each element's 0-based position in its array
        (Spark's ``posexplode``): an ``int`` column ``pos`` (replaced in place
        if it exists, else appended), null for an ``outer`` row.

        Args:
            column: An array column's name, an array expression, or
                ``F.posexplode(...)`` / ``F.posexplode_outer(...)``.
            alias: The elements' column (replaced in place if it exists);
                default the column's name, else ``"col"`` as in Spark.
            pos: The positions' column.
            outer: Keep rows whose array is null or empty, with a null
                position and element (``posexplode_outer``).
        """
        array = col(column) if isinstance(column, str) else column
        if not isinstance(array, Expr):
            raise TypeError(f"posexplode() takes a column name or an expression, got {column!r}")
        generator = generator_of(array)
        if generator is not None:
            outer, array = outer or generator.outer, generator.array
        name = alias if alias is not None else (array.output_name or "col")
        for what, value in (("alias", name), ("pos", pos)):
            if not isinstance(value, str) or not value:
                raise TypeError(f"posexplode() needs a non-empty {what} (str), got {value!r}")
        if name == pos:
            raise GraphError(
                f"posexplode(): the position and the element are both named {pos!r}",
                operator=self.operator_name,
            )
        spec = explode_spec(array, name, outer, pos)
        return self._native("explode", spec, columns=spec.reads)

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
        own split's order. Other readers of the same source then read this
        stream's batches (the same rows, with its watermarks), so the
        assignment stays in the source's task; a source takes one
        ``assign_timestamps`` (a second one is a ``GraphError`` when the job
        is built): assign once and branch after it.

        Args:
            column: An Arrow timestamp column (any unit) or int64 milliseconds
                since the epoch; must not hold nulls.
            max_out_of_orderness: How far records may arrive out of order (a
                duration: seconds as a number, or a string like ``"250ms"``).
            idle_timeout: A split that delivered nothing for this long stops
                holding the watermark back until it delivers again (Flink's
                ``withIdleness``). Only right after a source (at its
                parallelism).

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
        idle_timeout_ms: int | None = None
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
            idle_timeout_ms = round(idle_ms)
        if self.schema is not None and column in self.schema.names:
            found = self.schema.field(column).type
            if not is_event_time_type(found):
                raise SchemaError(
                    f"operator 'assign_timestamps after {self.operator_name}': event-time column "
                    f"'{column}' has type {found}, expected a timestamp or int64 milliseconds",
                    operator=self.operator_name,
                )
        spec = AssignTimestampsSpec(column, bound_ms, idle_timeout_ms)
        stream = self._native("assign_timestamps", spec, columns=[column])
        stream._update_node(time_column=column)
        return stream

    def with_watermark(self, column: str, delay: Duration) -> DataStream:
        """Spark's spelling of :meth:`assign_timestamps` (``delay`` such as ``"10 seconds"``)."""
        return self.assign_timestamps(column, max_out_of_orderness=delay)

    def group_by(self, *cols: str | Expr | GroupingWindow) -> GroupedData[DataStream]:
        """Spark's ``groupBy``: key columns and at most one ``F.window``/``F.session_window``."""
        return GroupedData(self, cols)

    groupBy = group_by

    # ---- keyed, binary ------------------------------------------------------

    def key_by(self, keys: str | Sequence[str]) -> KeyedStream[DataStream]:
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
                    raise missing_columns_error(
                        f"key_by after {self.operator_name}", key, self.schema, "key column"
                    )
        return KeyedStream(self, key_list)

    def union(self, *streams: DataStream) -> DataStream:
        """Merges this stream with others of the same column names and types and scope;
        a column is nullable in the union when it is nullable in any input."""
        if not streams:
            return self
        for other in streams:
            self._same_env(other, "union()")
        schema = self.schema
        for other in streams:
            if schema is not None and other.schema is not None:
                if not _same_columns(schema, other.schema):
                    raise SchemaError(
                        f"union(): '{self.operator_name}' has schema\n{schema}\nbut "
                        f"'{other.operator_name}' has schema\n{other.schema}\nstreams of a "
                        "union must have the same column names and types",
                        operator=self.operator_name,
                    )
                schema = _merged_nullability(schema, other.schema)
        known = all(s.schema is not None for s in streams)
        inputs = [self._edge()] + [s._edge() for s in streams]
        return self._add("union", UnionSpec(), schema=schema if known else None, inputs=inputs)

    def join(
        self,
        right: DataStream,
        on: str | Sequence[str] | None = None,
        *,
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        how: JoinType = "inner",
        within: tuple[Duration, Duration] | None = None,
        state_ttl: Duration | None = None,
    ) -> DataStream:
        """Joins this stream (left) with ``right`` on equal keys (see :mod:`eddyline.joins`).

        Args:
            right: The right input (same scope and environment).
            on: Key columns named alike on both sides; or ``left_on`` and ``right_on``.
            how: ``"inner"``, or with ``within``: ``"left"``, ``"right"``, ``"outer"``.
            within: ``(lower, upper)``: an interval join,
                ``left.ts + lower <= right.ts <= left.ts + upper``; both
                inputs need ``assign_timestamps``.
            state_ttl: Without ``within``: drop rows once the watermark passes
                their time + ``state_ttl`` (both inputs need timestamps).

        Raises:
            GraphError: If keys, ``how`` or the bounds are wrong, or a schema is unknown.
            SchemaError: If the key types of the two sides differ.
        """
        return build_join(
            self,
            right,
            on=on,
            left_on=left_on,
            right_on=right_on,
            how=how,
            within=within,
            state_ttl=state_ttl,
        )

    def temporal_join(
        self,
        versions: DataStream,
        on: str | Sequence[str] | None = None,
        *,
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        how: JoinType = "inner",
    ) -> DataStream:
        """Joins each row with the newest row of ``versions`` at or before its time.

        ``versions`` is an upsert stream keyed by ``on`` with its own
        timestamps; a row is emitted once the watermark passes its time
        (``how="left"`` keeps rows without a version, with nulls). Both
        inputs need ``assign_timestamps``. See :mod:`eddyline.joins`.
        """
        return build_join(
            self, versions, on=on, left_on=left_on, right_on=right_on, how=how, temporal=True
        )

    def window_join(
        self,
        right: DataStream,
        on: str | Sequence[str] | None = None,
        *,
        window: WindowAssigner,
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        how: JoinType = "inner",
    ) -> DataStream:
        """Pairs rows of equal keys in the same window when it fires (see :mod:`eddyline.joins`).

        ``window`` is an ``ed.Tumbling(size)`` or ``ed.Sliding(size, slide)``; both inputs need
        ``assign_timestamps``. Rows: the keys, ``window_start``,
        ``window_end``, then the left's and the right's other columns.
        """
        return build_window_join(
            self, right, on=on, left_on=left_on, right_on=right_on, window=window, how=how
        )

    @overload
    def connect(self, other: DataStream) -> ConnectedStreams[DataStream]: ...

    @overload
    def connect(
        self, other: BroadcastStream[DataStream]
    ) -> BroadcastConnectedStreams[DataStream]: ...

    def connect(
        self, other: DataStream | BroadcastStream
    ) -> ConnectedStreams[DataStream] | BroadcastConnectedStreams[DataStream]:
        """Connects two streams (possibly of different schemas) for a two-input operator;
        with ``other.broadcast()``, for a :class:`~eddyline.BroadcastProcessFunction`."""
        if isinstance(other, BroadcastStream):
            self._same_env(other.stream, "connect()")
            return BroadcastConnectedStreams(self, other)
        self._same_env(other, "connect()")
        return ConnectedStreams(self, other)

    def broadcast(self) -> BroadcastStream[DataStream]:
        """This stream, read whole by every subtask of the operator it is connected to."""
        return BroadcastStream(self)

    # ---- loops --------------------------------------------------------------

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
        return build_loop(
            self,
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
        declared = as_schema(feedback_schema, "iterate_with_feedback()")
        if declared is None:
            raise TypeError("iterate_with_feedback() needs a feedback_schema")
        return build_loop(
            self,
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
        like any output. They are still counted in ``late_records``. A keyed
        :class:`~eddyline.ProcessFunction` emits there what it passes to
        ``ctx.output(tag, row)``; asking for the side output declares it (rows
        for a tag nobody asked for are dropped, as in Flink).

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
        declares = getattr(self._node.spec, "declares_side_outputs", False)
        if entry is None and not self._port and declares:
            # A process function's side output: declared by asking for it.
            port = 1 + max((p for p, _ in self._node.side_outputs.values()), default=0)
            entry = self._node.side_outputs[tag.name] = (port, tag.schema)
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

    # ---- SQL ----------------------------------------------------------------

    def create_temporary_view(self, name: str, *, state_ttl: Duration | None = None) -> None:
        """Registers this stream as the view ``name`` of its environment's
        ``env.sql`` queries (``env.create_temporary_view(name, self, state_ttl=...)``)."""
        self._env.create_temporary_view(name, self, state_ttl=state_ttl)

    # ---- plan ---------------------------------------------------------------

    def explain(self) -> str:
        """The plan of everything that leads to this stream, as the job would run it.

        One task per chain of operators that run together in one thread, with its
        parallelism; under it each operator (per-record Python functions fused into
        one), its uid, its inputs and how they are partitioned (``forward``,
        ``rebalance``, ``broadcast``, ``hash(keys)``), its side outputs, its
        event-time column and its output schema where known before running
        (docs/API.md "Explaining a job"). The text displays as the plan in a REPL;
        ``print`` it in a script.

        Raises:
            GraphError, SchemaError, ScopeError: If the graph is invalid, as
                ``execute`` would.

        Example:
            >>> import eddyline as ed
            >>> env = ed.StreamEnvironment(parallelism=2)
            >>> rows = env.from_collection([{"k": "a", "v": 1}])
            >>> sums = rows.filter(ed.col("v") > 0).key_by("k").sum("v")
            >>> print(sums.explain())
            eddyline plan: 2 tasks, 3 operators
            task 0 (parallelism 2):
              [0] source_arrow 'from_collection_0'  uid 'source_arrow-0' (generated)
                  schema: k: string, v: int64
              [1] filter 'filter_1'  uid 'filter-1' (generated)
                  input: [0] forward
                  schema: k: string, v: int64
            task 1 (parallelism 2):
              [2] keyed_agg 'sum_2'  uid 'keyed_agg-2' (generated)
                  input: [1] hash(k)
                  schema: k: string, v: int64
        """
        return explain(self._env._graph, [self._node.id], self._env.max_parallelism, complete=False)

    # ---- sinks --------------------------------------------------------------

    def collect(self) -> CollectHandle:
        """Collects the stream's rows in the driver; read them after ``execute``.

        The handle takes ``.uid(...)`` and ``.name(...)`` like every sink.
        """
        stream = self._add("collect", SinkCollectSpec())
        handle = CollectHandle(
            stream._node.display_name, self.schema, DataStreamSink(self._env, stream._node)
        )
        self._env._collects[stream._node.id] = handle
        return handle

    def sink_to(self, sink: Sink) -> DataStreamSink:
        """Writes the stream to ``sink`` (``ParquetSink``, a ``TwoPhaseCommitSink``, or
        ``DiscardSink`` to drop it)."""
        if isinstance(sink, DiscardSink):
            stream = self._add("discard_sink", SinkDiscardSpec())
        elif (native_sink := getattr(sink, "_native_sink", None)) is not None:
            # A sink the engine writes itself (ParquetSink): it plans its own node.
            default_name, spec, probe_native = native_sink(self._env.storage_options)
            stream = self._add(default_name, spec)
            if probe_native is not None:
                sink_stream = stream
                self._env._before_run.append(
                    lambda _restore: probe_native(sink_stream.operator_name)
                )
        elif isinstance(sink, TwoPhaseCommitSink):
            # A sink with one committer per checkpoint (DeltaSink) runs on its own
            # executor (docs/DESIGN.md "One commit per checkpoint").
            runner = GlobalCommitRunner if getattr(sink, "_global_committer", False) else None
            bind_storage = getattr(sink, "_bind_storage", None)
            if bind_storage is not None:
                bind_storage(self._env.storage_options)
            stream = self._python(
                "sink",
                lambda name: RunnerFactory(
                    runner or TwoPhaseCommitRunner, name, sink, private=(1,)
                ),
                schema=None,
                is_sink=True,
            )
            probe = getattr(sink, "_probe_storage", None)  # built-in sinks on an object store
            if probe is not None:
                sink_stream = stream
                self._env._before_run.append(lambda _restore: probe(sink_stream.operator_name))
            bind = getattr(sink, "_bind", None)  # sinks that check their target when attached
            if bind is not None:
                try:
                    bind(stream._node.display_name, self.schema)
                except BaseException:
                    self._env._graph.discard_last(stream._node)
                    raise
        else:
            raise TypeError(
                f"sink_to() needs an ed.ParquetSink, an ed.TwoPhaseCommitSink or an "
                f"ed.DiscardSink, got "
                f"{type(sink).__name__}"
            )
        return DataStreamSink(self._env, stream._node)


class DataStreamSink(_Operators):
    """The handle :meth:`DataStream.sink_to` returns: name, uid and parallelism of the sink."""

    def __init__(self, env: StreamEnv, node: LogicalNode) -> None:
        self._env = env
        self._node_id = node.id
        self._node_serial = node.serial

    def __repr__(self) -> str:
        return f"DataStreamSink({self._node.display_name!r})"


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    """Whether two schemas have the same column names and types (a union's inputs
    may differ in nullability and metadata)."""
    return a.names == b.names and a.types == b.types


def _merged_nullability(a: pa.Schema, b: pa.Schema) -> pa.Schema:
    """``a`` with every column nullable that is nullable in ``a`` or ``b`` and no
    metadata: a union's output schema, as the engine computes it (union.rs)."""
    return pa.schema(
        pa.field(fa.name, fa.type, fa.nullable or fb.nullable) for fa, fb in zip(a, b, strict=True)
    )
