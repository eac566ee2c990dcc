"""Python ``flat_map`` and window ``reduce``/``apply`` in the generator.

- ``flat_map`` (feature ``op:explode:flat_map``): an explode op (``b`` 4) as a
  Python ``stream.flat_map`` that emits ``a`` copies of each row, copy ``j``
  with id ``4 * id + j`` and ``v + j``: the rows of the native explode, so the
  reference is the same. With ``schema=`` or without (then inferred from the
  first output), as the op's ``schema`` says.
- ``reduce`` (``stage:<window>:<agg>:reduce``): a tumbling, sliding or session
  window's ``sum``/``min``/``max`` as ``window(...).reduce(fn)``, ``fn`` keeping
  the accumulator's row with ``v`` summed or the smaller or larger; the output
  keeps ``k``, the window bounds and ``v`` (the reduced row's ``id``/``ts``
  depend on arrival order and are dropped).
- ``apply`` (``stage:<window>:<agg>:apply``): the same windows' aggregate as
  ``window(...).apply(fn)``, ``fn(key, window, rows)`` computing it from the
  window's rows in Python (``count`` too); ``apply_typed`` with ``schema=``,
  before a Spark table or the two Delta writers (made from the schema).

Both are drawn after every older draw (generate.py), so the cases of earlier
seeds keep their operators; the reference and the checks are the window
stage's (reference.py), whose columns they give.
"""

from __future__ import annotations

import random

from .case import Case, Op

FLAT_MAP = 4
"""An explode op's ``b`` for the ``flat_map`` spelling (0-3: render.py's)."""

WINDOWS = ("tumbling", "sliding", "session")

CLASSES = '''

class FlatCopies:
    """Python flat_map: a copies of a row, copy j with id 4 * id + j and v + j."""

    def __init__(self, a):
        self.a = a

    def __call__(self, row):
        return [
            {"id": row["id"] * 4 + j, "k": row["k"], "ts": row["ts"], "v": row["v"] + j}
            for j in range(self.a)
        ]


class ReduceV:
    """Window reduce of v: sum, min or max (the accumulator's row, v replaced)."""

    def __init__(self, agg):
        self.agg = agg

    def __call__(self, acc, row):
        if self.agg == "sum":
            v = acc["v"] + row["v"]
        else:
            v = min(acc["v"], row["v"]) if self.agg == "min" else max(acc["v"], row["v"])
        return {**acc, "v": v}


class ApplyV:
    """Window apply: the aggregate of the window's rows, under its column's name."""

    def __init__(self, agg):
        self.agg = agg

    def __call__(self, key, window, rows):
        if self.agg == "count":
            return [{"count": len(rows)}]
        values = [r["v"] for r in rows]
        return [{"v": {"sum": sum, "min": min, "max": max}[self.agg](values)}]


APPLY_V, APPLY_COUNT = (
    pa.schema([(c, pa.int64()) for c in ("k", "window_start", "window_end", last)])
    for last in ("v", "count")
)
'''
"""The job script's Python functions of these draws (render.py appends them)."""


def widen(rng: random.Random, case: Case, late_schema_ok: bool) -> None:
    """Draws the spellings. ``late_schema_ok``: whether the case's sinks take
    a stream whose schema is known only at run time (a flat_map without
    ``schema=`` makes it so; the Spark table and the two Delta writers need it
    when the job is built)."""
    for op in case.ops:
        pick = rng.random()
        if op.kind == "explode" and op.b < 2 and pick < 0.3:
            op.b = FLAT_MAP
            op.schema = op.schema or not late_schema_ok
    pick = rng.random()
    st = case.stage
    if st.kind in WINDOWS and pick < 0.3:
        spellings = ["apply"] if st.agg == "count" else ["reduce", "apply"]
        st.spelling = rng.choice(spellings)
        if st.spelling == "apply" and not late_schema_ok:
            st.spelling = "apply_typed"  # apply(fn, schema=...)


def flat_map_lines(i: int, op: Op) -> list[str]:
    """The op as a Python ``flat_map`` (render.py)."""
    tag = f"op{i}_explode"
    schema = ", schema=SCHEMA" if op.schema else ""
    return [f'    main = main.flat_map(FlatCopies({op.a}){schema}).name("{tag}").uid("{tag}")']


def window_call(case: Case) -> str:
    """What follows ``window(...)`` for the stage's spelling (render.py)."""
    st = case.stage
    if st.spelling == "reduce":
        return f'reduce(ReduceV("{st.agg}"))'
    if st.spelling == "apply_typed":
        schema = "APPLY_COUNT" if st.agg == "count" else "APPLY_V"
        return f'apply(ApplyV("{st.agg}"), schema={schema})'
    return f'apply(ApplyV("{st.agg}"))'


def after_window(case: Case) -> list[str]:
    """The lines after the window and its late output: a reduce's output keeps
    the window stage's columns only."""
    if case.stage.spelling != "reduce":
        return []
    columns = '"k", "window_start", "window_end", "v"'
    return [f'    out = out.select({columns}).name("win_cols").uid("win_cols")']
