"""Spark's aggregate functions for ``keyed.agg(...)``: ``F.sum``, ``F.count``,
``F.avg``/``F.mean``, ``F.min``, ``F.max``, ``F.count_distinct``/``F.countDistinct``,
``F.approx_count_distinct``, ``F.approx_percentile``/``F.percentile_approx``,
``F.first``, ``F.last``, ``F.collect_list``, ``F.collect_set``, ``F.stddev``,
``F.stddev_samp``, ``F.stddev_pop``, ``F.variance``, ``F.var_samp``, ``F.var_pop``
(re-exported by :mod:`eddyline.functions`).

Each returns an :class:`AggregateColumn`, named as Spark names it (``avg(y)``,
``count(1)``, ``count(DISTINCT u)``) unless given ``.alias(name)``. The
accumulators are DataFusion's (Spark's own from ``datafusion-spark`` where
they differ), run natively per key (docs/DESIGN.md "Aggregates"). An
aggregate is only meaningful inside ``.agg(...)``: used where a row-wise
expression is expected it is a :class:`~eddyline.errors.GraphError` naming it.

Example:
    >>> import eddyline as ed
    >>> import eddyline.functions as F
    >>> env = ed.StreamEnvironment()
    >>> s = env.from_collection([{"k": "a", "x": 1}, {"k": "a", "x": 3}])
    >>> out = s.key_by("k").agg(F.sum("x").alias("total"), F.avg("x")).collect()
    >>> _ = env.execute()
    >>> out.to_pylist()[-1]
    {'k': 'a', 'total': 4, 'avg(x)': 2.0}
"""

from __future__ import annotations

import math
import re
from typing import NoReturn

from ._core import Expr
from .config import Duration, parse_duration
from .errors import GraphError, SchemaError

__all__ = [
    "AggregateColumn",
    "GroupingWindow",
    "approx_count_distinct",
    "approx_percentile",
    "avg",
    "collect_list",
    "collect_set",
    "count",
    "countDistinct",
    "count_distinct",
    "first",
    "last",
    "max",
    "mean",
    "min",
    "percentile_approx",
    "session_window",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "sum",
    "var_pop",
    "var_samp",
    "variance",
    "window",
]

ColumnOrName = Expr | str


