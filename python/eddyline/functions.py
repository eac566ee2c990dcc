"""``eddyline.functions``: Spark's function library over native expressions.

Use it as PySpark's ``pyspark.sql.functions``::

    import eddyline.functions as F

    s.select(F.lower("name").alias("n"), F.when(F.col("x") > 0, "pos").otherwise("neg"))

Every function builds an :class:`~eddyline.expr.Expr` evaluated in Rust
with DataFusion's and datafusion-spark's implementations, with Spark's
non-ANSI semantics (docs/DESIGN.md "Expressions"). As in PySpark, an
argument that takes a column accepts a column name (``str``) or an
expression; the other arguments (a pattern, a position, a separator) are
Python literals. A name the library does not know, or an argument of the
wrong Python type, is an :class:`~eddyline.errors.EddylineError` subclass
naming the function; an argument column of the wrong type is a
:class:`~eddyline.errors.SchemaError` naming the operator and the function
when the stream is built.

Not here yet: aggregates through ``F`` (``F.sum``, ``F.avg``, ...), time,
JSON, struct and array functions, ``split`` and ``expr``.

The module also re-exports the user-function base classes of
:mod:`eddyline.process_functions` (``from eddyline.functions import
ProcessFunction`` keeps working).
"""

from __future__ import annotations

from ._core import Expr
from .errors import SchemaError
from .expr import ExprLike
from .expr import col as col
from .expr import lit as lit
from .process_functions import *  # noqa: F403  (the public names, listed once, there)
from .process_functions import __all__ as _process_names

ColumnOrName = Expr | str
"""A column: an expression, or the name of an input column."""

__all__ = [
    *_process_names,
    "abs",
    "ascii",
    "cbrt",
    "ceil",
    "coalesce",
    "col",
    "concat",
    "concat_ws",
    "exp",
    "floor",
    "greatest",
    "hash",
    "initcap",
    "isnan",
    "isnotnull",
    "isnull",
    "least",
    "length",
    "lit",
    "log",
    "log2",
    "log10",
    "lower",
    "lpad",
    "ltrim",
    "md5",
    "nanvl",
    "nullif",
    "pow",
    "regexp_extract",
    "regexp_replace",
    "repeat",
    "reverse",
    "round",
    "rpad",
    "rtrim",
    "sha1",
    "sha2",
    "signum",
    "sqrt",
    "substring",
    "trim",
    "upper",
    "when",
    "xxhash64",
]


def _column(function: str, value: object) -> Expr:
    """A column argument: an expression, or a column name."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str) and value:
        return Expr._col(value)
    raise SchemaError(
        f"function '{function}' takes a column (an expression or a column name), got {value!r}",
        operator=function,
    )


def _literal(function: str, value: object, *types: type) -> Expr:
    """A literal argument of one of ``types`` (or an expression)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return Expr._lit(value)
    names = " or ".join(t.__name__ for t in types)
    raise SchemaError(
        f"function '{function}' takes a {names} here, got {value!r}",
        operator=function,
    )


def _call(function: str, *args: Expr) -> Expr:
    return Expr._call(function, list(args))


def _unary(function: str, value: ColumnOrName) -> Expr:
    return _call(function, _column(function, value))


def _columns(function: str, values: tuple[ColumnOrName, ...], least: int = 1) -> list[Expr]:
    if len(values) == 1 and isinstance(values[0], list | tuple):
        values = tuple(values[0])
    if len(values) < least:
        raise SchemaError(
            f"function '{function}' needs at least {least} column(s), got {len(values)}",
            operator=function,
        )
    return [_column(function, v) for v in values]


# -- conditionals and nulls --------------------------------------------------


def when(condition: Expr, value: ExprLike) -> Expr:
    """``CASE WHEN condition THEN value``; chain ``.when(c, v)`` and end with
    ``.otherwise(v)`` (null where no condition holds without one). A ``str``
    value is a literal, as in PySpark.

    Example:
        >>> when(col("x") > 0, "pos").otherwise("neg")
        when((col('x') > 0), 'pos').otherwise('neg')
    """
    if not isinstance(condition, Expr):
        raise SchemaError(
            f"function 'when' takes a boolean expression as its condition, got {condition!r}",
            operator="when",
        )
    return Expr._case([(condition, lit(value))])


