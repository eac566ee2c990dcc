"""Keyed and windowed streams: :class:`KeyedStream` (``stream.key_by(...)``) and
:class:`WindowedStream` (``keyed.window(...)``).

Keyed aggregates and windows run natively, on the keyed state layer (DESIGN.md
"Keyed state layer and the operators on it"); ``reduce``, ``process``,
``dedup`` and window functions run Python per key. Every method builds on the
:class:`~eddyline.DataStream` it was keyed from and returns a new one.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> env.from_collection([{"k": 1, "v": 2}]).key_by("k")
    KeyedStream('from_collection_0', keys=['k'])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias

import pyarrow as pa

from ._checks import SchemaLike, as_schema, missing_columns_error, require_callable
from ._core import Expr
from ._exec.dedup import Deduplicate
from ._exec.factory import RunnerFactory
from ._exec.keyed import KeyedReduceRunner
from ._exec.process import KeyedProcessRunner
from ._exec.session import PythonSessionRunner
from ._exec.window import LATE_PORT, PythonWindowRunner, WindowTime, window_output_schema
from ._specs import (
    AggregateSpec,
    KeyedAggSpec,
    KeyedAggsSpec,
    SelectSpec,
    SessionAggsSpec,
    SessionWindowSpec,
    WindowAggsSpec,
    WindowSpec,
)
from ._stream_core import S
from .aggregates import AggregateColumn, GroupingWindow
from .aggregates import count as count_rows
from .config import Duration, parse_duration
from .errors import GraphError
from .expr import col
from .over import over_range, over_rows
from .process_functions import ProcessContext, ProcessFunction, Row
from .windows import OutputTag, Session, Sliding, TimeWindow, Tumbling, WindowAssigner

if TYPE_CHECKING:
    from .connected import BroadcastConnectedStreams, BroadcastStream

__all__ = ["GroupedData", "KeyedStream", "WindowedStream"]

ProcessFn: TypeAlias = (
    ProcessFunction | type[ProcessFunction] | Callable[[Row, ProcessContext], Any]
)
WindowFn: TypeAlias = Callable[[Any, TimeWindow, list[Row]], Iterable[Row] | None]
"""``fn(key, window, rows) -> iterable of rows`` for :meth:`WindowedStream.apply`."""


class KeyedStream(Generic[S]):
    """A stream partitioned by key; every key is handled by one parallel instance.

    Aggregates are running: after each input batch they emit one updated row
    per key seen in that batch, holding the key columns and the aggregate.
    """

    def __init__(self, stream: S, keys: list[str]) -> None:
        self._stream = stream
        self._keys = keys

    @property
    def keys(self) -> list[str]:
        """The key columns."""
        return list(self._keys)

    def __repr__(self) -> str:
        return f"KeyedStream({self._stream.operator_name!r}, keys={self._keys!r})"

    def _agg(self, agg: str, column: str | None) -> S:
        if column is not None and not isinstance(column, str):
            raise TypeError(f"{agg}() needs a column name, got {column!r}")
        return self._stream._native(
            agg,
            KeyedAggSpec(list(self._keys), agg, column),  # type: ignore[arg-type]
            keys=list(self._keys),
            columns=[column] if column is not None else [],
        )

    def sum(self, column: str) -> S:
        """Running sum of ``column`` per key."""
        return self._agg("sum", column)

    def count(self) -> S:
        """Running row count per key, in column ``count``."""
        return self._agg("count", None)

    def min(self, column: str) -> S:
        """Running minimum of ``column`` per key."""
        return self._agg("min", column)

    def max(self, column: str) -> S:
        """Running maximum of ``column`` per key."""
        return self._agg("max", column)

    def agg(self, *aggregates: AggregateColumn) -> S:
        """Running aggregates per key, natively: ``F.sum``, ``F.count`` (``"*"``
        for rows), ``F.avg``, ``F.min``, ``F.max``, ``F.count_distinct``,
        ``F.approx_count_distinct``, ``F.approx_percentile``, ``F.first``,
        ``F.last``, ``F.collect_list``, ``F.collect_set``, ``F.stddev``,
        ``F.variance`` and their Spark synonyms (``import eddyline.functions as F``).

        After each input batch, emits one row per key seen in that batch, in
        first-occurrence order: the key columns, then every aggregate's
        current value under its ``.alias`` or Spark's default name
        (``avg(y)``, ``count(1)``): an upsert stream of the current values
        per key. The accumulators' states are checkpointed per key group
        (incrementally), restore at another parallelism and are read by
        :func:`~eddyline.read_state` (the keys and current values).

        Raises:
            TypeError: An argument is not an aggregate of ``eddyline.functions``.
            GraphError: No aggregate, two of one name, or a name of a key column.
            SchemaError: An aggregate's column has a type it does not take
                (the message names the aggregate and the column).

        Example:
            >>> import eddyline as ed
            >>> import eddyline.functions as F
            >>> env = ed.StreamEnvironment()
            >>> s = env.from_collection([{"k": "a", "y": 1.0}, {"k": "a", "y": 3.0}])
            >>> out = s.key_by("k").agg(F.count("*"), F.avg("y")).collect()
            >>> _ = env.execute()
            >>> out.to_pylist()
            [{'k': 'a', 'count(1)': 2, 'avg(y)': 2.0}]
        """
        specs = _aggregate_specs("agg()", aggregates)
        keys = list(self._keys)
        reads: dict[str, None] = dict.fromkeys(keys)
        for a in aggregates:
            reads.update(dict.fromkeys(a.columns()))
        return self._stream._native(
            "agg", KeyedAggsSpec(keys, specs), keys=keys, columns=list(reads)
        )

    def over_rows(
        self,
        *aggregates: AggregateColumn,
        preceding: int | None,
        order_by: str | Sequence[str] = (),
    ) -> S:
        """Each row with the aggregates of its key's last rows in event time: SQL's
        ``agg(col) OVER (PARTITION BY keys ORDER BY <event time>, order_by ROWS BETWEEN
        preceding PRECEDING AND CURRENT ROW)``, Flink's OVER aggregation;
        ``preceding=None`` is ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``, a
        running aggregate of every row of the key so far (its state per key is the
        accumulators alone, not the rows).

        A row waits until the watermark passes its event time; then each key's rows
        are taken in event-time order (rows of one time ordered by the ``order_by``
        columns, then by all their columns, so ties give one result), and each is
        emitted once with every aggregate (``F.sum``, ``F.count`` (``"*"`` for rows),
        ``F.avg``, ``F.min``, ``F.max`` of a column; nulls ignored) over itself and the
        ``preceding`` rows of its key before it, under its ``.alias`` or Spark's default
        name (``avg(v)``). Output: the input's columns, then the aggregates; one row per
        input row, append-only, timed by its own event time. A row at or before the
        watermark when it arrives is late: counted in ``late_records`` and dropped.
        The held rows and each key's last rows (or running aggregates) are
        checkpointed per key group and restore at another parallelism.

        Raises:
            TypeError: An argument is not an aggregate of ``eddyline.functions``.
            ValueError: ``preceding`` is not a whole number >= 0 or None.
            GraphError: The stream has no event time; an aggregate other than sum,
                count, avg, min or max, or of an expression; two of one name.
            SchemaError: An aggregate's column is not numeric.

        Example:
            >>> import eddyline as ed
            >>> import eddyline.functions as F
            >>> env = ed.StreamEnvironment()
            >>> rows = [{"k": "a", "t": t, "v": v} for t, v in [(1, 1), (2, 3), (3, 8)]]
            >>> s = env.from_collection(rows).assign_timestamps("t")
            >>> out = s.key_by("k").over_rows(F.avg("v").alias("m"), preceding=1).collect()
            >>> _ = env.execute()
            >>> [r["m"] for r in out.to_pylist()]
            [1.0, 2.0, 5.5]
        """
        stream = self._stream
        if stream.time_column is None and stream._node.window_end is not None:
            stream = _with_window_time(stream)  # a window's results: timed by its end - 1 ms
        return over_rows(stream, list(self._keys), aggregates, preceding, order_by)

    def over_range(self, *aggregates: AggregateColumn, preceding: Duration | None) -> S:
        """Each row with the aggregates of its key's rows of the last ``preceding`` of
        event time: SQL's ``agg(col) OVER (PARTITION BY keys ORDER BY <event time>
        RANGE BETWEEN INTERVAL preceding PRECEDING AND CURRENT ROW)``, Flink's range
        OVER aggregation; ``preceding=None`` is ``RANGE BETWEEN UNBOUNDED PRECEDING AND
        CURRENT ROW`` (SQL's default frame of an ``OVER`` with ``ORDER BY``).

        As :meth:`over_rows`, rows wait until the watermark passes their event time,
        late rows are counted in ``late_records`` and dropped, and each row is emitted
        once with the aggregates; the frame of a row of time ``t`` is every row of its
        key whose time is in ``[t - preceding, t]`` (all rows up to ``t`` for None), so
        rows of one time (peers) all get the same values, computed over all of them.
        A bounded frame keeps each key's rows of the last ``preceding``; an unbounded
        one only its running aggregates.

        Raises:
            TypeError: An argument is not an aggregate of ``eddyline.functions``.
            ValueError: ``preceding`` is not a duration of whole milliseconds >= 0.
            GraphError: The stream has no event time; an aggregate other than sum,
                count, avg, min or max, or of an expression; two of one name.
            SchemaError: An aggregate's column is not numeric.

        Example:
            >>> import eddyline as ed
            >>> import eddyline.functions as F
            >>> env = ed.StreamEnvironment()
            >>> times = [(0, 1), (1000, 3), (1000, 4), (2500, 8)]
            >>> rows = [{"k": "a", "t": t, "v": v} for t, v in times]
            >>> s = env.from_collection(rows).assign_timestamps("t")
            >>> out = s.key_by("k").over_range(F.sum("v").alias("s"), preceding="1s").collect()
            >>> _ = env.execute()
            >>> sorted((r["t"], r["s"]) for r in out.to_pylist())
            [(0, 1), (1000, 8), (1000, 8), (2500, 8)]
        """
        stream = self._stream
        if stream.time_column is None and stream._node.window_end is not None:
            stream = _with_window_time(stream)  # a window's results: timed by its end - 1 ms
        return over_range(stream, list(self._keys), aggregates, preceding)

    def connect(self, other: BroadcastStream[S]) -> BroadcastConnectedStreams[S]:
        """Connects a broadcast stream (``rules.broadcast()``) for a
        :class:`~eddyline.BroadcastProcessFunction` (or
        :class:`~eddyline.KeyedBroadcastProcessFunction`) with keyed state and
        timers: ``keyed.connect(rules.broadcast()).process(fn)``.

        Raises:
            TypeError: ``other`` is not a broadcast stream (two keyed inputs are
                ``a.connect(b).key_by(key_a, key_b)``).
        """
        from .connected import BroadcastConnectedStreams, BroadcastStream

        if not isinstance(other, BroadcastStream):
            raise TypeError(
                "keyed.connect() needs a broadcast stream (rules.broadcast()); connect two "
                "keyed inputs with a.connect(b).key_by(key_a, key_b)"
            )
        self._stream._same_env(other.stream, "connect()")
        return BroadcastConnectedStreams(self._stream, other, self._keys)

    def reduce(self, fn: Callable[[Row, Row], Row]) -> S:
        """Running reduction per key: ``fn(acc_row, row) -> row`` (rows keep the input schema).

        After each input batch, emits the accumulated row of every key seen in
        that batch, in first-occurrence order.
        """
        require_callable(fn, "reduce()")
        keys = list(self._keys)
        return self._stream._python(
            "reduce",
            lambda name: RunnerFactory(KeyedReduceRunner, name, keys, fn),
            schema=self._stream.schema,
            keys=keys,
        )

    def process(self, fn: ProcessFn, *, schema: SchemaLike | None = None) -> S:
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
            require_callable(fn, "process()")
        keys = list(self._keys)
        declared = as_schema(schema, "process()")
        private = (2,) if isinstance(fn, ProcessFunction) else ()
        function = fn
        time_column = self._stream.time_column
        # Side outputs (tag name -> (port, schema)), declared by
        # stream.side_output(tag) until the job is compiled.
        ports: dict[str, tuple[int, pa.Schema | None]] = {}
        stream = self._stream._python(
            "process",
            lambda name: RunnerFactory(
                KeyedProcessRunner,
                name,
                keys,
                function,
                declared,
                time_column,
                ports,
                private=private,
            ),
            schema=declared,
            keys=keys,
            declares_side_outputs=True,
        )
        stream._update_node(side_outputs=ports)
        return stream

    def dedup(self, ttl: Duration) -> S:
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
        self, assigner: WindowAssigner | Session, *, late_output: OutputTag | None = None
    ) -> WindowedStream[S]:
        """Groups each key's records into event-time windows (``ed.Tumbling``,
        ``ed.Sliding``, ``ed.Session``).

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
        if not isinstance(assigner, WindowAssigner | Session):
            raise TypeError(
                "window() needs ed.Tumbling(size), ed.Sliding(size, slide) or ed.Session(gap), "
                f"got {assigner!r}"
            )
        if late_output is not None and not isinstance(late_output, OutputTag):
            raise TypeError(
                f"window(): late_output must be an ed.OutputTag, got {late_output!r} (after "
                f"operator '{self._stream.operator_name}')"
            )
        keyed = self
        time_column = self._stream.time_column
        if time_column is None and self._stream._node.window_end is not None:
            keyed = KeyedStream(_with_window_time(self._stream), self._keys)
            time_column = keyed._stream.time_column
        if time_column is None:
            raise GraphError(
                f"window() after '{self._stream.operator_name}': the stream has no event time; "
                "call .assign_timestamps(column) upstream first",
                operator=self._stream.operator_name,
            )
        schema = keyed._stream.schema
        if schema is not None and time_column not in schema.names:
            where = f"window after {self._stream.operator_name}"
            raise missing_columns_error(where, time_column, schema, "event-time column")
        return WindowedStream(keyed, assigner, time_column, late_output)


