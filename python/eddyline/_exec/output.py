"""Executor output: user rows and batches become record batches of one checked schema.

Rows are converted exactly (a float is never truncated into an integer
column) and every mismatch is a :class:`~eddyline.SchemaError` naming the
operator, the field and the row (DESIGN.md "What a user sees").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ..errors import SchemaError
from .base import RunnerOutput
from .user_code import short

_ARROW_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _holds_integers(t: pa.DataType) -> bool:
    """True if ``t`` is an integer type or a nested type with integer leaves."""
    if pa.types.is_integer(t):
        return True
    return any(_holds_integers(t.field(i).type) for i in range(t.num_fields))


def _same_numbers(converted: Any, value: Any) -> bool:
    """Whether every number of ``value`` survived its conversion to ``converted``.

    Only numbers are compared (``2 == 2.0`` but ``2 != 2.5``); other leaves were
    checked by pyarrow's typed conversion, and a dict's keys that the struct
    does not have are ignored (pyarrow ignores them too).
    """
    if isinstance(converted, bool) or isinstance(value, bool):
        return True
    if isinstance(converted, int):
        return bool(converted == value)
    if isinstance(converted, dict) and isinstance(value, dict):
        return all(_same_numbers(v, value.get(k)) for k, v in converted.items())
    if isinstance(converted, list) and isinstance(value, list | tuple):
        return len(converted) == len(value) and all(
            _same_numbers(c, v) for c, v in zip(converted, value, strict=True)
        )
    return True


def exact_array(values: list[Any], type: pa.DataType) -> pa.Array:
    """Converts Python values to an array of ``type``, refusing any value that changes.

    pyarrow's typed conversion truncates floats into integer columns
    (``2.5 -> 2``). Here the values are converted by inference first: when the
    inferred type is ``type`` (the common case, and no slower than a typed
    conversion) that array is the result; between numeric types a *safe* cast
    refuses truncation and overflow (2.5 or NaN into int64, 300 into int8)
    while exact values and lossless widening pass (2.0 into int64, an int into
    float64). Anything else takes pyarrow's typed conversion, whose integers
    are then compared with the values.

    Raises:
        pa.ArrowException, TypeError, ValueError, OverflowError: A value does
            not fit ``type`` exactly.

    Example:
        >>> exact_array([1, 2.0, None], pa.int64()).to_pylist()
        [1, 2, None]
        >>> exact_array([2.5], pa.int64())
        Traceback (most recent call last):
        ...
        pyarrow.lib.ArrowInvalid: Float value 2.500000 was truncated converting to int64
    """
    try:
        inferred = pa.array(values)
    except _ARROW_CONVERSION_ERRORS:
        inferred = None
    if inferred is not None:
        found = inferred.type
        if found == type:
            return inferred
        if pa.types.is_null(found) or (_numeric(found) and _numeric(type)):
            return inferred.cast(type, safe=True)
    array = pa.array(values, type=type)
    if _holds_integers(type):
        for converted, value in zip(array.to_pylist(), values, strict=True):
            if not _same_numbers(converted, value):
                raise ValueError(f"{short(value, 80)} does not fit {type} exactly")
    return array


class RowWriter:
    """Converts output rows to a record batch of one fixed schema.

    The schema is the one given, or else the one inferred from the first
    non-empty output, passed through ``agree`` (the runner's
    :meth:`~eddyline._exec.base.Runner.agree_schema`: another subtask of the
    operator may have fixed it first, and the rows are then converted to that
    one). Every row must be a dict with exactly the schema's
    fields, and every value must convert to its field's type exactly (see
    :func:`exact_array`: a float is never truncated into an integer column);
    otherwise a :class:`SchemaError` names the operator, the field and the row.
    """

    def __init__(
        self,
        operator: str,
        schema: pa.Schema | None = None,
        agree: Callable[[pa.Schema], pa.Schema] | None = None,
    ) -> None:
        self.operator = operator
        self.schema = schema
        self.agree = agree

    def encode(self, rows: list[Any]) -> pa.RecordBatch | None:
        """Returns the rows as one batch, or ``None`` if there are none."""
        if not rows:
            return None
        schema = self.schema
        if schema is None:
            schema = self._infer(rows)
            if self.agree is not None:
                schema = self.agree(schema)
        names = schema.names
        width = len(names)
        for row in rows:
            if not isinstance(row, dict) or len(row) != width:
                self._shape_error(row, names)
        arrays = []
        for field in schema:
            name = field.name
            try:
                values = [row[name] for row in rows]
            except KeyError:
                bad = next(row for row in rows if name not in row)
                self._shape_error(bad, names)
            try:
                arrays.append(exact_array(values, field.type))
            except _ARROW_CONVERSION_ERRORS:
                self._type_error(field, values, rows)
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.schema = schema
        return batch

    def fields_of(self, row: Any) -> tuple[Any, ...]:
        """``row``'s values in the order of the (known) schema's fields.

        Raises:
            SchemaError: ``row`` is not a dict with exactly the schema's fields.
        """
        assert self.schema is not None
        names = self.schema.names
        if not isinstance(row, dict) or len(row) != len(names):
            self._shape_error(row, names)
        try:
            return tuple(row[name] for name in names)
        except KeyError:
            self._shape_error(row, names)
            raise  # pragma: no cover - _shape_error raises

    def encode_columns(self, columns: list[list[Any]]) -> pa.RecordBatch:
        """The batch of the (known) schema whose field ``i`` holds ``columns[i]``.

        Values are converted as in :meth:`encode`; a value that does not fit
        its field is the same :class:`SchemaError`.
        """
        schema = self.schema
        assert schema is not None
        arrays = []
        for field, values in zip(schema, columns, strict=True):
            try:
                arrays.append(exact_array(values, field.type))
            except _ARROW_CONVERSION_ERRORS:
                names = schema.names
                rows = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
                self._type_error(field, values, rows)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _infer(self, rows: list[Any]) -> pa.Schema:
        first = rows[0]
        if not isinstance(first, dict):
            self._shape_error(first, None)
        fields = []
        for name in first:
            if not isinstance(name, str):
                raise SchemaError(
                    f"operator '{self.operator}' returned a row with a non-str field name "
                    f"{name!r}; field names must be str",
                    operator=self.operator,
                )
            values = [row.get(name) if isinstance(row, dict) else None for row in rows]
            try:
                inferred = pa.array(values)
            except _ARROW_CONVERSION_ERRORS as exc:
                kinds = sorted({type(v).__name__ for v in values if v is not None})
                raise SchemaError(
                    f"operator '{self.operator}' returned field '{name}' with values of "
                    f"incompatible types ({', '.join(kinds)}): {exc}; return one type per "
                    "field, or pass schema=",
                    operator=self.operator,
                ) from None
            fields.append(pa.field(name, inferred.type))
        return pa.schema(fields)

    def _shape_error(self, row: object, names: list[str] | None) -> None:
        op = self.operator
        if not isinstance(row, dict):
            expected = f"a dict with fields {names}" if names is not None else "a dict"
            raise SchemaError(
                f"operator '{op}' returned a {type(row).__name__} ({short(row, 80)}), "
                f"expected {expected}",
                operator=op,
            )
        assert names is not None
        missing = [name for name in names if name not in row]
        extra = [key for key in row if key not in names]
        if missing:
            raise SchemaError(
                f"operator '{op}' returned a row without field '{missing[0]}' "
                f"(expected fields {names}, got {list(row)})",
                operator=op,
            )
        raise SchemaError(
            f"operator '{op}' returned a row with unexpected field '{extra[0]}' "
            f"(expected fields {names}, got {list(row)})",
            operator=op,
        )

    def _type_error(self, field: pa.Field, values: list[Any], rows: list[Any]) -> None:
        op = self.operator
        for value, row in zip(values, rows, strict=True):
            try:
                exact_array([value], field.type)
            except _ARROW_CONVERSION_ERRORS as exc:
                hint = ""
                if pa.types.is_null(field.type):
                    hint = (
                        "; the field's type was inferred as null from an earlier output with "
                        "only None values: pass schema= to declare it"
                    )
                raise SchemaError(
                    f"operator '{op}' returned field '{field.name}' of type "
                    f"{type(value).__name__} ({short(value, 80)}) in row {short(row)}, "
                    f"expected type {field.type}, which does not hold it exactly "
                    f"({exc}){hint}",
                    operator=op,
                ) from None
        raise SchemaError(  # pragma: no cover - the column failed but no single value does
            f"operator '{op}' returned values for field '{field.name}' that do not convert to "
            f"{field.type}",
            operator=op,
        )


def check_batches(
    operator: str,
    result: object,
    expected: pa.Schema | None,
    agree: Callable[[pa.Schema], pa.Schema] | None = None,
) -> tuple[list[pa.RecordBatch], pa.Schema | None]:
    """Validates what a batch function returned.

    The first batch's schema, when none is expected yet, goes through ``agree``
    (another subtask of the operator may have fixed the schema first).

    Returns:
        The non-empty batches, and the schema the output has from now on.
    """
    if result is None:
        return [], expected
    if isinstance(result, pa.RecordBatch):
        batches, schema = [result], result.schema
    elif isinstance(result, pa.Table):
        batches, schema = result.to_batches(), result.schema
    elif isinstance(result, list | tuple) and all(isinstance(b, pa.RecordBatch) for b in result):
        if not result:
            return [], expected
        batches, schema = list(result), result[0].schema
    else:
        raise SchemaError(
            f"operator '{operator}' returned a {type(result).__name__}, expected a "
            "pyarrow.RecordBatch (or a pyarrow.Table, or None)",
            operator=operator,
        )
    for batch in batches:
        if expected is None:
            expected = schema if agree is None else agree(schema)
        if not batch.schema.equals(expected):
            raise SchemaError(
                f"operator '{operator}' returned a batch whose schema differs from its earlier "
                f"output: expected schema\n{expected}\nbut got schema\n{batch.schema}",
                operator=operator,
            )
    return [batch for batch in batches if batch.num_rows > 0], expected


def one_or_many(batches: list[pa.RecordBatch]) -> RunnerOutput:
    """``None``, the one batch, or the list of batches (what a runner returns)."""
    if not batches:
        return None
    return batches[0] if len(batches) == 1 else batches


def schema_line(batch: pa.RecordBatch) -> str:
    """The batch's fields as ``name: type, ...`` (for messages)."""
    return ", ".join(f"{f.name}: {f.type}" for f in batch.schema)