class AggregateColumn:
    """One aggregate of ``.agg(...)``: the function (Spark's name), its
    argument expressions and its output column name."""

    __slots__ = ("args", "function", "name")

    def __init__(self, function: str, args: list[Expr], name: str) -> None:
        self.function = function
        self.args = args
        self.name = name

    def alias(self, name: str) -> AggregateColumn:
        """The same aggregate, output as column ``name``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"alias name must be a non-empty str, got {name!r}")
        return AggregateColumn(self.function, self.args, name)

    def columns(self) -> list[str]:
        """The input columns the aggregate reads."""
        out: dict[str, None] = {}
        for a in self.args:
            out.update(dict.fromkeys(a.columns()))
        return list(out)

    def __repr__(self) -> str:
        return f"AggregateColumn<{self.name}>"

    def _misused(self, *_: object) -> NoReturn:
        raise GraphError(
            f"aggregate '{self.name}' is only allowed in .agg(...) on a keyed stream, not "
            "where a row-wise expression is expected",
            operator=self.name,
        )

    __bool__ = _misused
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _misused
    __truediv__ = __rtruediv__ = __neg__ = __invert__ = _misused
    __and__ = __rand__ = __or__ = __ror__ = _misused
    __lt__ = __le__ = __gt__ = __ge__ = _misused  # type: ignore[assignment]


def reject_aggregate(value: object, where: str) -> None:
    """Raises the :class:`GraphError` of an aggregate used by ``where`` (a
    row-wise operator or function)."""
    if isinstance(value, AggregateColumn):
        raise GraphError(
            f"{where}: aggregate '{value.name}' is only allowed in .agg(...) on a keyed "
            "stream, not where a row-wise expression is expected",
            operator=value.name,
        )


def _arg(function: str, value: object) -> tuple[Expr, str]:
    """A column argument and how Spark renders it in a default name."""
    if isinstance(value, AggregateColumn):
        raise GraphError(
            f"aggregate '{function}' cannot take another aggregate ('{value.name}')",
            operator=function,
        )
    if isinstance(value, str) and value:
        return Expr._col(value), value
    if isinstance(value, Expr):
        return value, value.output_name or _spark_text(value)
    raise SchemaError(
        f"aggregate '{function}' takes a column (an expression or a column name), got {value!r}",
        operator=function,
    )


_COLUMN_REF = re.compile(r"col\('((?:[^'\\]|\\.)*)'\)")


def _spark_text(expr: Expr) -> str:
    """An expression as Spark writes it in a default column name, where the
    two agree: column references by their name (``sum((a * 2))``,
    ``avg(length(s))``); other forms keep their ``repr``."""
    return _COLUMN_REF.sub(lambda m: m.group(1), repr(expr))


def _simple(function: str, column: ColumnOrName, spark_name: str | None = None) -> AggregateColumn:
    expr, shown = _arg(function, column)
    return AggregateColumn(function, [expr], f"{spark_name or function}({shown})")


def sum(col: ColumnOrName) -> AggregateColumn:
    """The sum of the non-null values (a long for integers, a double for
    floats; null when there are none)."""
    return _simple("sum", col)


def count(col: ColumnOrName) -> AggregateColumn:
    """The number of non-null values of ``col``; ``count("*")`` counts rows
    (named ``count(1)``, as in Spark)."""
    if isinstance(col, str) and col == "*":
        return AggregateColumn("count", [Expr._lit(1)], "count(1)")
    return _simple("count", col)


def avg(col: ColumnOrName) -> AggregateColumn:
    """The mean of the non-null values, a double (null when there are none)."""
    return _simple("avg", col)


def mean(col: ColumnOrName) -> AggregateColumn:
    """:func:`avg` (named ``avg(col)``, as in Spark)."""
    return _simple("avg", col)


def min(col: ColumnOrName) -> AggregateColumn:
    """The smallest non-null value (NaN is larger than any number, as in Spark)."""
    return _simple("min", col)


def max(col: ColumnOrName) -> AggregateColumn:
    """The largest non-null value (NaN is larger than any number, as in Spark)."""
    return _simple("max", col)


def count_distinct(col: ColumnOrName) -> AggregateColumn:
    """The number of distinct non-null values (named ``count(DISTINCT col)``).
    One column only."""
    expr, shown = _arg("count_distinct", col)
    return AggregateColumn("count_distinct", [expr], f"count(DISTINCT {shown})")


countDistinct = count_distinct


def approx_count_distinct(col: ColumnOrName, rsd: float | None = None) -> AggregateColumn:
    """An estimate of the number of distinct non-null values (DataFusion's
    HyperLogLog, about 0.8% relative error; ``rsd`` is accepted for Spark's
    signature and not used)."""
    return _simple("approx_count_distinct", col)


def approx_percentile(
    col: ColumnOrName, percentage: float, accuracy: int = 10000
) -> AggregateColumn:
    """An approximate ``percentage`` percentile (0 to 1) of the non-null
    values: DataFusion's t-digest (100 centroids), whose rank error is a
    fraction of a percent on large groups and zero on small ones
    (docs/API.md "Aggregates"). ``accuracy`` only appears in the default
    name, as Spark writes it; one percentage per aggregate."""
    return _percentile("approx_percentile", col, percentage, accuracy)


def percentile_approx(
    col: ColumnOrName, percentage: float, accuracy: int = 10000
) -> AggregateColumn:
    """:func:`approx_percentile` under Spark's other name."""
    return _percentile("percentile_approx", col, percentage, accuracy)


def _percentile(
    function: str, col: ColumnOrName, percentage: float, accuracy: int
) -> AggregateColumn:
    if isinstance(percentage, bool) or not isinstance(percentage, int | float):
        raise SchemaError(
            f"aggregate '{function}' takes one percentage (a float in [0, 1]), got {percentage!r}",
            operator=function,
        )
    expr, shown = _arg(function, col)
    name = f"{function}({shown}, {float(percentage)}, {accuracy})"
    return AggregateColumn(function, [expr, Expr._lit(float(percentage))], name)


def first(col: ColumnOrName, ignorenulls: bool = False) -> AggregateColumn:
    """The first value of the key in arrival order (null if it is null);
    with ``ignorenulls=True`` the first non-null value (null if there is
    none). Named ``first(col)`` either way, as in Spark."""
    return _ordered("first", col, ignorenulls)


def last(col: ColumnOrName, ignorenulls: bool = False) -> AggregateColumn:
    """The last value of the key in arrival order (null if it is null);
    with ``ignorenulls=True`` the last non-null value (null if there is
    none). Named ``last(col)`` either way, as in Spark."""
    return _ordered("last", col, ignorenulls)


def _ordered(function: str, col: ColumnOrName, ignorenulls: bool) -> AggregateColumn:
    if not isinstance(ignorenulls, bool):
        raise SchemaError(
            f"aggregate '{function}' takes ignorenulls=True or False, got {ignorenulls!r}",
            operator=function,
        )
    expr, shown = _arg(function, col)
    native = f"{function}_ignore_nulls" if ignorenulls else function
    return AggregateColumn(native, [expr], f"{function}({shown})")


def collect_list(col: ColumnOrName) -> AggregateColumn:
    """The non-null values in arrival order (``[]`` when there are none)."""
    return _simple("collect_list", col)


def collect_set(col: ColumnOrName) -> AggregateColumn:
    """The distinct non-null values, in no particular order."""
    return _simple("collect_set", col)