def coalesce(*cols: ColumnOrName) -> Expr:
    """The first non-null of the columns (evaluated lazily, left to right)."""
    return _call("coalesce", *_columns("coalesce", cols))


def isnull(column: ColumnOrName) -> Expr:
    """True where the column is null."""
    return _column("isnull", column).isNull()


def isnotnull(column: ColumnOrName) -> Expr:
    """True where the column is not null."""
    return _column("isnotnull", column).isNotNull()


def isnan(column: ColumnOrName) -> Expr:
    """True where the double is NaN; false for null, as Spark's ``isnan``."""
    return _call("coalesce", _unary("isnan", column), Expr._lit(False))


def nanvl(col1: ColumnOrName, col2: ColumnOrName) -> Expr:
    """``col1`` unless it is NaN, else ``col2``."""
    return _call("nanvl", _column("nanvl", col1), _column("nanvl", col2))


def nullif(col1: ColumnOrName, col2: ColumnOrName) -> Expr:
    """Null where ``col1 = col2``, else ``col1``."""
    return _call("nullif", _column("nullif", col1), _column("nullif", col2))


# -- strings -----------------------------------------------------------------


def lower(column: ColumnOrName) -> Expr:
    """The string in lower case."""
    return _unary("lower", column)


def upper(column: ColumnOrName) -> Expr:
    """The string in upper case."""
    return _unary("upper", column)


def initcap(column: ColumnOrName) -> Expr:
    """Each word's first letter in upper case, the rest in lower case."""
    return _unary("initcap", column)


def trim(column: ColumnOrName) -> Expr:
    """The string without leading and trailing spaces."""
    return _unary("trim", column)


def ltrim(column: ColumnOrName) -> Expr:
    """The string without leading spaces."""
    return _unary("ltrim", column)


def rtrim(column: ColumnOrName) -> Expr:
    """The string without trailing spaces."""
    return _unary("rtrim", column)


def length(column: ColumnOrName) -> Expr:
    """The number of characters of a string."""
    return _unary("length", column)


def ascii(column: ColumnOrName) -> Expr:
    """The code point of the string's first character (0 for an empty one)."""
    return _unary("ascii", column)


def reverse(column: ColumnOrName) -> Expr:
    """The string reversed."""
    return _unary("reverse", column)


def repeat(column: ColumnOrName, n: int) -> Expr:
    """The string repeated ``n`` times."""
    return _call("repeat", _column("repeat", column), _literal("repeat", n, int))


def lpad(column: ColumnOrName, len: int, pad: str) -> Expr:
    """The string left-padded with ``pad`` (or cut) to ``len`` characters."""
    return _call(
        "lpad", _column("lpad", column), _literal("lpad", len, int), _literal("lpad", pad, str)
    )


def rpad(column: ColumnOrName, len: int, pad: str) -> Expr:
    """The string right-padded with ``pad`` (or cut) to ``len`` characters."""
    return _call(
        "rpad", _column("rpad", column), _literal("rpad", len, int), _literal("rpad", pad, str)
    )


def substring(column: ColumnOrName, pos: int, len: int) -> Expr:
    """``len`` characters from position ``pos`` (1-based; negative counts
    from the end), as Spark's ``substring``."""
    return _call(
        "substring",
        _column("substring", column),
        _literal("substring", pos, int),
        _literal("substring", len, int),
    )


def concat(*cols: ColumnOrName) -> Expr:
    """The strings joined; null if any is null."""
    return _call("concat", *_columns("concat", cols))


def concat_ws(sep: str, *cols: ColumnOrName) -> Expr:
    """The strings joined by ``sep``, skipping nulls."""
    return _call("concat_ws", _literal("concat_ws", sep, str), *_columns("concat_ws", cols, 0))


def regexp_extract(column: ColumnOrName, pattern: str, idx: int) -> Expr:
    """Group ``idx`` of the first match of ``pattern`` ("" without a match)."""
    return _call(
        "regexp_extract",
        _column("regexp_extract", column),
        _literal("regexp_extract", pattern, str),
        _literal("regexp_extract", idx, int),
    )


