"""Generators (``F.explode``, ``F.explode_outer``) in ``select``,
``with_columns`` and ``stream.explode``: the specs of the native flat-map
operator (``core/src/operator/explode.rs``).

Spark allows one generator per ``select``; an unnamed generator's column is
called ``col``, as in Spark.
"""

from __future__ import annotations

from ._specs import ExplodeSpec
from .errors import GraphError
from .expr import Expr

__all__ = ["explode_spec", "generator_of", "select_explode_spec"]


def generator_of(expr: Expr) -> tuple[bool, Expr] | None:
    """``(outer, array)`` when ``expr`` is ``F.explode(array)`` or
    ``F.explode_outer(array)``, else None."""
    found = expr._generator
    if found is None:
        return None
    name, array = found
    return name == "explode_outer", array


def _reads(exprs: list[Expr]) -> list[str]:
    used: dict[str, None] = {}
    for e in exprs:
        used.update(dict.fromkeys(e.columns()))
    return list(used)


def explode_spec(array: Expr, alias: str, outer: bool) -> ExplodeSpec:
    """``stream.explode(array, alias=alias)``: the input columns, and the
    elements as ``alias`` (replacing a column of that name in place)."""
    return ExplodeSpec([(alias, array)], 0, outer, True, _reads([array]))


def select_explode_spec(columns: list[tuple[str, Expr]], operator: str) -> ExplodeSpec | None:
    """The explode spec of a ``select`` whose columns hold a generator (its
    entry is replaced by the array expression), or None without one. Two
    generators are a ``GraphError``, as in Spark."""
    generator: int | None = None
    outer = False
    planned: list[tuple[str, Expr]] = []
    for i, (name, expr) in enumerate(columns):
        found = generator_of(expr)
        if found is None:
            planned.append((name, expr))
            continue
        if generator is not None:
            raise GraphError(
                f"select(): only one generator (explode) is allowed per select, as in Spark; "
                f"'{columns[generator][0]}' and '{name}' both are",
                operator=operator,
            )
        generator = i
        outer, array = found
        planned.append((name, array))
    if generator is None:
        return None
    return ExplodeSpec(planned, generator, outer, False, _reads([e for _, e in planned]))