def _aggregate_specs(where: str, aggregates: tuple[AggregateColumn, ...]) -> list[AggregateSpec]:
    """The specs of ``.agg(...)``'s aggregates, checked to be ``F``'s aggregates."""
    if not aggregates:
        raise GraphError(f"{where} needs at least one aggregate, such as F.count('*')")
    specs = []
    for a in aggregates:
        if not isinstance(a, AggregateColumn):
            raise TypeError(
                f"{where} takes aggregates of eddyline.functions (F.sum('x'), F.count('*'), "
                f"...), got {a!r}"
            )
        specs.append(AggregateSpec(a.function, list(a.args), a.name))
    return specs


WINDOW_TIME = "window_time"
"""The column a window's result gets when another window reads it: its event time."""


def _with_window_time(stream: S) -> S:
    """``stream`` (rows derived from a window's results) with column ``window_time``,
    their event time: the window's end minus 1 ms, Flink's timestamp of a window
    result (docs/API.md "Chaining windows"), as its event-time column. Integer
    times are computed natively; timestamps by one vectorized batch function."""
    end = stream._node.window_end
    assert end is not None  # invariant: the caller checked it
    schema = stream.schema
    if schema is not None and end not in schema.names:
        raise GraphError(
            f"window() after '{stream.operator_name}': the stream has no event time; a "
            f"window's results carry it in column {end!r}, which this stream no longer has",
            operator=stream.operator_name,
        )
    if schema is not None and WINDOW_TIME in schema.names:
        raise GraphError(
            f"window() after '{stream.operator_name}': the stream already has a column "
            f"{WINDOW_TIME!r}; rename it to chain a window on the results of another",
            operator=stream.operator_name,
        )
    end_type = schema.field(end).type if schema is not None else None
    if end_type is not None and pa.types.is_integer(end_type):
        timed = stream.with_columns(**{WINDOW_TIME: col(end) - 1})
    else:
        declared = (
            schema.append(pa.field(WINDOW_TIME, end_type, nullable=False))
            if schema is not None and end_type is not None
            else None
        )
        timed = stream.map_batches(WindowTime(end), schema=declared)
    timed = timed.name(WINDOW_TIME)
    timed._update_node(time_column=WINDOW_TIME)
    return timed