def regexp_replace(column: ColumnOrName, pattern: str, replacement: str) -> Expr:
    """Every match of ``pattern`` replaced by ``replacement`` (``$1`` refers
    to a group)."""
    return _call(
        "regexp_replace",
        _column("regexp_replace", column),
        _literal("regexp_replace", pattern, str),
        _literal("regexp_replace", replacement, str),
    )


# -- math --------------------------------------------------------------------


def abs(column: ColumnOrName) -> Expr:
    """The absolute value."""
    return _unary("abs", column)


def round(column: ColumnOrName, scale: int = 0) -> Expr:
    """Rounded half up to ``scale`` decimal places."""
    return _call("round", _column("round", column), _literal("round", scale, int))


def floor(column: ColumnOrName) -> Expr:
    """The largest integer not above the value (a ``bigint``)."""
    return _unary("floor", column)


def ceil(column: ColumnOrName) -> Expr:
    """The smallest integer not below the value (a ``bigint``)."""
    return _unary("ceil", column)


def sqrt(column: ColumnOrName) -> Expr:
    """The square root (NaN for a negative value)."""
    return _unary("sqrt", column)


def cbrt(column: ColumnOrName) -> Expr:
    """The cube root."""
    return _unary("cbrt", column)


def exp(column: ColumnOrName) -> Expr:
    """e to the power of the value."""
    return _unary("exp", column)


def log(arg1: ColumnOrName | float, arg2: ColumnOrName | None = None) -> Expr:
    """``log(col)``: the natural logarithm; ``log(base, col)``: the
    logarithm to ``base``, as PySpark's ``log``."""
    if arg2 is None:
        return _call("ln", _column("log", arg1))
    base = arg1 if isinstance(arg1, Expr | str) else _literal("log", arg1, int, float)
    return _call("log", _column("log", base), _column("log", arg2))


def log10(column: ColumnOrName) -> Expr:
    """The base-10 logarithm."""
    return _unary("log10", column)


def log2(column: ColumnOrName) -> Expr:
    """The base-2 logarithm."""
    return _unary("log2", column)


def pow(col1: ColumnOrName | float, col2: ColumnOrName | float) -> Expr:
    """``col1`` to the power of ``col2`` (a double); a number is a literal."""

    def operand(v: ColumnOrName | float) -> Expr:
        if isinstance(v, Expr | str):
            return _column("pow", v)
        return _literal("pow", v, int, float)

    return _call("pow", operand(col1), operand(col2))


def signum(column: ColumnOrName) -> Expr:
    """-1.0, 0.0 or 1.0 by the value's sign."""
    return _unary("signum", column)


def greatest(*cols: ColumnOrName) -> Expr:
    """The largest non-null value of the columns (null if all are null)."""
    return _call("greatest", *_columns("greatest", cols, 2))


def least(*cols: ColumnOrName) -> Expr:
    """The smallest non-null value of the columns (null if all are null)."""
    return _call("least", *_columns("least", cols, 2))


# -- hashing -----------------------------------------------------------------


def hash(*cols: ColumnOrName) -> Expr:
    """Spark's 32-bit Murmur3 hash of the columns (seed 42), an ``int``."""
    return _call("hash", *_columns("hash", cols))


def xxhash64(*cols: ColumnOrName) -> Expr:
    """Spark's 64-bit xxHash of the columns (seed 42), a ``bigint``."""
    return _call("xxhash64", *_columns("xxhash64", cols))


def md5(column: ColumnOrName) -> Expr:
    """The MD5 digest as 32 hex characters."""
    return _unary("md5", column)


def sha1(column: ColumnOrName) -> Expr:
    """The SHA-1 digest as 40 hex characters."""
    return _unary("sha1", column)


def sha2(column: ColumnOrName, numBits: int) -> Expr:
    """The SHA-2 digest (``numBits`` 224, 256, 384, 512 or 0 for 256) in hex."""
    return _call("sha2", _column("sha2", column), _literal("sha2", numBits, int))


# -- aggregates (for keyed.agg / windowed.agg; eddyline/aggregates.py) --------
# Imported last: they shadow the builtins sum/min/max in this module's
# namespace, as pyspark.sql.functions does.
from .aggregates import *  # noqa: E402, F403
from .aggregates import __all__ as _aggregate_names  # noqa: E402

__all__ += [n for n in _aggregate_names if n != "AggregateColumn"]
