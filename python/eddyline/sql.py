"""SQL on streams: ``env.sql(query)`` over views registered with
``env.create_temporary_view(name, stream)`` (docs/API.md "SQL").

DataFusion parses and plans the query in Rust (``eddyline._core.plan_sql``,
docs/DESIGN.md "SQL") and hands back a small tree of steps whose expressions
are native :class:`~eddyline.expr.Expr` objects; this module lowers that tree
by calling the same DSL methods a hand-written job calls (``filter``,
``select``, ``union``, ``key_by(...).sum(...)``, ``window(...)``), so a query
and its DSL twin build the same graph, run at the same speed and checkpoint
the same state.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> env.from_collection([{"k": "a", "v": 1}]).create_temporary_view("t")
    >>> env.sql("SELECT k, v * 2 AS w FROM t WHERE v > 0").schema.names
    ['k', 'w']
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from . import _core
from .aggregates import AggregateColumn
from .config import Duration, parse_duration
from .errors import SqlError
from .expr import Expr, col, lit
from .windows import Session, Sliding, Tumbling

if TYPE_CHECKING:
    from .keyed import KeyedStream, WindowedStream
    from .stream import DataStream

__all__ = ["plan_query"]

_WINDOW_BOUNDS = ("window_start", "window_end")
_WINDOW_TIME = "window_time"
"""Spark's ``window_time(w)``, ``w.end`` - 1 ms (core's expr/spark_window_time.rs)."""
_WINDOW_TIME_COLUMN = "__sql_window_time"
"""Where core's sql/spark_window.rs computes ``window_time(w)`` of
``GROUP BY window(window_time(w), ...)``."""
_ALL = "__sql_group"
"""The constant key column of a GROUP BY without keys."""
_RIGHT_START = "__sql_right_start"
"""The right input's window start in a window join of two windowed GROUP BYs' rows
(:func:`_window_join_by_start`)."""

Aggregate = tuple[str, list[Expr], str | None, str]
"""One aggregate of a ``GROUP BY`` as ``plan_sql`` gives it: the function
(``eddyline.functions``' spelling), its arguments, the column of a one-column
aggregate (None otherwise) and the output name."""


@dataclass(frozen=True)
class _Windowing:
    """The windows of a windowing table function, waiting for the ``GROUP BY``
    that aggregates them."""

    function: str
    assigner: Tumbling | Sliding | Session
    spark: bool = False
    """Spark's ``GROUP BY window(...)``: no ``window_start``/``window_end`` keys."""


@dataclass(frozen=True)
class _Lowered:
    """A lowered step: its stream and, above a windowing table function, the
    windows its rows belong to."""

    stream: DataStream
    window: _Windowing | None = None
    time: str | None = None
    """The step's event-time column as core's sql/time.rs says (see :func:`_timed`)."""
    windows: tuple[str, ...] = ()
    """Spark's window columns (structs of ``start`` and ``end``) whose ``end`` is the
    step's event time, as core's sql/time.rs says."""
    window_rows: bool = False
    """The rows are a Spark window grouping's own results (not grouped again), so
    ``window_time(w)`` of their windows can time them (core's sql/time.rs)."""
    window_times: tuple[str, ...] = ()
    """Columns holding ``window_time(w)`` (``end`` - 1 ms) of ``windows``."""


def plan_query(
    views: dict[str, DataStream],
    query: str,
    *,
    state_ttl: Duration | None = None,
    view_ttls: dict[str, Duration] | None = None,
) -> DataStream:
    """The stream of ``query`` over ``views`` (``env.sql``); ``state_ttl`` and
    ``view_ttls`` bound the state of its joins without a time bound (see
    :func:`_join_ttl`)."""
    if not isinstance(query, str) or not query.strip():
        raise TypeError(f"sql() needs a query string, got {query!r}")
    catalog: list[tuple[str, Any, str | None]] = []
    for name, stream in views.items():
        if stream.schema is None:
            raise SqlError(
                f"SQL table: the schema of view '{name}' is not known before running (a "
                "Python function without schema=...); give the function its schema",
                "table",
            )
        catalog.append((name, stream.schema, stream.time_column))
    root = _core.plan_sql(query, catalog)
    lowered = _Lowering(views, state_ttl, view_ttls or {}).lower(root)
    if lowered.window is not None:
        raise SqlError(
            f"SQL {lowered.window.function}: the rows of a windowing table function are "
            "only aggregated yet: GROUP BY window_start, window_end (and keys)",
            lowered.window.function,
        )
    stream = lowered.stream
    if stream.schema is not None and stream.schema.names != list(root.columns):
        # Only the query's columns, in its order (a GROUP BY without keys groups
        # by a constant column of its own).
        stream = stream.select(*root.columns)
    return stream


class _Lowering:
    def __init__(
        self,
        views: dict[str, DataStream],
        state_ttl: Duration | None,
        view_ttls: dict[str, Duration],
    ) -> None:
        self._views = views
        self._state_ttl = state_ttl
        self._view_ttls = view_ttls
        self._lowered: dict[int, tuple[Any, _Lowered]] = {}

    def lower(self, node: Any) -> _Lowered:
        """The stream of ``node``; a step the plan holds twice (``plan_sql`` gives equal
        subtrees, such as a ``WITH`` read twice, one object) is lowered once and read
        by both."""
        done = self._lowered.get(id(node))
        if done is not None:
            return done[1]
        lowered = self._lower(node)
        self._lowered[id(node)] = (node, lowered)  # the node kept alive: its id stays its own
        return lowered

    def _lower(self, node: Any) -> _Lowered:
        kind = type(node).__name__
        if kind == "SqlScan":
            view = self._views[node.view]
            return _Lowered(view, time=view.time_column)
        if kind == "SqlWindow":
            return self._window(node)
        if kind == "SqlFilter":
            below = self.lower(node.input)
            _no_window_bounds(below, [node.predicate], "WHERE")
            return replace(below, stream=below.stream.filter(node.predicate))
        if kind == "SqlProject":
            below = self.lower(node.input)
            exprs: list[tuple[str, Expr]] = list(node.exprs)
            _no_window_bounds(below, [e for _, e in exprs], "SELECT")
            columns = [e if e.output_name == name else e.alias(name) for name, e in exprs]
            return _projected(below, below.stream.select(*columns), exprs)
        if kind == "SqlUnion":
            inputs = [self.lower(i) for i in node.inputs]
            for item in inputs:
                _no_window_bounds(item, [], "UNION ALL")
            first, *rest = (i.stream for i in inputs)
            return _Lowered(first.union(*rest))
        if kind == "SqlAggregate":
            return self._aggregate(node)
        if kind == "SqlJoin":
            joined = self._join(node)
            return _Lowered(joined, time=joined.time_column)
        if kind == "SqlOver":
            return self._over(node)
        if kind == "SqlClosing":
            # Each row comes before the watermark passes its column: the
            # 1 ms window of the GROUP BY above times the rows by it.
            below = self.lower(node.input)
            return _Lowered(below.stream, below.window, node.column)
        raise AssertionError(f"unknown SQL step {node!r}")  # invariant: plan_sql's classes

    def _aggregate(self, node: Any) -> _Lowered:
        """A ``GROUP BY``: running, over a windowing table function's windows, or
        Spark's window grouping (its window as a struct column)."""
        below = self.lower(node.input)
        if node.window is not None:
            below = _spark_window(below, node.window)
        stream = _group(below, list(node.keys), node.aggregates)
        if not node.aggregates and node.window is None:
            stream = stream.select(*node.columns)  # GROUP BY without aggregates: the keys
        time = None
        windows: tuple[str, ...] = ()
        if below.window is not None and not below.window.spark:
            time = _windowed_time(node)
            # A GROUP BY again of Spark's windowed results keeps their window.
            windows = tuple(w for w in below.windows if w in node.keys)
        if node.window is not None:
            stream = _window_struct(stream, node.window[0], list(node.columns))
            column = node.window[0]
            windows = (column,) if column in node.columns else ()
        return _Lowered(stream, time=time, windows=windows, window_rows=node.window is not None)

    def _over(self, node: Any) -> _Lowered:
        """``agg(col) OVER (PARTITION BY ... ORDER BY <event time> ROWS|RANGE ...)``:
        the DSL's ``key_by(keys).over_rows(...)`` (``.over_range(...)``) on the input
        timed by its SQL event time."""
        below = self.lower(node.input)
        if below.window is not None:
            raise SqlError(
                f"SQL OVER: over the rows of {below.window.function}(...), which are only "
                "aggregated yet: GROUP BY window_start, window_end (and keys) first",
                "OVER",
            )
        stream = _timed(below)
        _check_time_column(stream, node.time_column, "OVER", f"ORDER BY {node.time_column}")
        columns = [AggregateColumn(f, list(args), name) for f, args, _, name in node.aggregates]
        keyed = stream.key_by(list(node.keys))
        if node.range:
            ms = node.preceding
            over = keyed.over_range(*columns, preceding=None if ms is None else f"{ms}ms")
        else:
            over = keyed.over_rows(*columns, preceding=node.preceding, order_by=list(node.order_by))
        return _Lowered(over, time=node.time_column)

    def _window(self, node: Any) -> _Lowered:
        function = node.kind.upper()
        below = self.lower(node.input)
        stream = _timed(below)
        _check_time_column(stream, node.time_column, function, f"DESCRIPTOR({node.time_column})")
        assigner = _assigner(node.kind, node.size_ms, node.slide_ms, node.gap_ms)
        return _Lowered(stream, _Windowing(function, assigner), windows=below.windows)

    def _join(self, node: Any) -> DataStream:
        """A join (core's sql/join.rs sorted the condition): the DSL's join,
        interval join, window join or temporal join of the two inputs."""
        left, right = self.lower(node.left), self.lower(node.right)
        # invariant: the planner took the windowing table functions out of a join's inputs
        assert left.window is None and right.window is None
        ls, rs = left.stream, right.stream
        if node.time_columns is not None:
            ls, rs = _timed(left), _timed(right)
        if node.time_columns is not None:
            for side, stream, column in zip(
                ("left", "right"), (ls, rs), node.time_columns, strict=True
            ):
                if stream.time_column != column:
                    has = (
                        f"its event time is '{stream.time_column}'"
                        if stream.time_column is not None
                        else "it has no event time (call assign_timestamps before registering "
                        "the view)"
                    )
                    raise SqlError(
                        f"SQL JOIN: the {node.kind} join's time condition reads the {side} "
                        f"input's column '{column}', but {has}",
                        "JOIN",
                    )
        keys: dict[str, Any] = {"left_on": list(node.left_on), "right_on": list(node.right_on)}
        if node.kind == "regular":
            ttl = self._join_ttl(node)
            stream = ls.join(rs, how=node.how, state_ttl=ttl, **keys)
        elif node.kind == "interval" and (bounds := _tumble_join(node, ls, rs)) is not None:
            stream = _window_join_by_start(ls, rs, node, keys, bounds)
        elif node.kind == "interval":
            within = (f"{node.lower_ms}ms", f"{node.upper_ms}ms")
            stream = ls.join(rs, how=node.how, within=within, **keys)
        elif node.kind == "window":
            # window_join takes a Session too (its windows form from both sides' rows).
            window: Any = _assigner(node.window, node.size_ms, node.slide_ms, node.gap_ms)
            stream = ls.window_join(rs, window=window, **keys)
        else:
            stream = ls.temporal_join(rs, how=node.how, **keys)
        if stream.schema is not None and stream.schema.names != list(node.columns):
            raise AssertionError(  # invariant: join.rs predicts the join's output names
                f"SQL JOIN: the join gave columns {stream.schema.names}, the plan expected "
                f"{list(node.columns)}"
            )
        return stream

    def _join_ttl(self, node: Any) -> Duration | None:
        """The ``state_ttl`` of a join without a time bound: the largest of its
        views' (a view without one takes the query's), so every view's rows are
        kept at least as long as it asks; none when a view has neither."""
        ttls: list[float] = []
        for view in sorted(_views_read(node)):
            ttl = self._view_ttls.get(view, self._state_ttl)
            if ttl is None:
                return None
            ttls.append(parse_duration(ttl, what=f"state_ttl of view '{view}'"))
        return max(ttls) if ttls else None


def _tumble_bounds(node: Any) -> tuple[int, dict[str, str]] | None:
    """Where ``node`` holds the rows of a ``GROUP BY`` over ``TUMBLE`` windows (by
    ``window_start``, ``window_end`` and keys, not a 1 ms regrouping), passed on by
    filters and projections: the windows' size and, for each bound it still selects as
    it is, its name at ``node`` (``{"window_start": "starttime", ...}``)."""
    kind = type(node).__name__
    if kind == "SqlFilter":
        return _tumble_bounds(node.input)
    if kind == "SqlProject":
        below = _tumble_bounds(node.input)
        if below is None:
            return None
        size, bounds = below
        named: dict[str, str] = {}
        for name, e in node.exprs:
            for bound, at in bounds.items():
                if repr(e) == repr(Expr._col(at)):
                    named.setdefault(bound, name)
        return size, named
    if kind != "SqlAggregate" or node.window is not None:
        return None
    window = node.input
    if type(window).__name__ != "SqlWindow" or window.kind != "tumble":
        return None
    if any(b not in node.keys for b in _WINDOW_BOUNDS) or _windowed_time(node) != "window_end":
        return None
    return int(window.size_ms), {b: b for b in _WINDOW_BOUNDS}


def _tumble_join(node: Any, left: DataStream, right: DataStream) -> tuple[int, str, str] | None:
    """Where the interval join ``node`` of ``left`` and ``right`` (their streams) is
    a window join in disguise: an inner join, bounded by equal event times (0 ms),
    of two ``TUMBLE`` ``GROUP BY``'s results of one size, each timed by its
    ``window_end`` (core's sql/time.rs) and selecting its ``window_start``: the
    size and the two start columns.

    Equal ends of windows of one size are equal windows, so the pairs the interval
    join keeps are those of equal keys in one window: a window join of the rows
    timed by their starts, in tumbling windows of that size, pairs the same rows
    (each row lies in the one window that starts at its start), as Nexmark q8's DSL
    twin joins the counts per seller (benches/nexmark/queries.py). The window join
    keeps a row until its window fires, where the interval join probes and expires
    per batch, which costs more (benches/RESULTS.md, q8 in SQL). A row timed by its
    start is not late at the window join: a windowed ``GROUP BY`` emits a window's
    rows before the watermark that fired it (docs/API.md "Chaining windows")."""
    if node.how != "inner" or (node.lower_ms, node.upper_ms) != (0, 0):
        return None
    if node.time_columns is None:
        return None
    lb, rb = _tumble_bounds(node.left), _tumble_bounds(node.right)
    if lb is None or rb is None or lb[0] != rb[0]:
        return None
    ends = (lb[1].get("window_end"), rb[1].get("window_end"))
    ls, rs = lb[1].get("window_start"), rb[1].get("window_start")
    if ends != tuple(node.time_columns) or ls is None or rs is None:
        return None
    for stream in (left, right):
        # The window join adds window_start and window_end: a side's own would clash.
        if stream.schema is None or set(_WINDOW_BOUNDS) & set(stream.schema.names):
            return None
    return lb[0], ls, rs


def _window_join_by_start(
    left: DataStream,
    right: DataStream,
    node: Any,
    keys: dict[str, Any],
    bounds: tuple[int, str, str],
) -> DataStream:
    """The interval join ``node`` as the window join :func:`_tumble_join` found:
    its output columns (without the window join's bounds), timed as the interval
    join's would be (by the inputs' time column where they agree).

    Equal starts are a key the window join needs not hash and compare: the rows it
    pairs are of one window already. Where the starts are a key pair beside others,
    the pair is left out and the right's start travels under a name of its own, so
    every other column keeps the name the interval join gives it (the left's start
    named as the key was)."""
    size, left_start, right_start = bounds
    # invariant: _tumble_join found both schemas
    assert left.schema is not None and right.schema is not None
    left_on, right_on = list(keys["left_on"]), list(keys["right_on"])
    pairs = list(zip(left_on, right_on, strict=True))
    renamed: dict[str, str] = {}
    if (
        len(pairs) > 1
        and (left_start, right_start) in pairs
        and right_on.count(right_start) == 1
        and _RIGHT_START not in right.schema.names
    ):
        at = pairs.index((left_start, right_start))
        del left_on[at], right_on[at]
        renamed = {right_start: _RIGHT_START}
        right_start = _RIGHT_START
    timed = []
    no_names: dict[str, str] = {}
    sides = ((left, left.schema, left_start, no_names), (right, right.schema, right_start, renamed))
    for stream, schema, start, names in sides:
        # A node of its own, timed by the start (the inputs' nodes may be read elsewhere).
        by_start = stream.select(
            *[col(n).alias(names[n]) if n in names else n for n in schema.names]
        )
        by_start._update_node(time_column=start)
        timed.append(by_start)
    window = Tumbling(f"{size}ms")
    joined = timed[0].window_join(timed[1], window=window, left_on=left_on, right_on=right_on)
    out = joined.select(*node.columns)
    lt, rt = node.time_columns
    out._update_node(time_column=lt if lt == rt else None)
    return out


def _selected_time(time: str | None, exprs: list[tuple[str, Expr]]) -> str | None:
    """The event time after a projection (core's sql/time.rs): the column where it
    is selected as it is, else the first name it is selected under, else none."""
    if time is None:
        return None
    names = [name for name, e in exprs if e.output_name == time]
    if time in names:
        return time
    return names[0] if names else None


def _projected(below: _Lowered, stream: DataStream, exprs: list[tuple[str, Expr]]) -> _Lowered:
    """The step of a projection ``exprs`` of ``below`` (its ``stream``), timed as
    core's sql/time.rs says: by the time column as :func:`_selected_time` follows
    it, else by the first column selecting ``window.end`` of a window column; the
    window columns where they are selected, as they are or renamed. Where neither
    is left, a column holding ``window_time(w)`` of the windows of a Spark window
    grouping's own results times the rows."""
    column = _selected_time(below.time, exprs)
    shown = [(name, repr(e)) for name, e in exprs]
    if column is None:
        ends = {repr(Expr._col(w).getField("end")) for w in below.windows}
        column = next((name for name, e in shown if e in ends), None)
    plain = {repr(Expr._col(w)) for w in below.windows}
    windows = tuple(name for name, e in shown if e in plain)
    last = {repr(Expr._call(_WINDOW_TIME, [Expr._col(w)])) for w in below.windows}
    last |= {repr(Expr._col(c)) for c in below.window_times}
    times = tuple(name for name, e in shown if e in last)
    if column is None and not windows and below.window_rows and below.windows and times:
        column, times = times[0], ()
    return _Lowered(stream, below.window, column, windows, below.window_rows, times)


def _windowed_time(node: Any) -> str:
    """The event time of a windowing table function's ``GROUP BY`` (core's
    sql/time.rs): the window's time column where it is a key of 1 ms windows (a
    ``GROUP BY`` of a window's results), else ``window_end``."""
    window = node.input
    regroup = type(window).__name__ == "SqlWindow" and window.kind == "tumble"
    if regroup and window.size_ms == 1 and window.time_column in node.keys:
        return str(window.time_column)
    return "window_end"


def _timed(lowered: _Lowered) -> DataStream:
    """The stream of ``lowered`` timed by its SQL event time, for a join's time bound
    or a window that reads it. Only then: a windowed aggregate's stream otherwise keeps
    the DSL's event time of window results (docs/API.md "Chaining windows"), so a
    query and its DSL twin give the same plan. The watermark passes through the
    window: none is generated here. The node changed is one this lowering made (a
    view's stream keeps its own event time: its steps' time is its own)."""
    stream = lowered.stream
    if lowered.time is not None and stream.time_column != lowered.time:
        stream._update_node(time_column=lowered.time)
    return stream


def _views_read(node: Any) -> set[str]:
    """The views a lowered step reads."""
    if type(node).__name__ == "SqlScan":
        return {node.view}
    children: list[Any] = []
    for attr in ("input", "left", "right"):
        if hasattr(node, attr):
            children.append(getattr(node, attr))
    children.extend(getattr(node, "inputs", []))
    return set().union(*(_views_read(c) for c in children)) if children else set()


def _assigner(
    kind: str, size_ms: int | None, slide_ms: int | None, gap_ms: int | None
) -> Tumbling | Sliding | Session:
    """The DSL's window assigner of a window of ``plan_sql``."""
    if kind == "tumble":
        assert size_ms is not None  # invariant: plan_sql gives a tumble its size
        return Tumbling(size_ms / 1000)
    if kind == "hop":
        assert size_ms is not None and slide_ms is not None  # invariant: as above
        return Sliding(size_ms / 1000, slide_ms / 1000)
    assert gap_ms is not None  # invariant: as above
    return Session(gap_ms / 1000)


def _check_time_column(stream: DataStream, time_column: str, construct: str, call: str) -> None:
    """Refuses windows over a column that is not the stream's event time."""
    if stream.time_column == time_column:
        return
    has = (
        f"its event time is column '{stream.time_column}'"
        if stream.time_column is not None
        else "it has no event time"
    )
    raise SqlError(
        f"SQL {construct}: {call} must name the view's event-time column, but {has}; call "
        f"assign_timestamps('{time_column}') (or with_watermark) on the stream before "
        "registering the view",
        construct,
    )


def _spark_window(below: _Lowered, window: tuple[Any, ...]) -> _Lowered:
    """The rows of Spark's ``GROUP BY window(ts, ...)``, to be grouped into its windows."""
    column, time_column, kind, size_ms, slide_ms, gap_ms = window
    if below.window is not None:
        raise SqlError(
            f"SQL window: GROUP BY {column}(...) over the rows of a windowing table function; "
            "group by one of them",
            "window",
        )
    # The rows of a windowed GROUP BY are timed by their window's end (core's
    # sql/time.rs), so Spark's windows may chain on it: window(we, ...).
    stream = _timed(below)
    if time_column == _WINDOW_TIME_COLUMN and stream.time_column != time_column:
        raise SqlError(
            f"SQL window: GROUP BY {column}(window_time(w), ...) groups the results of a "
            "Spark window grouping by their window's time, but w is not the window column "
            "of such results (or they were grouped again, and come after the watermark "
            "passed their windows' end - 1 ms)",
            "window",
        )
    _check_time_column(stream, time_column, "window", f"{column}({time_column}, ...)")
    assigner = _assigner(kind, size_ms, slide_ms, gap_ms)
    return _Lowered(stream, _Windowing("window", assigner, spark=True))


def _window_struct(stream: DataStream, column: str, columns: list[str]) -> DataStream:
    """The windowed aggregate's ``columns`` with Spark's window column, a struct of
    ``start`` and ``end``, in place of ``window_start`` and ``window_end``."""
    window = Expr._struct([col("window_start").alias("start"), col("window_end").alias("end")])
    return stream.select(*(window.alias(c) if c == column else c for c in columns))


def _no_window_bounds(below: _Lowered, exprs: list[Expr], clause: str) -> None:
    """Refuses reading ``window_start``/``window_end`` before the ``GROUP BY``
    (the bounds exist only once rows are grouped into windows)."""
    if below.window is None:
        return
    if clause == "UNION ALL" or any(c in _WINDOW_BOUNDS for e in exprs for c in e.columns()):
        raise SqlError(
            f"SQL {below.window.function}: {clause} reads window_start/window_end before the "
            "rows are grouped; only GROUP BY window_start, window_end (and keys) and what "
            "follows it can",
            below.window.function,
        )


def _group(below: _Lowered, keys: list[str], aggregates: list[Aggregate]) -> DataStream:
    """``GROUP BY keys`` (with a windowing table function's windows when the keys
    hold ``window_start`` and ``window_end``) with ``aggregates``."""
    window = below.window
    if window is not None and not window.spark:
        bounds = [k for k in keys if k in _WINDOW_BOUNDS]
        if sorted(bounds) != sorted(_WINDOW_BOUNDS):
            raise SqlError(
                f"SQL {window.function}: GROUP BY over a windowing table function must "
                "include window_start and window_end",
                window.function,
            )
        keys = [k for k in keys if k not in _WINDOW_BOUNDS]
    stream = below.stream
    if not keys:
        # One group: a constant key, so one subtask aggregates every row (as
        # Flink's global aggregates); the final select drops it.
        if stream.schema is not None and _ALL in stream.schema.names:
            raise SqlError(f"SQL GROUP BY: the input has a column named {_ALL}", "GROUP BY")
        stream = stream.with_columns(**{_ALL: lit(0)})
        keys = [_ALL]
    keyed = stream.key_by(keys)
    grouped = keyed.window(window.assigner) if window is not None else keyed
    return aggregate(grouped, aggregates)


def aggregate(grouped: KeyedStream | WindowedStream, aggregates: list[Aggregate]) -> DataStream:
    """The aggregates of a ``GROUP BY`` on a keyed or windowed stream: the one
    place SQL meets the DSL's aggregates.

    A single ``sum(col)``, ``min(col)``, ``max(col)`` or ``count(*)`` is the
    DSL's ``grouped.sum(col)`` (...) ``grouped.count()``, named as they name
    it; anything else is ``grouped.agg(...)`` with one aggregate of
    ``eddyline.functions`` per call, aliased to its output name, as the
    hand-written job writes ``grouped.agg(F.avg("v"), F.count("*"))``.
    """
    if not aggregates:
        # GROUP BY without aggregates (its distinct keys): a count its caller drops
        return grouped.count()
    if len(aggregates) == 1:
        function, _, column, name = aggregates[0]
        if function == "count" and name == "count":
            return grouped.count()
        if function in ("sum", "min", "max") and column is not None and name == column:
            result: DataStream = getattr(grouped, function)(column)
            return result
    columns = [AggregateColumn(f, list(args), name) for f, args, _, name in aggregates]
    return grouped.agg(*columns)
