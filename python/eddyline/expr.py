"""Native column expressions, evaluated in Rust without the GIL.

Build expressions with :func:`col` and :func:`lit` and Python operators:

    >>> from eddyline.expr import col, lit
    >>> e = (col("x") + 1 > col("y")) & ~col("flag")
    >>> e
    (((col('x') + 1) > col('y')) & ~col('flag'))
    >>> (2 * col("x"))._tree()
    ('bin', '*', ('lit', 2), ('col', 'x'))

Python's ``and``, ``or`` and ``not`` cannot be overloaded; use ``&``, ``|``
and ``~`` (with parentheses around comparisons).
"""

from __future__ import annotations

from typing import TypeAlias, Union

__all__ = ["Expr", "ExprLike", "Literal", "col", "lit"]

Literal: TypeAlias = bool | int | float | str | None
"""A literal value an expression can hold."""

ExprLike: TypeAlias = Union["Expr", Literal]
"""An expression, or a literal that is wrapped with :func:`lit`."""

Tree: TypeAlias = tuple[object, ...]


class Expr:
    """A native column expression.

    Instances are immutable. Operators build new expressions: ``+ - * / // %``,
    comparisons ``== != < <= > >=``, logical ``&``, ``|``, ``~`` and unary ``-``.

    Example:
        >>> from eddyline import col
        >>> (col("a") * 2).alias("b")
        (col('a') * 2).alias('b')
    """

    __slots__ = ("_alias", "_node")

    _node: Tree
    _alias: str | None

    def __init__(self, node: Tree, alias: str | None = None) -> None:
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "_alias", alias)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Expr is immutable")

    def __reduce__(self) -> tuple[type[Expr], tuple[Tree, str | None]]:
        return (Expr, (self._node, self._alias))

    # ---- tree ---------------------------------------------------------------

    def _tree(self) -> Tree:
        """Returns the expression as the tuple tree the binding consumes.

        Example:
            >>> col("a").is_null()._tree()
            ('is_null', ('col', 'a'))
        """
        return self._node

    @property
    def output_name(self) -> str | None:
        """The name of the column this expression produces, if it has one.

        That is the alias, or the column name of a bare :func:`col`.

        Example:
            >>> col("a").output_name, (col("a") + 1).output_name
            ('a', None)
        """
        if self._alias is not None:
            return self._alias
        if self._node[0] == "col":
            return str(self._node[1])
        return None

    def columns(self) -> list[str]:
        """Returns the names of the columns the expression reads, in first-use order.

        Example:
            >>> (col("b") + col("a") * col("b")).columns()
            ['b', 'a']
        """
        seen: dict[str, None] = {}
        _collect_columns(self._node, seen)
        return list(seen)

    def alias(self, name: str) -> Expr:
        """Names the column this expression produces (for ``select``).

        Args:
            name: The output column name.

        Returns:
            The same expression, named.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"alias name must be a non-empty str, got {name!r}")
        return Expr(self._node, name)

    # ---- null checks --------------------------------------------------------

    def is_null(self) -> Expr:
        """True where the value is null."""
        return Expr(("is_null", self._node))

    def is_not_null(self) -> Expr:
        """True where the value is not null."""
        return Expr(("is_not_null", self._node))

    # ---- operators ----------------------------------------------------------

    def _bin(self, op: str, other: ExprLike) -> Expr:
        return Expr(("bin", op, self._node, _to_expr(other)._node))

    def _rbin(self, op: str, other: ExprLike) -> Expr:
        return Expr(("bin", op, _to_expr(other)._node, self._node))

    def __add__(self, other: ExprLike) -> Expr:
        return self._bin("+", other)

    def __radd__(self, other: ExprLike) -> Expr:
        return self._rbin("+", other)

    def __sub__(self, other: ExprLike) -> Expr:
        return self._bin("-", other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return self._rbin("-", other)

    def __mul__(self, other: ExprLike) -> Expr:
        return self._bin("*", other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return self._rbin("*", other)

    def __truediv__(self, other: ExprLike) -> Expr:
        return self._bin("/", other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return self._rbin("/", other)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return self._bin("//", other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return self._rbin("//", other)

    def __mod__(self, other: ExprLike) -> Expr:
        return self._bin("%", other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return self._rbin("%", other)

    def __eq__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return self._bin("==", other)

    def __ne__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return self._bin("!=", other)

    def __lt__(self, other: ExprLike) -> Expr:
        return self._bin("<", other)

    def __le__(self, other: ExprLike) -> Expr:
        return self._bin("<=", other)

    def __gt__(self, other: ExprLike) -> Expr:
        return self._bin(">", other)

    def __ge__(self, other: ExprLike) -> Expr:
        return self._bin(">=", other)

    def __and__(self, other: ExprLike) -> Expr:
        return self._bin("&", other)

    def __rand__(self, other: ExprLike) -> Expr:
        return self._rbin("&", other)

    def __or__(self, other: ExprLike) -> Expr:
        return self._bin("|", other)

    def __ror__(self, other: ExprLike) -> Expr:
        return self._rbin("|", other)

    def __invert__(self) -> Expr:
        return Expr(("not", self._node))

    def __neg__(self) -> Expr:
        return Expr(("neg", self._node))

    def __pos__(self) -> Expr:
        return self

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise TypeError(
            "the truth value of an eddyline expression is undefined: use & (and), | (or) and "
            "~ (not) instead of 'and', 'or', 'not', put comparisons in parentheses, and avoid "
            "chained comparisons such as 'a < col(\"x\") < b'"
        )

    def __repr__(self) -> str:
        text = _render(self._node)
        return f"{text}.alias({self._alias!r})" if self._alias is not None else text


def col(name: str) -> Expr:
    """A reference to the column ``name`` of the input.

    Example:
        >>> col("price")._tree()
        ('col', 'price')
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"col() needs a non-empty column name (str), got {name!r}")
    return Expr(("col", name))


