"""Native column expressions, evaluated in Rust without the GIL.

Build expressions with :func:`col` and :func:`lit` and Python operators:

    >>> from eddyline.expr import col, lit
    >>> e = (col("x") + 1 > col("y")) & ~col("flag")
    >>> e
    (((col('x') + 1) > col('y')) & ~col('flag'))
    >>> (2 * col("x")).columns()
    ['x']

An :class:`Expr` is the native expression itself (``eddyline._core.Expr``,
a handle on the core's expression): the plan hands it to the engine as it
is. Python's ``and``, ``or`` and ``not`` cannot be overloaded; use ``&``,
``|`` and ``~`` (with parentheses around comparisons).
"""

from __future__ import annotations

from typing import TypeAlias, Union

from ._core import Expr

__all__ = ["Expr", "ExprLike", "Literal", "col", "lit"]

Literal: TypeAlias = bool | int | float | str | None
"""A literal value an expression can hold."""

ExprLike: TypeAlias = Union["Expr", Literal]
"""An expression, or a literal that is wrapped with :func:`lit`."""


def col(name: str) -> Expr:
    """A reference to the column ``name`` of the input.

    As in Spark, ``col("a.b")`` is field ``b`` of the struct column ``a``;
    a name with a dot in it is written in backticks, ``col("`a.b`")``.

    Example:
        >>> col("price")
        col('price')
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"col() needs a non-empty column name (str), got {name!r}")
    if "." not in name and "`" not in name:
        return Expr._col(name)
    first, *fields = _name_parts(name)
    expr = Expr._col(first)
    for field in fields:
        expr = expr.getField(field)
    return expr


def _name_parts(name: str) -> list[str]:
    """Spark's reading of a column name: parts separated by dots (a struct's
    fields), a part in backticks taken as it is (`` `a.b` `` is the column
    ``a.b``; a doubled backtick inside is one backtick)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(name):
        c = name[i]
        if quoted:
            if c == "`" and name[i + 1 : i + 2] == "`":
                current.append("`")
                i += 1
            elif c == "`":
                quoted = False
            else:
                current.append(c)
        elif c == "`":
            quoted = True
        elif c == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current))
    if quoted or not all(parts):
        raise ValueError(
            f"invalid column name {name!r}: an empty part or an unclosed backtick (a name "
            "with a dot is a struct field access; quote a dotted name in backticks)"
        )
    return parts


def lit(value: ExprLike) -> Expr:
    """A literal value: ``None``, ``bool``, ``int``, ``float`` or ``str``.

    NumPy scalars are converted to the matching Python value; an expression
    is returned as it is.

    Example:
        >>> lit(3), lit(None), lit("a")
        (3, None, 'a')
    """
    if isinstance(value, Expr):
        return value
    return Expr._lit(value)