class WindowedStream(Generic[S]):
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
        keyed: KeyedStream[S],
        assigner: WindowAssigner | Session,
        time_column: str,
        late_output: OutputTag | None = None,
    ) -> None:
        self._keyed = keyed
        self._stream = keyed._stream
        self._assigner = assigner
        self._time_column = time_column
        self._late_output = late_output

    def _declare_late_output(self, stream: S) -> S:
        """Registers the late-record side output on the window's node; its results'
        event time is ``window_end`` minus 1 ms (read by a window downstream)."""
        late = self._late_output
        side_outputs = {late.name: (LATE_PORT, self._stream.schema)} if late is not None else {}
        stream._update_node(time_column=None, window_end="window_end", side_outputs=side_outputs)
        return stream

    @property
    def assigner(self) -> WindowAssigner | Session:
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

    def _agg(self, agg: str, column: str | None) -> S:
        if column is not None and not isinstance(column, str):
            raise TypeError(f"{agg}() needs a column name, got {column!r}")
        keys = self._keyed.keys
        columns = [self._time_column] + ([column] if column is not None else [])
        if isinstance(self._assigner, Session):
            session = SessionWindowSpec(
                keys,
                self._time_column,
                self._assigner.gap_ms,
                agg,  # type: ignore[arg-type]
                column,
            )
            stream = self._stream._native(f"session_{agg}", session, keys=keys, columns=columns)
            return self._declare_late_output(stream)
        spec = WindowSpec(
            keys,
            self._time_column,
            self._assigner._to_spec(),
            agg,  # type: ignore[arg-type]
            column,
        )
        stream = self._stream._native(f"window_{agg}", spec, keys=keys, columns=columns)
        return self._declare_late_output(stream)

    def sum(self, column: str) -> S:
        """The sum of ``column`` per key and window (nulls ignored)."""
        return self._agg("sum", column)

    def count(self) -> S:
        """The number of records per key and window, in column ``count``."""
        return self._agg("count", None)

    def min(self, column: str) -> S:
        """The minimum of ``column`` per key and window (nulls ignored)."""
        return self._agg("min", column)

    def max(self, column: str) -> S:
        """The maximum of ``column`` per key and window (nulls ignored)."""
        return self._agg("max", column)

    def agg(self, *aggregates: AggregateColumn) -> S:
        """Aggregates of ``eddyline.functions`` (``F.count("*")``, ``F.avg``,
        ``F.approx_percentile``... as :meth:`KeyedStream.agg`) per key and
        tumbling, sliding or session window, natively.

        When the watermark passes a window's end, emits one row per key: the
        key columns, ``window_start``, ``window_end``, then every aggregate
        under its ``.alias`` or Spark's default name. Late records as for the
        other window aggregates. Sessions that a record bridges merge their
        accumulators' states (``first``/``last``/``collect_list`` then see
        the merged sessions' rows in order of their start, each in arrival
        order, before the rows of the batch that merged them).

        Raises:
            TypeError: An argument is not an aggregate of ``eddyline.functions``.
            GraphError: No aggregate; a name clash.
            SchemaError: An aggregate's column has a type it does not take.

        Example:
            >>> import eddyline as ed
            >>> import eddyline.functions as F
            >>> env = ed.StreamEnvironment()
            >>> rows = [{"k": "a", "t": 1000, "v": 1.0}, {"k": "a", "t": 2000, "v": 3.0}]
            >>> s = env.from_collection(rows)
            >>> w = s.assign_timestamps("t").key_by("k").window(ed.Tumbling("10s"))
            >>> out = w.agg(F.count("*"), F.avg("v")).collect()
            >>> _ = env.execute()
            >>> out.to_pylist()
            [{'k': 'a', 'window_start': 0, 'window_end': 10000, 'count(1)': 2, 'avg(v)': 2.0}]
        """
        specs = _aggregate_specs("agg()", aggregates)
        keys = self._keyed.keys
        reads: dict[str, None] = dict.fromkeys([*keys, self._time_column])
        for a in aggregates:
            reads.update(dict.fromkeys(a.columns()))
        if isinstance(self._assigner, Session):
            session = SessionAggsSpec(keys, self._time_column, self._assigner.gap_ms, specs)
            stream = self._stream._native("session_agg", session, keys=keys, columns=list(reads))
            return self._declare_late_output(stream)
        spec = WindowAggsSpec(keys, self._time_column, self._assigner._to_spec(), specs)
        stream = self._stream._native("window_agg", spec, keys=keys, columns=list(reads))
        return self._declare_late_output(stream)

    def _python(self, op: str, mode: str, fn: Callable[..., Any], schema: pa.Schema | None) -> S:
        keys = self._keyed.keys
        if isinstance(self._assigner, Session):
            gap, column, late = self._assigner.gap_ms, self._time_column, self._late_output
            stream = self._stream._python(
                op,
                lambda name: RunnerFactory(
                    PythonSessionRunner, name, keys, gap, column, mode, fn, schema, late is not None
                ),
                schema=schema,
                keys=keys,
            )
            return self._declare_late_output(stream)
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

    def reduce(self, fn: Callable[[Row, Row], Row]) -> S:
        """Reduces each key's records per window: ``fn(acc_row, row) -> row``.

        The first record of a window is its accumulator; each output row holds
        the key columns, ``window_start``, ``window_end``, then the other
        fields of the reduced row (which keeps the input schema).
        """
        require_callable(fn, "reduce()")
        schema = self._stream.schema
        declared = (
            window_output_schema(schema, self._keyed.keys, self._time_column)
            if schema is not None
            else None
        )
        return self._python("window_reduce", "reduce", fn, declared)

    def apply(self, fn: WindowFn, *, schema: SchemaLike | None = None) -> S:
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
        require_callable(fn, "apply()")
        return self._python("window_apply", "apply", fn, as_schema(schema, "apply()"))


