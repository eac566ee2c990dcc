"""Event time in Python runners: reading event-time columns and writing window bounds.

An event-time column is an Arrow ``timestamp`` of any unit or an ``int64`` of
milliseconds since the epoch (as for the native ``assign_timestamps``);
timestamps convert to milliseconds rounding towards negative infinity, and
milliseconds back to the column's unit the same way.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..errors import SchemaError

__all__ = ["event_times", "is_event_time_type", "key_group_range", "millis_to_value"]

_UNIT_SCALE: dict[str, tuple[int, int]] = {
    "s": (1000, 1),
    "ms": (1, 1),
    "us": (1, 1000),
    "ns": (1, 10**6),
}
"""Timestamp unit -> ``(mul, div)``: ``ms = raw * mul // div`` and ``raw = ms * div // mul``."""


def is_event_time_type(data_type: pa.DataType) -> bool:
    """True for the types an event-time column may have.

    Example:
        >>> is_event_time_type(pa.timestamp("us")), is_event_time_type(pa.int32())
        (True, False)
    """
    return bool(pa.types.is_timestamp(data_type) or pa.types.is_int64(data_type))


def event_times(batch: pa.RecordBatch, column: str, operator: str) -> list[int]:
    """The event times of ``batch`` in milliseconds since the epoch.

    Raises:
        SchemaError: The column is missing, has another type, or holds nulls.

    Example:
        >>> b = pa.record_batch({"t": pa.array([1500, -1], pa.timestamp("us"))})
        >>> event_times(b, "t", "op")
        [1, -1]
    """
    index = batch.schema.get_field_index(column)
    if index < 0:
        raise SchemaError(
            f"operator '{operator}': event-time column '{column}' is not in the input schema "
            f"({', '.join(f'{f.name}: {f.type}' for f in batch.schema)})",
            operator=operator,
        )
    array = batch.column(index)
    data_type = array.type
    if not is_event_time_type(data_type):
        raise SchemaError(
            f"operator '{operator}': event-time column '{column}' has type {data_type}, expected "
            "a timestamp or int64 milliseconds",
            operator=operator,
        )
    if array.null_count:
        raise SchemaError(
            f"operator '{operator}': event-time column '{column}' holds a null event time in "
            f"{array.null_count} of {len(array)} rows",
            operator=operator,
        )
    if pa.types.is_int64(data_type):
        values: list[int] = array.to_pylist()
        return values
    raw: list[int] = array.cast(pa.int64()).to_pylist()
    mul, div = _UNIT_SCALE[data_type.unit]
    if mul == div:
        return raw
    return [v * mul // div for v in raw]


def millis_to_value(ms: int, data_type: pa.DataType) -> Any:
    """The Python value of ``ms`` in a column of ``data_type`` (as ``to_pylist`` gives it).

    Example:
        >>> millis_to_value(1500, pa.int64())
        1500
        >>> millis_to_value(1500, pa.timestamp("s"))
        datetime.datetime(1970, 1, 1, 0, 0, 1)
    """
    if not pa.types.is_timestamp(data_type):
        return ms
    mul, div = _UNIT_SCALE[data_type.unit]
    raw = ms * div // mul
    return pa.scalar(raw, type=data_type).as_py()


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> range:
    """The key groups a subtask owns (the engine's formula).

    Example:
        >>> key_group_range(1, 3, 128)
        range(43, 86)
    """
    start = -(-(subtask * max_parallelism) // parallelism)
    end = -(-((subtask + 1) * max_parallelism) // parallelism)
    return range(start, end)
