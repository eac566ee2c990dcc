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

Structs and arrays: ``struct``, ``col("a.b")`` / ``col["b"]`` field
access, ``array``, ``size``, ``element_at``, ``array_contains``, ``split``
and the generators ``explode`` / ``explode_outer`` / ``posexplode`` /
``posexplode_outer`` (whole columns of ``select``, or ``stream.explode`` /
``stream.posexplode``); ``expr("<Spark SQL>")`` parses an
expression.

Aggregates (``F.sum``, ``F.avg``, ``F.first(col, ignorenulls=True)``...)
and the groupings ``F.window`` / ``F.session_window`` are those of
:mod:`eddyline.aggregates`, for ``.agg(...)`` and ``stream.group_by(...)``.
``current_timestamp`` and ``current_date`` are left out on purpose (not
deterministic: a replay after a restore would differ).

The module also re-exports the user-function base classes of
:mod:`eddyline.process_functions` (``from eddyline.functions import
ProcessFunction`` keeps working).
"""

from __future__ import annotations

import pyarrow as pa

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
    "array",
    "array_contains",
    "ascii",
    "cbrt",
    "ceil",
    "coalesce",
    "col",
    "concat",
    "concat_ws",
    "element_at",
    "exp",
    "explode",
    "explode_outer",
    "posexplode",
    "posexplode_outer",
    "expr",
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
    "size",
    "split",
    "sqrt",
    "struct",
    "substring",
    "trim",
    "upper",
    "when",
    "xxhash64",
    # time and JSON
    "to_timestamp",
    "to_date",
    "unix_timestamp",
    "from_unixtime",
    "date_format",
    "date_trunc",
    "year",
    "quarter",
    "month",
    "dayofmonth",
    "dayofyear",
    "dayofweek",
    "hour",
    "minute",
    "second",
    "window_time",
    "get_json_object",
    "from_json",
    "to_json",
]


def _column(function: str, value: object) -> Expr:
    """A column argument: an expression, or a column name."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str) and value:
        return col(value)
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


# -- structs, arrays and generators -------------------------------------------


def struct(*cols: ColumnOrName) -> Expr:
    """A struct of the columns; a field is named by its alias, its column's
    (or field's) name, else ``col1``, ``col2``... as in Spark."""
    return Expr._struct(_columns("struct", cols))


def array(*cols: ColumnOrName) -> Expr:
    """An array of the columns' values (of their common type)."""
    return _call("array", *_columns("array", cols, 0))


def size(column: ColumnOrName) -> Expr:
    """The number of elements of an array: -1 for a null array (Spark's
    ``spark.sql.legacy.sizeOfNull``), null in ANSI mode, as in Spark."""
    return _unary("size", column)


def element_at(column: ColumnOrName, extraction: int | Expr) -> Expr:
    """The array's element at a 1-based position (negative counts from the
    end); null beyond the array; position 0 is an error, as in Spark."""
    return _call(
        "element_at",
        _column("element_at", column),
        _literal("element_at", extraction, int),
    )


def array_contains(column: ColumnOrName, value: ExprLike) -> Expr:
    """True where the array holds ``value``; null where the array is null,
    or where it does not hold it but holds a null."""
    return _call("array_contains", _column("array_contains", column), lit(value))


def split(column: ColumnOrName, pattern: str, limit: int = -1) -> Expr:
    """The string split around matches of the regular expression
    ``pattern``: at most ``limit`` parts when it is positive (the last holds
    the rest), else every part, trailing empty strings kept (Spark's
    ``split``)."""
    return _call(
        "split",
        _column("split", column),
        _literal("split", pattern, str),
        _literal("split", limit, int),
    )


def explode(column: ColumnOrName) -> Expr:
    """One row per element of the array (rows with null or empty arrays
    dropped): a whole column of ``select`` (one per select) or the
    argument of ``stream.explode``."""
    return _unary("explode", column)


def explode_outer(column: ColumnOrName) -> Expr:
    """``explode`` that keeps a row with a null element for a null or empty
    array."""
    return _unary("explode_outer", column)


def posexplode(column: ColumnOrName) -> Expr:
    """Spark's ``posexplode``: ``explode`` with each element's 0-based
    position, two columns ``pos`` (``int``) and ``col`` (or the two names of
    ``.alias(pos, col)``); as a whole column of ``select`` or the argument of
    ``stream.posexplode``."""
    return _unary("posexplode", column)


def posexplode_outer(column: ColumnOrName) -> Expr:
    """``posexplode`` that keeps a row with a null position and element for a
    null or empty array."""
    return _unary("posexplode_outer", column)


