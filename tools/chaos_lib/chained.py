"""Chained windows in the generator: a tumbling window stage's results
windowed again (``stage:tumbling:<agg>:chained``).

The stage's per-key windows of ``size_ms`` are keyed by ``k`` again and summed
(``count``: the counts summed; ``min``/``max``: of the minima or maxima) in
tumbling windows ``a`` (2, 3 or 5) times as long. A window's result is timed
at its end minus one millisecond (docs/API.md "Windows"), so each lands in the
longer window that holds its own: the output equals the stage's aggregate over
windows of ``a * size_ms``, which is the reference (reference.py). A result
timed at its end instead would land one window late wherever it ends on a long
window's bound, and the comparison shows it.

Drawn after every older draw (generate.py), only without late rows: a late
row's value would reach the second window after its first window fired.
"""

from __future__ import annotations

import random

from .case import Case

SECOND = {"sum": 'sum("v")', "min": 'min("v")', "max": 'max("v")', "count": 'sum("count")'}
"""The second window's aggregate of the first's column."""


def widen(rng: random.Random, case: Case) -> None:
    st = case.stage
    pick = rng.random()
    late = st.late or any(s.late_rows for s in case.sources)
    if st.kind == "tumbling" and not st.spelling and not late and pick < 0.5:
        st.a = rng.choice([2, 3, 5])


def size(case: Case) -> int:
    """The windows the output is computed over (the reference's)."""
    st = case.stage
    return st.size_ms * st.a if st.kind == "tumbling" and st.a else st.size_ms


def lines(case: Case) -> list[str]:
    """The second window after the stage's (render.py)."""
    st = case.stage
    if st.kind != "tumbling" or not st.a:
        return []
    return [
        f'    out = out.key_by("k").window(ed.Tumbling("{size(case)}ms")).{SECOND[st.agg]}'
        '.name("win2").uid("win2")'
    ]
