"""Helpers for testing eddyline jobs: compare outputs, read a sink's committed
files, and set the processing-time clock by hand.

Example:
    >>> from eddyline.testing import assert_same_rows
    >>> assert_same_rows([{"a": 1}, {"a": 2}], [{"a": 2}, {"a": 1}])
    >>> last_by_key([{"k": 1, "v": 1}, {"k": 1, "v": 3}], "k")
    {1: {'k': 1, 'v': 3}}
"""

from __future__ import annotations

import math
import os
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Self, TypeAlias

import pyarrow as pa

from .sinks import CollectHandle

__all__ = [
    "ManualClock",
    "assert_same_rows",
    "last_by_key",
    "read_parquet_dir",
    "to_rows",
]

RowsLike: TypeAlias = pa.Table | pa.RecordBatch | CollectHandle | Iterable[dict[str, Any]]


class ManualClock:
    """The processing-time clock of this process, set by hand (state TTL and
    ``current_processing_time`` read it), for tests that must not sleep.

    Used as a context manager; the wall clock is back on exit. Only jobs that
    run in this process (the default runner) see it.

    Example:
        >>> import eddyline as ed
        >>> with ManualClock(1_000) as clock:
        ...     clock.advance(500)
        ...     clock.now()
        1500
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)
        self._lock = threading.Lock()
        self._previous: Callable[[], int] | None = None

    def now(self) -> int:
        """The clock's time (ms)."""
        with self._lock:
            return self._now

    def set(self, ms: int) -> None:
        """Sets the time (ms); it never goes back."""
        with self._lock:
            self._now = max(self._now, int(ms))

    def advance(self, ms: int) -> None:
        """Moves the time ``ms`` milliseconds on."""
        with self._lock:
            self._now += max(0, int(ms))

    def __enter__(self) -> Self:
        from . import process_functions as functions

        self._previous = functions._clock
        functions._clock = self.now
        return self

    def __exit__(self, *exc: object) -> None:
        from . import process_functions as functions

        if self._previous is not None:
            functions._clock = self._previous
            self._previous = None


def to_rows(data: RowsLike) -> list[dict[str, Any]]:
    """Returns rows (dicts) from a table, batch, collect handle or iterable of dicts."""
    if isinstance(data, CollectHandle):
        return data.to_pylist()
    if isinstance(data, pa.Table | pa.RecordBatch):
        rows: list[dict[str, Any]] = data.to_pylist()
        return rows
    return [dict(row) for row in data]


def _canonical(value: Any) -> Hashable:
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


def _row_key(row: dict[str, Any]) -> Hashable:
    return tuple(sorted((k, _canonical(v)) for k, v in row.items()))


def assert_same_rows(
    actual: RowsLike,
    expected: RowsLike,
    *,
    sort_by: str | Sequence[str] | None = None,
) -> None:
    """Asserts that two collections hold the same rows, as multisets (order ignored).

    Args:
        actual: The rows produced.
        expected: The reference rows.
        sort_by: If given, both sides are sorted by these columns and compared
            in order (the failure message then points at the first difference).

    Raises:
        AssertionError: Listing missing and unexpected rows.
    """
    got = to_rows(actual)
    want = to_rows(expected)
    if sort_by is not None:
        keys = [sort_by] if isinstance(sort_by, str) else list(sort_by)

        def order(row: dict[str, Any]) -> tuple[Any, ...]:
            return tuple((row.get(k) is None, row.get(k)) for k in keys)

        got_sorted, want_sorted = sorted(got, key=order), sorted(want, key=order)
        for index, (g, w) in enumerate(zip(got_sorted, want_sorted, strict=False)):
            if _row_key(g) != _row_key(w):
                raise AssertionError(
                    f"rows differ at position {index} (sorted by {keys}): got {g!r}, expected {w!r}"
                )
        if len(got) != len(want):
            raise AssertionError(f"got {len(got)} rows, expected {len(want)}")
        return
    counts_got = Counter(_row_key(row) for row in got)
    counts_want = Counter(_row_key(row) for row in want)
    if counts_got == counts_want:
        return
    missing = list((counts_want - counts_got).elements())
    unexpected = list((counts_got - counts_want).elements())

    def show(items: list[Hashable]) -> str:
        shown = [repr(dict(item)) for item in items[:10]]  # type: ignore[call-overload]
        more = f" ... and {len(items) - 10} more" if len(items) > 10 else ""
        return "\n  ".join(shown) + more

    message = [f"got {len(got)} rows, expected {len(want)}"]
    if missing:
        message.append(f"missing {len(missing)} rows:\n  {show(missing)}")
    if unexpected:
        message.append(f"unexpected {len(unexpected)} rows:\n  {show(unexpected)}")
    raise AssertionError("\n".join(message))


def last_by_key(rows: RowsLike, keys: str | Sequence[str]) -> dict[Any, dict[str, Any]]:
    """Returns the last row of every key (the final value of a running aggregate).

    Args:
        rows: Rows in emission order.
        keys: The key column(s); several give tuple keys.
    """
    names = [keys] if isinstance(keys, str) else list(keys)
    out: dict[Any, dict[str, Any]] = {}
    for row in to_rows(rows):
        key = row[names[0]] if len(names) == 1 else tuple(row[k] for k in names)
        out[key] = row
    return out


def read_parquet_dir(directory: str | os.PathLike[str]) -> pa.Table:
    """The committed rows of a Parquet directory, as ``pyarrow.dataset`` reads them.

    Files whose names start with ``_`` or ``.`` (uncommitted) are ignored; a
    missing or empty directory gives an empty table.
    """
    import pyarrow.dataset as ds

    root = os.fspath(directory)
    if not os.path.isdir(root):
        return pa.table({})
    dataset = ds.dataset(root, format="parquet")
    if not dataset.files:
        return pa.table({})
    return dataset.to_table()