def expr(text: str) -> Expr:
    """A Spark SQL expression, such as ``"lower(name) || '!' AS shout"``
    (``AS`` names it). Text that does not parse, an unknown function or an
    aggregate is a :class:`~eddyline.errors.GraphError` naming the text and
    the position.

    Its operators are Spark's: ``expr("a / b")`` and ``expr("a % b")`` are
    null where ``b`` is zero (with ``ansi=True`` the job fails with
    ``DIVIDE_BY_ZERO`` or ``REMAINDER_BY_ZERO``), where ``col("a") / col("b")``
    follows Python and fails the job on a zero divisor."""
    if not isinstance(text, str):
        raise SchemaError(f"function 'expr' takes a str, got {text!r}", operator="expr")
    return Expr._parse(text)


# -- time (UTC is the session time zone) -------------------------------------
#
# ``current_timestamp`` / ``current_date`` / ``unix_timestamp()`` without a
# column are left out on purpose: they are not deterministic, so a replay
# after a restore would compute other values than the first run did. Put the
# time into the data at the source instead.

_DEFAULT_TIME_FORMAT = "yyyy-MM-dd HH:mm:ss"


def _format(function: str, format: str) -> Expr:
    if not isinstance(format, str):
        raise SchemaError(
            f"function '{function}' takes a Spark datetime pattern (a str), got {format!r}",
            operator=function,
        )
    return Expr._lit(format)


def to_timestamp(col: ColumnOrName, format: str | None = None) -> Expr:
    """The string parsed as a ``timestamp`` with the Spark datetime pattern
    ``format`` (``"yyyy-MM-dd HH:mm:ss"``), or as ``cast(col as timestamp)``
    without one; null where it does not parse (an error under ``ansi=True``).
    A date or timestamp column converts as it is.

    Example:
        >>> to_timestamp("s", "dd/MM/yyyy HH:mm")
        to_timestamp(col('s'), 'dd/MM/yyyy HH:mm')
    """
    args = [_column("to_timestamp", col)]
    if format is not None:
        args.append(_format("to_timestamp", format))
    return _call("to_timestamp", *args)


def to_date(col: ColumnOrName, format: str | None = None) -> Expr:
    """The string parsed as a ``date`` with the pattern ``format``, or as
    ``cast(col as date)`` without one; a timestamp's UTC date."""
    args = [_column("to_date", col)]
    if format is not None:
        args.append(_format("to_date", format))
    return _call("to_date", *args)


def unix_timestamp(
    timestamp: ColumnOrName | None = None, format: str = _DEFAULT_TIME_FORMAT
) -> Expr:
    """Seconds since the epoch (a ``bigint``) of a timestamp or date, or of
    a string parsed with ``format``. The column is required: the current
    time is not deterministic (see the note above)."""
    if timestamp is None:
        raise SchemaError(
            "function 'unix_timestamp' needs a column: the current time is not "
            "deterministic, so eddyline does not offer it (put the time in the data)",
            operator="unix_timestamp",
        )
    return _call(
        "unix_timestamp",
        _column("unix_timestamp", timestamp),
        _format("unix_timestamp", format),
    )


def from_unixtime(timestamp: ColumnOrName, format: str = _DEFAULT_TIME_FORMAT) -> Expr:
    """Seconds since the epoch formatted with the pattern ``format`` in UTC."""
    return _call(
        "from_unixtime",
        _column("from_unixtime", timestamp),
        _format("from_unixtime", format),
    )


def date_format(date: ColumnOrName, format: str) -> Expr:
    """A timestamp, date or timestamp string formatted with the Spark
    datetime pattern ``format`` in UTC."""
    return _call("date_format", _column("date_format", date), _format("date_format", format))


def date_trunc(format: str, timestamp: ColumnOrName) -> Expr:
    """The timestamp truncated to the unit ``format``: ``year`` (``yyyy``,
    ``yy``), ``quarter``, ``month`` (``mon``, ``mm``), ``week`` (to Monday),
    ``day`` (``dd``), ``hour``, ``minute``, ``second``, ``millisecond`` or
    ``microsecond``; null for another unit, as Spark."""
    if not isinstance(format, str):
        raise SchemaError(
            f"function 'date_trunc' takes a unit (a str) first, got {format!r}",
            operator="date_trunc",
        )
    return _call("date_trunc", Expr._lit(format), _column("date_trunc", timestamp))


def year(col: ColumnOrName) -> Expr:
    """The year of a date, timestamp or date string (an ``int``)."""
    return _unary("year", col)


def quarter(col: ColumnOrName) -> Expr:
    """The quarter of the year, 1 to 4."""
    return _unary("quarter", col)


def month(col: ColumnOrName) -> Expr:
    """The month, 1 to 12."""
    return _unary("month", col)


def dayofmonth(col: ColumnOrName) -> Expr:
    """The day of the month, 1 to 31."""
    return _unary("dayofmonth", col)


def dayofyear(col: ColumnOrName) -> Expr:
    """The day of the year, 1 to 366."""
    return _unary("dayofyear", col)