def stddev(col: ColumnOrName) -> AggregateColumn:
    """The sample standard deviation (null for fewer than two values)."""
    return _simple("stddev", col)


def stddev_samp(col: ColumnOrName) -> AggregateColumn:
    """:func:`stddev`."""
    return _simple("stddev_samp", col)


def stddev_pop(col: ColumnOrName) -> AggregateColumn:
    """The population standard deviation."""
    return _simple("stddev_pop", col)


def variance(col: ColumnOrName) -> AggregateColumn:
    """The sample variance (null for fewer than two values)."""
    return _simple("variance", col)


def var_samp(col: ColumnOrName) -> AggregateColumn:
    """:func:`variance`."""
    return _simple("var_samp", col)


def var_pop(col: ColumnOrName) -> AggregateColumn:
    """The population variance."""
    return _simple("var_pop", col)


class GroupingWindow:
    """A window to group by, ``stream.group_by(F.window(...), "user")``: Spark's
    ``window`` (tumbling when ``slide_ms`` equals ``size_ms``, else sliding)
    or ``session_window`` (``gap_ms`` set). ``name`` is its output column, a
    struct of ``start`` and ``end``."""

    __slots__ = ("column", "gap_ms", "name", "size_ms", "slide_ms")

    def __init__(
        self, name: str, column: str, size_ms: int = 0, slide_ms: int = 0, gap_ms: int = 0
    ) -> None:
        self.name = name
        self.column = column
        self.size_ms = size_ms
        self.slide_ms = slide_ms
        self.gap_ms = gap_ms

    def __repr__(self) -> str:
        if self.gap_ms:
            return f"session_window({self.column!r}, gap_ms={self.gap_ms})"
        return f"window({self.column!r}, size_ms={self.size_ms}, slide_ms={self.slide_ms})"


def _time_column(function: str, value: object) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Expr) and value.output_name and value.columns() == [value.output_name]:
        return value.output_name
    raise SchemaError(
        f"function '{function}' takes the event-time column (a name or F.col(name)), got {value!r}",
        operator=function,
    )


def _window_ms(function: str, value: object, what: str) -> int:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise SchemaError(
            f"function '{function}' takes its {what} as a duration such as '10 seconds', "
            f"got {value!r}",
            operator=function,
        )
    try:
        ms = parse_duration(value, what=f"{function} {what}") * 1000.0
    except ValueError as e:
        raise SchemaError(f"function '{function}': {e}", operator=function) from e
    whole = round(ms)
    if whole < 1 or not math.isclose(ms, whole, rel_tol=0.0, abs_tol=1e-6):
        raise SchemaError(
            f"function '{function}': the {what} {value!r} is not a positive whole number of "
            "milliseconds",
            operator=function,
        )
    return whole


def window(
    timeColumn: ColumnOrName,
    windowDuration: Duration,
    slideDuration: Duration | None = None,
    startTime: Duration | None = None,
) -> GroupingWindow:
    """Spark's ``window`` for ``stream.group_by(F.window("ts", "1 minute"), "user")``:
    tumbling windows of ``windowDuration`` aligned to the epoch, or sliding
    ones starting every ``slideDuration``. ``timeColumn`` must be the
    stream's event-time column (``with_watermark``). The output column
    ``window`` is a struct of ``start`` and ``end``. ``startTime`` (an
    offset) is not supported.

    Example:
        >>> window("ts", "1 minute", "30 seconds")
        window('ts', size_ms=60000, slide_ms=30000)
    """
    column = _time_column("window", timeColumn)
    if startTime not in (None, 0, "0 seconds", "0s"):
        raise SchemaError(
            f"function 'window' does not take a startTime offset yet, got {startTime!r}",
            operator="window",
        )
    size = _window_ms("window", windowDuration, "windowDuration")
    slide = size if slideDuration is None else _window_ms("window", slideDuration, "slideDuration")
    if slide > size:
        raise SchemaError(
            f"function 'window': the slideDuration ({slide} ms) must not exceed the "
            f"windowDuration ({size} ms)",
            operator="window",
        )
    return GroupingWindow("window", column, size_ms=size, slide_ms=slide)


def session_window(timeColumn: ColumnOrName, gapDuration: Duration) -> GroupingWindow:
    """Spark's ``session_window`` for ``stream.group_by(F.session_window("ts",
    "5 minutes"), "user")``: per key, rows closer than ``gapDuration`` form one
    session. The output column ``session_window`` is a struct of ``start``
    (the first row's time) and ``end`` (the last row's time + the gap).

    Example:
        >>> session_window("ts", "5 minutes")
        session_window('ts', gap_ms=300000)
    """
    column = _time_column("session_window", timeColumn)
    gap = _window_ms("session_window", gapDuration, "gapDuration")
    return GroupingWindow("session_window", column, gap_ms=gap)
