"""Spark's ``nanvl`` in the generator (``F.nanvl``, docs/API.md "Functions"):
``nanvl(a, b)`` is ``a`` unless ``a`` is NaN, then ``b``; a null ``a`` gives
null (Spark's ``NaNvl`` looks at ``b`` only for a NaN ``a``).

The first argument is a double holding NaN, nulls and numbers: ``F.when(v % 4
== r, NaN)`` otherwise ``f`` (``vn / 8``, null where ``vn`` is). The second is a
literal, the column ``f`` (null in places), ``F.sqrt(f - c)`` (NaN below
``c``, Spark's ``sqrt`` of a negative double, null where ``f`` is) or the NaN
literal. The comparison reads NaN as null (check.py: pandas holds a double's
null as NaN), so half the draws wrap the call in ``F.isnan``, which is true for
NaN and false for null, to tell the two apart.

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import math
import random
from typing import Any

from .case import Case

NAME = "nanvl"
SECONDS = ["lit", "col", "sqrt", "nan"]


def draw(rng: random.Random) -> list[Any]:
    """``["nanvl", r, second, c, isnan]``: NaN where ``v % 4 == r``; the second
    argument (``c``: the literal, or the ``sqrt`` offset); ``isnan``: 1 to wrap."""
    second = rng.choice(SECONDS)
    c = rng.choice([-1.5, 0.0, 2.25]) if second == "lit" else rng.choice([0.5, 1.0, 2.0])
    return [NAME, rng.randint(0, 3), second, c, int(rng.random() < 0.5)]


def _second_dsl(second: str, c: float) -> str:
    if second == "lit":
        return f"F.lit({c!r})"
    if second == "col":
        return 'F.col("f")'
    if second == "sqrt":
        return f'F.sqrt(F.col("f") - {c!r})'
    return 'F.lit(float("nan"))'


def dsl(r: int, second: str, c: float, isnan: int) -> str:
    """The DSL text."""
    first = f'F.when(F.col("v") % 4 == {r}, F.lit(float("nan"))).otherwise(F.col("f"))'
    call = f"F.nanvl({first}, {_second_dsl(second, c)})"
    return f"F.isnan({call})" if isnan else call


def _second(row: dict[str, Any], second: str, c: float) -> float | None:
    f = row["f"]
    if second == "lit":
        return c
    if second == "col":
        return f
    if second == "sqrt":
        if f is None:
            return None
        return math.sqrt(f - c) if f >= c else math.nan  # Java's sqrt of a negative
    return math.nan


def value(row: dict[str, Any], r: int, second: str, c: float, isnan: int) -> Any:
    """The reference over one row with its base columns (fnlib.base)."""
    first = math.nan if row["v"] % 4 == r else row["f"]
    if first is None:
        out = None
    elif math.isnan(first):
        out = _second(row, second, c)
    else:
        out = first
    if isnan:
        return out is not None and math.isnan(out)
    return out


TEMPLATE = (draw, dsl, value)
"""The ``fn`` stage's template (fnlib.Template): the draw, the DSL text, the reference."""


def widen(rng: random.Random, case: Case) -> None:
    """Half the ``fn`` stages get one ``nanvl`` (before their other
    expressions, after the filter, as floordiv.py's)."""
    st = case.stage
    if st.kind == "fn" and rng.random() < 0.5:
        at = next((i for i, e in enumerate(st.exprs) if e[0] != "filter"), len(st.exprs))
        st.exprs.insert(at, draw(rng))