def dayofweek(col: ColumnOrName) -> Expr:
    """The day of the week, 1 (Sunday) to 7 (Saturday), as Spark's."""
    return _unary("dayofweek", col)


def hour(col: ColumnOrName) -> Expr:
    """The hour of a timestamp (or timestamp string) in UTC, 0 to 23."""
    return _unary("hour", col)


def minute(col: ColumnOrName) -> Expr:
    """The minute, 0 to 59."""
    return _unary("minute", col)


def second(col: ColumnOrName) -> Expr:
    """The second, 0 to 59 (an ``int``, without the fraction)."""
    return _unary("second", col)


def window_time(windowColumn: ColumnOrName) -> Expr:
    """Spark's ``window_time``: the event time of a window's result, the last
    instant of the window ``windowColumn`` (a struct of ``start`` and ``end``,
    as ``group_by(F.window(...))`` gives it): ``end`` minus one step of its
    type, so ``end - 1`` for int64 milliseconds and one unit less for a
    timestamp (Spark's ``end - 1 µs`` for microseconds), 1 ms before the end
    as event time (docs/API.md "Chaining windows"). A window of timestamps in
    seconds has no such value: a ``SchemaError``.

    Example:
        >>> window_time("window")
        window_time(col('window'))
    """
    return _unary("window_time", windowColumn)


# -- JSON --------------------------------------------------------------------


def get_json_object(col: ColumnOrName, path: str) -> Expr:
    """The value at JSONPath ``path`` (``$.a.b``, ``$.a[0]``, ``$['a b']``)
    of a JSON string: a string's contents, other values as JSON text; null
    where the JSON is malformed or the path finds nothing.

    Example:
        >>> get_json_object("j", "$.user.id")
        get_json_object(col('j'), '$.user.id')
    """
    if not isinstance(path, str):
        raise SchemaError(
            f"function 'get_json_object' takes a JSONPath (a str), got {path!r}",
            operator="get_json_object",
        )
    return _call("get_json_object", _column("get_json_object", col), Expr._lit(path))


def _ddl_type(t: pa.DataType) -> str:
    """A pyarrow type in Spark's DDL."""
    simple = {
        pa.bool_(): "boolean",
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.date32(): "date",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{_ddl_type(t.value_type)}>"
    if pa.types.is_struct(t):
        fields = ",".join(f"`{f.name}`:{_ddl_type(f.type)}" for f in t)
        return f"struct<{fields}>"
    raise SchemaError(f"function 'from_json' cannot read JSON into type {t}", operator="from_json")


def _ddl(schema: object) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, pa.StructType | pa.Schema):
        fields = list(schema)
    elif isinstance(schema, list | tuple) and schema:
        fields = [
            f if isinstance(f, pa.Field) else pa.field(f[0], f[1])  # type: ignore[index]
            for f in schema
        ]
    else:
        raise SchemaError(
            "function 'from_json' takes a schema: a DDL string ('a INT, b STRING'), "
            f"a pyarrow schema or struct type, or a list of fields; got {schema!r}",
            operator="from_json",
        )
    return ", ".join(f"`{f.name}` {_ddl_type(f.type)}" for f in fields)


def from_json(col: ColumnOrName, schema: object, options: dict[str, str] | None = None) -> Expr:
    """The JSON string read into a struct of ``schema``: Spark's DDL
    (``"a INT, b STRING"``), a pyarrow schema or struct type, or a list of
    fields. As Spark's default (PERMISSIVE) mode: null for null input, a
    struct of nulls for malformed JSON, null for a field whose value does
    not fit its type. ``options`` are not supported yet (pass none).

    Example:
        >>> from_json("j", "a INT, b STRING")
        from_json(col('j'), 'a INT, b STRING')
    """
    if options:
        raise SchemaError(
            f"function 'from_json' takes no options yet, got {options!r}", operator="from_json"
        )
    return _call("from_json", _column("from_json", col), Expr._lit(_ddl(schema)))


def to_json(col: ColumnOrName, options: dict[str, str] | None = None) -> Expr:
    """A struct, array or map as a JSON string, as Spark writes it (null
    fields left out, timestamps as ``2024-01-01T00:00:00.000Z``)."""
    if options:
        raise SchemaError(
            f"function 'to_json' takes no options yet, got {options!r}", operator="to_json"
        )
    return _unary("to_json", col)


# -- aggregates (for keyed.agg / windowed.agg; eddyline/aggregates.py) --------
# Imported last: they shadow the builtins sum/min/max in this module's
# namespace, as pyspark.sql.functions does.
from .aggregates import *  # noqa: E402, F403
from .aggregates import __all__ as _aggregate_names  # noqa: E402

__all__ += [n for n in _aggregate_names if n not in ("AggregateColumn", "GroupingWindow")]