GROUP_ALL = "__eddyline_group"
"""The constant key of a grouping by a window alone (one group per window)."""


class GroupedData(Generic[S]):
    """Spark's spelling of a grouping, ``stream.group_by(*cols)``: key
    columns, and at most one :func:`~eddyline.functions.window` or
    :func:`~eddyline.functions.session_window`. ``.agg(...)`` runs
    ``key_by(keys).agg(...)``, or with a window
    ``key_by(keys).window(...).agg(...)``, with the output columns in
    Spark's order: the grouping columns as given (the window as a struct of
    ``start`` and ``end``, of the event-time column's type), then the
    aggregates.

    Example:
        >>> import eddyline as ed
        >>> import eddyline.functions as F
        >>> env = ed.StreamEnvironment()
        >>> rows = [{"user": "a", "ts": 1000, "v": 1}, {"user": "a", "ts": 4000, "v": 2}]
        >>> s = env.from_collection(rows).with_watermark("ts", "1 second")
        >>> out = s.group_by(F.window("ts", "10 seconds"), "user").agg(F.sum("v")).collect()
        >>> _ = env.execute()
        >>> out.to_pylist()
        [{'window': {'start': 0, 'end': 10000}, 'user': 'a', 'sum(v)': 3}]
    """

    def __init__(self, stream: S, cols: tuple[str | Expr | GroupingWindow, ...]) -> None:
        self._stream = stream
        self._order: list[str | GroupingWindow] = []
        self._window: GroupingWindow | None = None
        where = f"group_by() after '{stream.operator_name}'"
        for c in cols:
            if isinstance(c, GroupingWindow):
                if self._window is not None:
                    raise GraphError(
                        f"{where}: one window per grouping, got {self._window!r} and {c!r}",
                        operator=stream.operator_name,
                    )
                self._window = c
                self._order.append(c)
            elif isinstance(c, Expr) and c.output_name and c.columns() == [c.output_name]:
                self._order.append(c.output_name)
            elif isinstance(c, str) and c:
                self._order.append(c)
            else:
                raise TypeError(
                    f"{where}: takes column names, F.col(name), F.window(...) or "
                    f"F.session_window(...), got {c!r}"
                )
        self._keys = [c for c in self._order if isinstance(c, str)]
        if not self._order:
            raise TypeError(f"{where}: needs at least one column or window")
        if self._window is not None:
            self._check_event_time(self._window, where)

    def _check_event_time(self, window: GroupingWindow, where: str) -> None:
        time_column = self._stream.time_column
        if time_column is None:
            raise GraphError(
                f"{where}: {window!r} needs event time; call "
                f".with_watermark({window.column!r}, delay) upstream first",
                operator=self._stream.operator_name,
            )
        if time_column != window.column:
            raise GraphError(
                f"{where}: {window!r} groups by column {window.column!r}, but the stream's "
                f"event time (with_watermark / assign_timestamps) is column {time_column!r}",
                operator=self._stream.operator_name,
            )

    def __repr__(self) -> str:
        return f"GroupedData({self._stream.operator_name!r}, {self._order!r})"

    def agg(self, *aggregates: AggregateColumn) -> S:
        """The aggregates per group (see the class documentation); without a
        window, an upsert stream of the current values per key, as
        :meth:`KeyedStream.agg`."""
        window = self._window
        if window is None:
            return KeyedStream(self._stream, self._keys).agg(*aggregates)
        stream, keys = self._stream, self._keys
        if not keys:
            stream = stream.with_columns(**{GROUP_ALL: Expr._lit(True)})
            keys = [GROUP_ALL]
        assigner: WindowAssigner | Session
        if window.gap_ms:
            assigner = Session(window.gap_ms / 1000.0)
        elif window.slide_ms == window.size_ms:
            assigner = Tumbling(window.size_ms / 1000.0)
        else:
            assigner = Sliding(window.size_ms / 1000.0, window.slide_ms / 1000.0)
        windowed = KeyedStream(stream, keys).window(assigner).agg(*aggregates)
        columns: list[tuple[str, Expr]] = []
        for c in self._order:
            if isinstance(c, str):
                columns.append((c, Expr._col(c)))
            else:
                bounds = [
                    Expr._col("window_start").alias("start"),
                    Expr._col("window_end").alias("end"),
                ]
                columns.append((c.name, Expr._struct(bounds)))
        columns += [(a.name, Expr._col(a.name)) for a in aggregates]
        names = [name for name, _ in columns]
        if len(set(names)) != len(names):
            raise GraphError(
                f"group_by(...).agg(): an output column is named twice in {names}; give the "
                "aggregate another name with .alias(...)",
                operator=self._stream.operator_name,
            )
        reads = [*keys, "window_start", "window_end", *(a.name for a in aggregates)]
        spec = SelectSpec(columns, [r for r in reads if r != GROUP_ALL])
        out = windowed._native("select", spec, columns=spec.reads).name(window.name)
        # The projection shows the window aggregate's results: a uid given to the
        # result names the aggregate's state (restores, read_state).
        out._update_node(state_node=windowed._node.id)
        return out

    def count(self) -> S:
        """The number of rows per group, in column ``count`` (Spark's
        ``groupBy(...).count()``)."""
        return self.agg(count_rows("*").alias("count"))
