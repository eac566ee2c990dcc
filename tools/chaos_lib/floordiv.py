"""Spark's ``floor(a / b)`` of two integers in the generator (docs/API.md
"SQL"; docs/DESIGN.md "Expressions"): Spark's ``/`` turns both operands into
doubles and divides, and ``floor`` turns the floored double into a bigint.
The engine runs an integer floor division where that is provably the same
(|a| < 2^53, |b| <= 2^53) and the double computation elsewhere, so the
values drawn straddle both: dividends around zero, negative ones and ones
near and beyond 2^53 (where a bigint stops being exact as a double and the
dividend rounds before the division), divisors of both signs, small and
near and beyond 2^53, by key or as a literal.

The dividend is ``(<col> - c) * m + id % 1009`` (``col``: ``v`` in SQL, the
nullable ``vn`` of a ``fn`` stage), the divisor ``(1 - k % 2 * 2) * (k % 4 +
d)`` (its sign by key) or the literal ``d`` (either sign). No divisor is
zero: Spark's spellings of division by zero are being redefined (null) in
the engine, so zero divisors are not drawn yet (docs/CHAOS.md). Every value
stays far inside bigint's range, so neither the products nor the floor
saturate.

A ``fn`` stage gets it as ``F.expr``, with a plain Python reference to
Spark's semantics (``spark_floor_quotient``); a SQL select or ``UNION ALL``
as a select item, whose reference is DuckDB running the same text (DuckDB's
``/`` of two bigints is also a double division; its ``floor`` of a double
is a double holding the same whole number, exact in the comparison).

Drawn after every older draw (generate.py), so earlier seeds keep their
cases.
"""

from __future__ import annotations

import math
import random
from typing import Any

from .case import Case

NAME = "floordiv"
EXACT = 1 << 53
SCALES = [1, 3, 1_000_003, 2**49 + 1, 2**51 - 1, EXACT - 1, EXACT + 1]
"""Multipliers of ``col - c`` (1 to 21 in size): small dividends, and ones
on both sides of 2^53."""
DIVISORS = [1, 2, 7, 1_000, EXACT - 2, EXACT, EXACT + 1, 3 * EXACT + 5]
"""Divisor magnitudes (``k % 4`` more by key): never zero."""


def draw(rng: random.Random) -> list[Any]:
    """``["floordiv", c, m, d, by]``: ``by`` "key" (a divisor by key) or
    "lit" (the literal ``d``, either sign)."""
    c, m = rng.randint(0, 21), rng.choice(SCALES)
    d, by = rng.choice(DIVISORS), rng.choice(["key", "lit"])
    if by == "lit" and rng.random() < 0.5:
        d = -d
    return [NAME, c, m, d, by]


def text(column: str, c: int, m: int, d: int, by: str) -> str:
    """The SQL text of the quotient (Spark's, DuckDB's and ``F.expr``'s)."""
    divisor = f"((1 - k % 2 * 2) * (k % 4 + {d}))" if by == "key" else f"({d})"
    return f"floor((({column} - {c}) * {m} + id % 1009) / {divisor})"


def operands(row: dict[str, Any], column: str, c: int, m: int, d: int, by: str) -> tuple[Any, int]:
    """The dividend (None when ``column`` is null) and the divisor of a row."""
    x = row[column]
    a = None if x is None else (x - c) * m + row["id"] % 1009
    b = (1 - row["k"] % 2 * 2) * (row["k"] % 4 + d) if by == "key" else d
    return a, b


def spark_floor_quotient(a: int, b: int) -> int:
    """Spark's ``floor(a / b)`` of bigints: both rounded to doubles, divided
    as doubles (IEEE, as Java's), the quotient floored (never out of
    bigint's range here)."""
    return math.floor(float(a) / float(b))


def value(row: dict[str, Any], c: int, m: int, d: int, by: str) -> int | None:
    """The reference of a ``fn`` stage's ``F.expr`` over ``vn`` (null in, null out)."""
    a, b = operands(row, "vn", c, m, d, by)
    return None if a is None else spark_floor_quotient(a, b)


TEMPLATE = (
    draw,
    lambda c, m, d, by: f"F.expr({text('vn', c, m, d, by)!r})",
    value,
)
"""The ``fn`` stage's template (fnlib.Template): the draw, the DSL text, the reference."""


def sql_item(expr: list[Any]) -> str:
    """A SQL select item's text (over ``v``, never null)."""
    return text("v", *expr[1:])


def widen(rng: random.Random, case: Case) -> None:
    """Half the ``fn`` stages get the quotient as ``F.expr`` (before their
    other expressions, after the filter: a generator drawn before stays in
    the ``select`` half, render.py), and half the SQL selects and ``UNION
    ALL``s as a select item."""
    st = case.stage
    if st.kind == "fn" and rng.random() < 0.5:
        at = next((i for i, e in enumerate(st.exprs) if e[0] != "filter"), len(st.exprs))
        st.exprs.insert(at, draw(rng))
    elif st.kind == "sql" and st.form in ("select", "union") and rng.random() < 0.5:
        st.exprs.append(draw(rng))
