"""Native keyed joins of two streams: ``left.join(right, ...)``.

The join runs in Rust without the GIL (``core/src/operator/join``): both
inputs are hash-partitioned on their key columns, each side's rows are kept
per key group (checkpointed, restorable at another parallelism) and every
matching pair is emitted once, as soon as both rows have arrived.

- Without ``within``: an unbounded equi-join. ``state_ttl`` (event time,
  against the watermark) bounds the rows kept; pairs at most ``state_ttl``
  apart are always emitted.
- ``within=(lower, upper)``: an interval join, ``left.ts + lower <= right.ts
  <= left.ts + upper`` (inclusive; the bounds may be negative, e.g.
  ``("-5s", "10s")`` or seconds ``(-5, 10)``). Rows are dropped once the
  watermark passes their interval; ``how="left" | "right" | "outer"`` emits
  an outer side's unmatched row once, with nulls, at that moment.

A row whose timestamp is at or below the watermark when it arrives is late:
counted in the operator's ``late_records`` metric and dropped (as Flink's
interval join does). Keys compare as in SQL: a null key matches nothing.

``left.temporal_join(versions, on=..., how="inner" | "left")`` is an
event-time "as of" join: ``versions`` is an upsert stream keyed by ``on``
(a row with the time of a kept version replaces it); each left row waits
until the watermark reaches its time, then is joined with the newest
version of its key at or before that time (``how="left"``: with nulls when
there is none).

``left.window_join(right, on=..., window=ed.Tumbling(size) | ed.Sliding(size,
slide))`` pairs the rows of equal keys in the same window when the window
fires (one row per pair and shared window); its rows hold the keys,
``window_start``, ``window_end``, then the left's and the right's other
columns. A row whose windows are all over when it arrives is late; one some
of whose (sliding) windows are over joins in the others only. With
``ed.Session(gap)`` the sessions are formed from both sides' rows together
(rows closer than ``gap``; ``window_start`` the first row's time,
``window_end`` the last row's + ``gap``) and pair up when the session fires.

Output: the join keys once (with the left's names), the left's other
columns, then the right's; a right column whose name is taken gets the
suffix ``_right``.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> orders = env.from_collection([{"customer": 1, "amount": 10}, {"customer": 2, "amount": 5}])
    >>> customers = env.from_collection([{"id": 1, "name": "ada"}])
    >>> out = orders.join(customers, left_on="customer", right_on="id").collect()
    >>> _ = env.execute("enrich")
    >>> out.to_pylist()
    [{'customer': 1, 'amount': 10, 'name': 'ada'}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias

from ._specs import JoinSpec
from ._stream_core import S
from .config import Duration, parse_duration
from .errors import GraphError

if TYPE_CHECKING:
    from .windows import WindowAssigner

__all__ = ["JOIN_TYPES", "JoinType", "build_join", "build_window_join", "signed_duration_ms"]

JoinType: TypeAlias = Literal["inner", "left", "right", "outer"]
"""The values ``how`` accepts (a temporal join: inner or left; a window join: inner)."""

JOIN_TYPES: tuple[JoinType, ...] = ("inner", "left", "right", "outer")
"""The values ``how`` accepts, at run time."""


def signed_duration_ms(value: Duration, what: str) -> int:
    """A duration that may be negative, in whole milliseconds.

    Example:
        >>> signed_duration_ms("-5s", "lower"), signed_duration_ms(2.5, "upper")
        (-5000, 2500)
    """
    if isinstance(value, str) and value.strip().startswith("-"):
        return -round(parse_duration(value.strip()[1:], what=what) * 1000)
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return -round(parse_duration(-value, what=what) * 1000)
    return round(parse_duration(value, what=what) * 1000)


def _columns(value: str | Sequence[str] | None, what: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    cols = list(value)
    if not cols or not all(isinstance(c, str) for c in cols):
        raise TypeError(f"join(): {what} needs a column name or a list of them, got {value!r}")
    return cols


def build_join(
    left: S,
    right: S,
    *,
    on: str | Sequence[str] | None,
    left_on: str | Sequence[str] | None,
    right_on: str | Sequence[str] | None,
    how: JoinType,
    within: tuple[Duration, Duration] | None = None,
    state_ttl: Duration | None = None,
    temporal: bool = False,
    window_ms: int | None = None,
    window_slide_ms: int | None = None,
    session_gap_ms: int | None = None,
) -> S:
    """Adds a join node reading ``left`` (input 0) and ``right`` (input 1);
    ``temporal``: an event-time "as of" join against ``right``'s versions;
    ``window_ms``: a join within tumbling windows of that size."""
    windowed = window_ms is not None or session_gap_ms is not None
    what = "temporal_join()" if temporal else "window_join()" if windowed else "join()"
    left._same_env(right, what)
    name = f"join_{left._plan.next_id}"
    allowed = ("inner", "left") if temporal else ("inner",) if windowed else JOIN_TYPES
    if how not in allowed:
        raise GraphError(f"{what}: how must be one of {allowed}, got {how!r}", operator=name)
    if (temporal or windowed) and (left.time_column is None or right.time_column is None):
        raise GraphError(
            f"{what}: both inputs need event time: call assign_timestamps on them",
            operator=name,
        )
    both = _columns(on, "on")
    lk, rk = _columns(left_on, "left_on"), _columns(right_on, "right_on")
    if both is not None and (lk is not None or rk is not None):
        raise GraphError("join(): give either on= or left_on= and right_on=", operator=name)
    if both is not None:
        lk, rk = both, list(both)
    if lk is None or rk is None:
        raise GraphError(
            "join(): name the key columns with on= or with both left_on= and right_on=",
            operator=name,
        )
    for side, stream in (("left", left), ("right", right)):
        if stream.schema is None:
            raise GraphError(
                f"join(): the schema of the {side} input '{stream.operator_name}' is not known "
                "before running; give its map(...)/process(...) a schema=",
                operator=name,
            )
    bounds: tuple[int, int] | None = None
    if within is not None:
        if not isinstance(within, tuple | list) or len(within) != 2:
            raise GraphError(
                f"join(): within must be (lower, upper), got {within!r}", operator=name
            )
        bounds = (
            signed_duration_ms(within[0], "within lower bound"),
            signed_duration_ms(within[1], "within upper bound"),
        )
    ttl = None if state_ttl is None else round(parse_duration(state_ttl, what="state_ttl") * 1000)
    spec = JoinSpec(
        lk,
        rk,
        how,  # type: ignore[arg-type]
        bounds,
        ttl,
        (left.time_column, right.time_column),
        temporal=temporal,
        window_ms=window_ms,
        window_slide_ms=window_slide_ms,
        session_gap_ms=session_gap_ms,
    )
    # The output schema is checked at once: both input schemas are known.
    return left._native("join", spec, inputs=[left._edge(0), right._edge(1)])


def build_window_join(
    left: S,
    right: S,
    *,
    on: str | Sequence[str] | None,
    left_on: str | Sequence[str] | None,
    right_on: str | Sequence[str] | None,
    window: WindowAssigner,
    how: JoinType,
) -> S:
    """Adds a window join of ``left`` and ``right`` (see the module docs)."""
    from .windows import Session, WindowAssigner

    if isinstance(window, Session):
        return build_join(
            left,
            right,
            on=on,
            left_on=left_on,
            right_on=right_on,
            how=how,
            session_gap_ms=window.gap_ms,
        )
    if not isinstance(window, WindowAssigner):
        raise GraphError(
            "window_join(): window must be ed.Tumbling(size), ed.Sliding(size, slide) or "
            f"ed.Session(gap), got {window!r}",
            operator=f"join_{left._plan.next_id}",
        )
    return build_join(
        left,
        right,
        on=on,
        left_on=left_on,
        right_on=right_on,
        how=how,
        window_ms=window.size_ms,
        window_slide_ms=window.slide_ms,
    )
