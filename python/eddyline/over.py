"""Over windows: ``keyed.over_rows(...)`` and ``keyed.over_range(...)``, each row of
a key with the aggregates of itself and the rows before it in event-time order
(docs/API.md "Over windows"; SQL's ``agg(col) OVER (PARTITION BY k ORDER BY ts
ROWS|RANGE BETWEEN ... PRECEDING AND CURRENT ROW)``, which ``env.sql`` lowers to the
same operator).

The operator runs natively (core's ``operator/over_rows.rs``); this module checks
the DSL's arguments and builds its spec.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._specs import OverAggregateSpec, OverRangeSpec, OverRowsSpec
from ._stream_core import S
from .aggregates import AggregateColumn
from .config import Duration, parse_duration
from .errors import GraphError
from .expr import col

__all__ = ["OVER_FUNCTIONS", "over_range", "over_rows"]

OVER_FUNCTIONS = ("sum", "count", "avg", "min", "max")
"""The aggregates an over window computes."""


def _spec(where: str, a: object) -> OverAggregateSpec:
    """The spec of one aggregate of ``over_rows``: ``F.sum/count/avg/min/max`` of a
    column, or ``F.count("*")``."""
    if not isinstance(a, AggregateColumn):
        raise TypeError(
            f"{where} takes aggregates of eddyline.functions (F.avg('x'), F.count('*'), ...), "
            f"got {a!r}"
        )
    if a.function not in OVER_FUNCTIONS:
        raise GraphError(
            f"{where}: an over window computes {', '.join(OVER_FUNCTIONS)}, not "
            f"{a.function}() ('{a.name}')",
            operator=where,
        )
    columns = a.columns()
    if a.function == "count" and not columns:
        return OverAggregateSpec("count", None, a.name)
    if len(a.args) == 1 and len(columns) == 1 and repr(a.args[0]) == repr(col(columns[0])):
        return OverAggregateSpec(a.function, columns[0], a.name)
    raise GraphError(
        f"{where}: aggregate '{a.name}' must read one column as it is (compute an "
        "expression first with with_columns)",
        operator=where,
    )


def _checked(
    where: str, stream: S, aggregates: tuple[AggregateColumn, ...]
) -> tuple[str, list[OverAggregateSpec]]:
    """The event-time column of ``stream`` and the specs of ``aggregates``."""
    if not aggregates:
        raise GraphError(f"{where} needs at least one aggregate, such as F.avg('x')")
    specs = [_spec(where, a) for a in aggregates]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise GraphError(f"{where}: two aggregates are named alike: {names}; name them with .alias")
    time_column = stream.time_column
    if time_column is None:
        raise GraphError(
            f"{where}: the stream has no event time to order the rows by; call "
            ".assign_timestamps(column) upstream first",
            operator=stream.operator_name,
        )
    return time_column, specs


def _reads(columns: list[str], specs: list[OverAggregateSpec]) -> list[str]:
    """The columns an over window reads: ``columns``, then its aggregates'."""
    reads: dict[str, None] = dict.fromkeys(columns)
    reads.update(dict.fromkeys(s.column for s in specs if s.column is not None))
    return list(reads)


def over_rows(
    stream: S,
    keys: list[str],
    aggregates: tuple[AggregateColumn, ...],
    preceding: int | None,
    order_by: str | Sequence[str],
) -> S:
    """``stream.key_by(keys).over_rows(*aggregates, preceding=..., order_by=...)``
    (see :meth:`eddyline.KeyedStream.over_rows`)."""
    where = f"over_rows() after '{stream.operator_name}'"
    if preceding is not None and (
        isinstance(preceding, bool) or not isinstance(preceding, int) or preceding < 0
    ):
        raise ValueError(
            f"{where}: preceding must be a whole number >= 0 or None (every row before), "
            f"got {preceding!r}"
        )
    ties = [order_by] if isinstance(order_by, str) else list(order_by)
    if not all(isinstance(c, str) and c for c in ties):
        raise TypeError(f"{where}: order_by takes column names, got {order_by!r}")
    time_column, specs = _checked(where, stream, aggregates)
    spec = OverRowsSpec(list(keys), time_column, ties, preceding, specs)
    reads = _reads([*keys, time_column, *ties], specs)
    return stream._native("over_rows", spec, keys=list(keys), columns=reads)


def over_range(
    stream: S,
    keys: list[str],
    aggregates: tuple[AggregateColumn, ...],
    preceding: Duration | None,
) -> S:
    """``stream.key_by(keys).over_range(*aggregates, preceding=...)`` (see
    :meth:`eddyline.KeyedStream.over_range`)."""
    where = f"over_range() after '{stream.operator_name}'"
    ms: int | None = None
    if preceding is not None:
        if isinstance(preceding, bool):
            raise TypeError(f"{where}: preceding takes a duration or None, got {preceding!r}")
        seconds = parse_duration(preceding, what=f"{where}: preceding")
        ms = round(seconds * 1000.0)
        if seconds < 0 or not math.isclose(seconds * 1000.0, ms, rel_tol=0.0, abs_tol=1e-6):
            raise ValueError(
                f"{where}: preceding must be a whole number of milliseconds >= 0 or None "
                f"(every row up to the row's time), got {preceding!r}"
            )
    time_column, specs = _checked(where, stream, aggregates)
    spec = OverRangeSpec(list(keys), time_column, ms, specs)
    reads = _reads([*keys, time_column], specs)
    return stream._native("over_range", spec, keys=list(keys), columns=reads)