def lit(value: ExprLike) -> Expr:
    """A literal value: ``None``, ``bool``, ``int``, ``float`` or ``str``.

    NumPy scalars are converted to the matching Python value.

    Example:
        >>> lit(3)._tree(), lit(None)._tree()
        (('lit', 3), ('lit', None))
    """
    if isinstance(value, Expr):
        return value
    if value is None or isinstance(value, bool | int | float | str):
        return Expr(("lit", value))
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        converted = item()
        if converted is None or isinstance(converted, bool | int | float | str):
            return Expr(("lit", converted))
    raise TypeError(
        f"unsupported literal {value!r} of type {type(value).__name__}: "
        "expected None, bool, int, float or str"
    )


def _to_expr(value: ExprLike) -> Expr:
    return value if isinstance(value, Expr) else lit(value)


def _collect_columns(node: Tree, seen: dict[str, None]) -> None:
    tag = node[0]
    if tag == "col":
        seen.setdefault(str(node[1]), None)
    elif tag == "bin":
        _collect_columns(node[2], seen)  # type: ignore[arg-type]
        _collect_columns(node[3], seen)  # type: ignore[arg-type]
    elif tag in ("not", "neg", "is_null", "is_not_null"):
        _collect_columns(node[1], seen)  # type: ignore[arg-type]


def _render(node: Tree) -> str:
    tag = node[0]
    if tag == "col":
        return f"col({node[1]!r})"
    if tag == "lit":
        return repr(node[1])
    if tag == "bin":
        return f"({_render(node[2])} {node[1]} {_render(node[3])})"  # type: ignore[arg-type]
    if tag == "not":
        return f"~{_render(node[1])}"  # type: ignore[arg-type]
    if tag == "neg":
        return f"-{_render(node[1])}"  # type: ignore[arg-type]
    return f"{_render(node[1])}.{tag}()"  # type: ignore[arg-type]
