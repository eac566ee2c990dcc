"""Division by zero in Spark's spellings (``env.sql``, ``F.expr``) against PySpark
(``local[2]``) with ``spark.sql.ansi.enabled`` off and on, on the same rows; and the
DSL's operators (``ed.col``, ``F.col``), which follow Python.

Spark's ``/``, ``%``, ``pmod`` and ``floor(a / b)`` are null where the divisor is zero
(``0``, ``0.0`` or ``-0.0``) with ANSI mode off; with it on the query fails with
``DIVIDE_BY_ZERO`` (``/``) or ``REMAINDER_BY_ZERO`` (``%``, ``pmod``) where the dividend
is not null. eddyline with ``StreamEnvironment(ansi=True)`` fails the job with
``ed.JobFailedError`` naming the operator, the error class and the expression
(docs/API.md "Functions")."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F
from functions.conftest import spark_settings

MIN = -(2**63)
INF = math.inf
NAN = math.nan
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("a", pa.int64()),
        ("b", pa.int64()),
        ("f", pa.float64()),
        ("g", pa.float64()),
        ("n", pa.int32()),
    ]
)
SPARK_SCHEMA = "id bigint, a bigint, b bigint, f double, g double, n int"
# Zero divisors of both types (and -0.0), in rows whose dividend is and is not null;
# negatives, NaN, infinities, bigint's extreme.
ROWS = [
    (0, 7, 0, 7.5, 0.0, 3),
    (1, -7, 2, -7.5, -0.0, -3),
    (2, 7, None, NAN, 0.0, 0),
    (3, None, 0, None, 0.0, None),
    (4, 0, 0, 0.0, 0.0, 0),
    (5, MIN, -1, INF, 2.0, 1),
    (6, 9, -2, -INF, NAN, -2),
    (7, -9, 3, 1.0, -2.0, 7),
]
# Every case divides by zero somewhere, unless it says otherwise (the ANSI test).
CASES = {
    "a / b": True,
    "a % b": True,
    "floor(a / b)": True,
    "pmod(a, b)": True,
    "mod(a, b)": True,
    "f / g": True,
    "f % g": True,
    "floor(f / g)": True,
    "pmod(f, g)": True,
    "a / g": True,
    "f / b": True,
    "f / -g": True,
    "n / n": True,
    "floor(a / n)": True,
    "a / 0": True,
    "f / 0.0": True,
    "a % 0": True,
    "floor(a / 0)": True,
    "7 / 0": True,
    "a / null": False,
    "CASE WHEN b = 0 THEN -1 ELSE a / b END": False,
    # b > 0, not b <> 0: Spark's ANSI floor of -2^63 / -1 (2^63) overflows, where
    # eddyline's saturates (docs/API.md "Functions", ANSI mode)
    "CASE WHEN b > 0 THEN floor(a / b) END": False,
    "CASE WHEN g <> 0 THEN f % g ELSE 0.0 END": False,
    "coalesce(a / b, 0.5)": True,
}


def table(rows: list[tuple[Any, ...]] = ROWS) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, r, strict=True)) for r in rows], schema=SCHEMA
    )


def spark_rows(spark: Any, texts: list[str], ansi: bool) -> list[dict[str, Any]]:
    frame = spark.createDataFrame(ROWS, SPARK_SCHEMA)
    with spark_settings(spark, {"spark.sql.ansi.enabled": str(ansi).lower()}):
        out = frame.selectExpr("id", *(f"{t} AS c{i}" for i, t in enumerate(texts))).collect()
    return sorted((r.asDict() for r in out), key=lambda r: r["id"])


def eddyline_rows(spelling: str, texts: list[str], ansi: bool) -> list[dict[str, Any]]:
    env = ed.StreamEnvironment(ansi=ansi)
    source = env.from_arrow(table())
    if spelling == "sql":
        source.create_temporary_view("t")
        columns = ", ".join(f"{t} AS c{i}" for i, t in enumerate(texts))
        out = env.sql(f"SELECT id, {columns} FROM t").collect()
    else:
        exprs = [F.expr(t).alias(f"c{i}") for i, t in enumerate(texts)]
        out = source.select("id", *exprs).collect()
    env.execute()
    return sorted(out.to_pylist(), key=lambda r: r["id"])


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NaN as a string (NaN != NaN), -0.0 as 0.0 (Spark's rows and eddyline's print
    either), ints as ints."""

    def value(v: Any) -> Any:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else v + 0.0
        return v

    return [{k: value(v) for k, v in r.items()} for r in rows]


