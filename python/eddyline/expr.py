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

    Example:
        >>> col("price")
        col('price')
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"col() needs a non-empty column name (str), got {name!r}")
    return Expr._col(name)


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
