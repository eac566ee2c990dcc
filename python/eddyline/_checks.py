"""Argument checks shared by the DSL's stream classes (``stream``, ``keyed``, ``connected``).

A declared schema may be given as a ``pyarrow.Schema`` or anything
``pyarrow.schema(...)`` accepts; a column an operator names must be in its
input schema when that schema is known at build time, so the error names the
operator before anything runs (API.md "Streams").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import pyarrow as pa

from .errors import GraphError

__all__ = ["SchemaLike", "as_schema", "missing_columns_error", "require_callable"]

SchemaLike: TypeAlias = pa.Schema | Sequence[pa.Field] | Sequence[tuple[str, pa.DataType]]
"""A declared schema: a ``pyarrow.Schema``, its fields, or ``(name, type)`` pairs."""


def as_schema(schema: SchemaLike | None, what: str) -> pa.Schema | None:
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    try:
        return pa.schema(schema)
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise TypeError(f"{what}: schema must be a pyarrow.Schema, got {schema!r}") from exc


def require_callable(fn: object, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what} needs a callable, got {type(fn).__name__}")


def missing_columns_error(
    operator: str, missing: str, schema: pa.Schema, role: str = "column"
) -> GraphError:
    columns = ", ".join(f"{f.name}: {f.type}" for f in schema) or "none"
    return GraphError(
        f"operator '{operator}': {role} '{missing}' is not in the input schema "
        f"(columns: {columns})",
        operator=operator,
    )