@pytest.mark.parametrize("spelling", ["sql", "expr"])
def test_division_by_zero_is_null_as_in_spark(spark: Any, spelling: str) -> None:
    texts = list(CASES)
    want = comparable(spark_rows(spark, texts, ansi=False))
    # Non-vacuous: zero divisors gave nulls where the dividend is valid.
    assert want[0]["c0"] is None and want[0]["c1"] is None and want[1]["c5"] is None
    assert want[1]["c11"] is None and want[4]["c12"] is None
    got = comparable(eddyline_rows(spelling, texts, ansi=False))
    for i, text in enumerate(texts):
        column = f"c{i}"
        assert [r[column] for r in got] == [r[column] for r in want], text


@pytest.mark.parametrize("spelling", ["sql", "expr"])
@pytest.mark.parametrize("text", [t for t, zero in CASES.items() if zero])
def test_division_by_zero_fails_under_ansi_as_in_spark(
    spark: Any, spelling: str, text: str
) -> None:
    from pyspark.errors import ArithmeticException

    remainder = "%" in text or "mod" in text
    error_class = "REMAINDER_BY_ZERO" if remainder else "DIVIDE_BY_ZERO"
    with pytest.raises(ArithmeticException, match=error_class):
        spark_rows(spark, [text], ansi=True)
    with pytest.raises(ed.JobFailedError, match=rf"\[{error_class}\]") as info:
        eddyline_rows(spelling, [text], ansi=True)
    message = str(info.value)
    assert info.value.operator is not None and f"operator '{info.value.operator}'" in message
    assert "spark.sql.ansi.enabled" in message
    # The expression (a division as the DSL spells it) or the function.
    assert (" % " in text or "mod" in message) if remainder else " / " in message, message


@pytest.mark.parametrize("spelling", ["sql", "expr"])
def test_guarded_division_passes_under_ansi_as_in_spark(spark: Any, spelling: str) -> None:
    texts = [t for t, zero in CASES.items() if not zero]
    want = comparable(spark_rows(spark, texts, ansi=True))
    assert comparable(eddyline_rows(spelling, texts, ansi=True)) == want


def test_spark_division_survives_pickling() -> None:
    """Worker processes receive expressions pickled: Spark's ``/`` stays Spark's."""
    spark_division = pickle.loads(pickle.dumps(F.expr("a / b")))
    env = ed.StreamEnvironment()
    out = env.from_arrow(table()).select("id", spark_division.alias("q")).collect()
    env.execute()
    assert [r["q"] for r in sorted(out.to_pylist(), key=lambda r: r["id"])][:3] == [
        None,
        -3.5,
        None,
    ]


def _dsl(expr: ed.Expr, rows: list[tuple[Any, ...]] = ROWS) -> list[Any]:
    env = ed.StreamEnvironment()
    out = env.from_arrow(table(rows)).select("id", expr.alias("q")).collect()
    env.execute()
    return [r["q"] for r in sorted(out.to_pylist(), key=lambda r: r["id"])]


@pytest.mark.parametrize(
    ("expr", "shown"),
    [
        (ed.col("a") / 0, "(col('a') / 0)"),
        (ed.col("a") // ed.col("b"), "(col('a') // col('b'))"),
        (ed.col("a") % 0, "(col('a') % 0)"),
        (ed.col("f") / 0.0, "(col('f') / 0.0)"),
        (ed.col("f") / -0.0, "(col('f') / -0.0)"),
        (ed.col("f") / ed.col("g"), "(col('f') / col('g'))"),
        (ed.col("f") // ed.col("g"), "(col('f') // col('g'))"),
        (ed.col("f") % ed.col("g"), "(col('f') % col('g'))"),
        (F.col("a") / F.col("g"), "(col('a') / col('g'))"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_dsl_division_by_zero_is_an_error_as_in_python(expr: ed.Expr, shown: str) -> None:
    """Python raises ZeroDivisionError on ``1 / 0`` and ``1.0 / 0.0`` (and ``-0.0``);
    ``ed.col``'s operators (``F.col`` is ``ed.col``) fail the job, naming the operator
    and the expression, whatever ``ansi``."""
    with pytest.raises(ed.JobFailedError, match="division by zero in expression") as info:
        _dsl(expr)
    assert info.value.operator == "select_1"
    assert shown.replace("'", '"') in str(info.value)


def test_dsl_division_follows_ieee_for_other_divisors() -> None:
    """Away from zero, double division is IEEE 754's: NaN and infinities pass."""
    rows = [r for r in ROWS if r[4] is not None and r[4] != 0.0]
    got = _dsl(ed.col("f") / ed.col("g"), rows)
    assert got[0] == INF and math.isnan(got[1]) and got[2] == -0.5
    # A zero divisor in a row whose dividend is null is not divided.
    assert _dsl(ed.col("a") / ed.col("b"), [ROWS[3], ROWS[1]]) == [-3.5, None]
