"""Event-time window assigners (:class:`Tumbling`, :class:`Sliding`), :class:`TimeWindow`
and :class:`OutputTag` (the side output a window sends its late records to).

Windows are aligned to the epoch and measured in whole milliseconds of event
time: a record with event time ``t`` belongs to every window
``[start, start + size)`` with ``start = t - t % slide - i * slide`` that
contains it (tumbling windows have ``slide == size``). A window fires when the
watermark reaches its last millisecond (``end - 1 <= watermark``).

Example:
    >>> import eddyline as ed
    >>> ed.Tumbling("10s").windows_of(12_345)
    [TimeWindow(start=10000, end=20000)]
    >>> ed.Sliding("10s", "5s").windows_of(12_345)
    [TimeWindow(start=5000, end=15000), TimeWindow(start=10000, end=20000)]
"""

from __future__ import annotations

import math
from typing import Any

from ._specs import WindowAssignerSpec
from .config import Duration, parse_duration
from .user_api import OutputTag, TimeWindow

__all__ = ["OutputTag", "Sliding", "TimeWindow", "Tumbling", "WindowAssigner"]


def duration_ms(value: Duration, what: str) -> int:
    """A positive duration as whole milliseconds.

    Raises:
        ValueError: If it is zero, negative, or not a whole number of milliseconds.

    Example:
        >>> duration_ms("2min", "size"), duration_ms(0.5, "size")
        (120000, 500)
    """
    ms = parse_duration(value, what=what) * 1000.0
    whole = round(ms)
    if whole < 1 or not math.isclose(ms, whole, rel_tol=0.0, abs_tol=1e-6):
        raise ValueError(
            f"invalid {what} {value!r}: a window duration must be a positive whole number of "
            "milliseconds"
        )
    return whole


class WindowAssigner:
    """Epoch-aligned windows of ``size_ms`` starting every ``slide_ms`` (``0 < slide <= size``)."""

    __slots__ = ("size_ms", "slide_ms")

    size_ms: int
    slide_ms: int

    def __init__(self, size_ms: int, slide_ms: int) -> None:
        if slide_ms > size_ms:
            raise ValueError(
                f"a sliding window's slide ({slide_ms} ms) must not exceed its size ({size_ms} ms)"
            )
        object.__setattr__(self, "size_ms", size_ms)
        object.__setattr__(self, "slide_ms", slide_ms)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def last_start(self, timestamp: int) -> int:
        """The start of the latest window holding ``timestamp``."""
        return timestamp - timestamp % self.slide_ms

    def windows_of(self, timestamp: int) -> list[TimeWindow]:
        """The windows holding ``timestamp``, earliest first."""
        size, slide = self.size_ms, self.slide_ms
        start = self.last_start(timestamp)
        out = []
        while start > timestamp - size:
            out.append(TimeWindow(start, start + size))
            start -= slide
        out.reverse()
        return out

    def _to_spec(self) -> WindowAssignerSpec:
        """The assigner as the native window reads it."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self.size_ms == other.size_ms  # type: ignore[attr-defined]
            and self.slide_ms == other.slide_ms  # type: ignore[attr-defined]
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.size_ms, self.slide_ms))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self).__name__, self.size_ms, self.slide_ms))


def _rebuild(kind: str, size_ms: int, slide_ms: int) -> WindowAssigner:
    if kind == "Tumbling":
        return Tumbling(size_ms / 1000.0)
    return Sliding(size_ms / 1000.0, slide_ms / 1000.0)


class Tumbling(WindowAssigner):
    """Tumbling (fixed, non-overlapping) event-time windows of ``size``.

    Args:
        size: A duration: seconds as a number, or a string like ``"10s"``, ``"250ms"``.

    Example:
        >>> import eddyline as ed
        >>> ed.Tumbling("1min")
        Tumbling(size_ms=60000)
    """

    __slots__ = ()

    def __init__(self, size: Duration) -> None:
        size_ms = duration_ms(size, "tumbling window size")
        super().__init__(size_ms, size_ms)

    def _to_spec(self) -> WindowAssignerSpec:
        return WindowAssignerSpec(self.size_ms)

    def __repr__(self) -> str:
        return f"Tumbling(size_ms={self.size_ms})"


class Sliding(WindowAssigner):
    """Sliding event-time windows of ``size``, one starting every ``slide``.

    Args:
        size: The window length (a duration).
        slide: How often a window starts (a duration, at most ``size``).

    Example:
        >>> import eddyline as ed
        >>> ed.Sliding("10s", "2s")
        Sliding(size_ms=10000, slide_ms=2000)
        >>> ed.Sliding("1s", "2s")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: a sliding window's slide (2000 ms) must not exceed its size (1000 ms)
    """

    __slots__ = ()

    def __init__(self, size: Duration, slide: Duration) -> None:
        super().__init__(
            duration_ms(size, "sliding window size"), duration_ms(slide, "sliding window slide")
        )

    def _to_spec(self) -> WindowAssignerSpec:
        return WindowAssignerSpec(self.size_ms, self.slide_ms)

    def __repr__(self) -> str:
        return f"Sliding(size_ms={self.size_ms}, slide_ms={self.slide_ms})"


class Session:
    """Event-time session windows: per key, rows closer than ``gap`` form one session.

    Rows exactly ``gap`` apart start a new session; a row that bridges two
    sessions merges them. ``window_start`` is the session's first row time,
    ``window_end`` its last row time + ``gap``; a session fires when the
    watermark passes its last millisecond (``window_end - 1``). Runs natively
    with ``.sum``/``.count``/``.min``/``.max`` and ``.agg(F...)`` (merged
    sessions merge their accumulators' states); ``.reduce``/``.apply`` run in
    Python (merged sessions fold in start order); ``late_output`` works with all.

    Args:
        gap: A duration: seconds as a number, or a string like ``"30s"``.

    Example:
        >>> import eddyline as ed
        >>> ed.Session("30s")
        Session(gap_ms=30000)
    """

    __slots__ = ("gap_ms",)

    gap_ms: int

    def __init__(self, gap: Duration) -> None:
        object.__setattr__(self, "gap_ms", duration_ms(gap, "session gap"))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Session is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Session) and other.gap_ms == self.gap_ms

    def __hash__(self) -> int:
        return hash(("Session", self.gap_ms))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Session, (self.gap_ms / 1000.0,))

    def __repr__(self) -> str:
        return f"Session(gap_ms={self.gap_ms})"
