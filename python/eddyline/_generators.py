"""Generators (``F.explode``, ``F.explode_outer``, ``F.posexplode``,
``F.posexplode_outer``) in ``select``, ``with_columns``, ``stream.explode`` and
``stream.posexplode``: the specs of the native flat-map operator
(``core/src/operator/explode.rs``).

Spark allows one generator per ``select``; an unnamed generator's columns are
called ``col`` (and ``pos`` for ``posexplode``), as in Spark; a ``posexplode``
is named with two aliases, ``.alias("p", "x")``.
"""

from __future__ import annotations

from typing import NamedTuple

from ._specs import ExplodeSpec
from .errors import GraphError
from .expr import Expr

__all__ = ["Generator", "explode_spec", "generator_names", "generator_of", "select_explode_spec"]


class Generator(NamedTuple):
    """A generator call: ``outer`` keeps null and empty arrays, ``array`` is
    its argument, ``position`` is true for ``posexplode``."""

    outer: bool
    array: Expr
    position: bool


def generator_of(expr: Expr) -> Generator | None:
    """The generator ``expr`` is (``F.explode(array)`` and the others), else None."""
    found = expr._generator
    if found is None:
        return None
    name, array = found
    return Generator(name.endswith("_outer"), array, name.startswith("pos"))


def generator_names(expr: Expr, generator: Generator, operator: str) -> tuple[str | None, str]:
    """``(position, element)``: the names of a generator's columns in a
    ``select``: its aliases, else Spark's ``pos`` and ``col``. A count of
    aliases other than the generator's columns is a ``GraphError``, as in Spark."""
    aliases = expr.aliases
    if generator.position:
        if not aliases:
            return "pos", "col"
        if len(aliases) == 2:
            return aliases[0], aliases[1]
        raise GraphError(
            f"select(): posexplode makes two columns, a position and an element: name "
            f"both with .alias(pos, col), got {len(aliases)} name(s) {aliases}",
            operator=operator,
        )
    if len(aliases) > 1:
        raise GraphError(
            f"select(): explode of an array makes one column, got the names {aliases}",
            operator=operator,
        )
    return None, aliases[0] if aliases else "col"


def _reads(exprs: list[Expr]) -> list[str]:
    used: dict[str, None] = {}
    for e in exprs:
        used.update(dict.fromkeys(e.columns()))
    return list(used)


def explode_spec(array: Expr, alias: str, outer: bool, position: str | None = None) -> ExplodeSpec:
    """``stream.explode(array, alias=alias)``: the input columns, and the
    elements as ``alias`` (replacing a column of that name in place); with
    ``position`` (``stream.posexplode``) the positions too, as ``position``."""
    return ExplodeSpec([(alias, array)], 0, outer, True, _reads([array]), position)


def select_explode_spec(columns: list[tuple[str, Expr]], operator: str) -> ExplodeSpec | None:
    """The explode spec of a ``select`` whose columns hold a generator (its
    entry is replaced by the array expression, named after the elements), or
    None without one. Two generators are a ``GraphError``, as in Spark."""
    generator: int | None = None
    found: Generator | None = None
    position: str | None = None
    planned: list[tuple[str, Expr]] = []
    for i, (name, expr) in enumerate(columns):
        this = generator_of(expr)
        if this is None:
            planned.append((name, expr))
            continue
        if generator is not None:
            raise GraphError(
                f"select(): only one generator (explode) is allowed per select, as in Spark; "
                f"'{columns[generator][0]}' and '{name}' both are",
                operator=operator,
            )
        generator, found = i, this
        position, element = generator_names(expr, this, operator)
        planned.append((element, this.array))
    if generator is None or found is None:
        return None
    reads = _reads([e for _, e in planned])
    return ExplodeSpec(planned, generator, found.outer, False, reads, position)
