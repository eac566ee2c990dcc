"""Spark's ``window_time`` in the generator (docs/API.md "SQL", Spark's
spelling; ``F.window_time``): the event time of a window's result, its end
- 1 ms for int64 milliseconds (Spark's end - 1 us for its microsecond
timestamps).

A stage with ``wtime`` adds the column ``wt`` (or, grouped again, chains
on it: ``widen``): a SQL window query in Spark's
spelling selects ``window_time(window)`` (``session_window`` of a session
query) beside the window's bounds, and an ``fagg`` stage of the ``group_by``
spelling adds ``with_columns(wt=F.window_time("window"))`` after its
aggregates. Both references are the window's end - 1 (DuckDB's text and
``aggs.aggregates``), so the check stays the stage's.

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import random

from .case import Case, Stage


def chainable(stage: Stage) -> bool:
    """A Spark-spelled ``TUMBLE``/``HOP`` query whose results are grouped again."""
    regroup = any(e[0] == "regroup" for e in stage.exprs)
    spark = stage.kind == "sql" and stage.spelling == "spark"
    return spark and stage.form in ("tumble", "hop") and regroup


def chained_ms(stage: Stage) -> int:
    """The size of the windows over ``window_time`` (0: not chained)."""
    entry = next((e for e in stage.exprs if e[0] == "wtime"), None)
    return int(entry[1]) if stage.wtime and entry and chainable(stage) else 0


def eligible(stage: Stage) -> bool:
    """A Spark-spelled SQL window query whose results are not grouped again,
    or an ``fagg`` window of the ``group_by`` spelling."""
    if stage.kind == "sql":
        regroup = any(e[0] == "regroup" for e in stage.exprs)
        windowed = stage.form in ("tumble", "hop", "session")
        return windowed and stage.spelling == "spark" and not regroup
    return stage.kind == "fagg" and bool(stage.form) and stage.spelling.startswith("group_by")


def sql_column(stage: Stage) -> str:
    """The engine's select item (after the window's bounds), or nothing."""
    if not stage.wtime:
        return ""
    column = "session_window" if stage.form == "session" else "window"
    return f", window_time({column}) AS wt"


def duck_column(stage: Stage) -> str:
    """The reference's select item: the window's end - 1."""
    return ", window_end - 1 AS wt" if stage.wtime and not chained_ms(stage) else ""


def dsl_line(stage: Stage) -> list[str]:
    """An ``fagg`` stage's ``F.window_time`` of its window struct."""
    if not stage.wtime:
        return []
    column = "session_window" if stage.form == "session" else "window"
    return [
        f'    out = out.with_columns(wt=F.window_time("{column}")).name("fagg_wt").uid("fagg_wt")'
    ]


def features(stage: Stage) -> list[str]:
    """``window_time`` (``:chained``: windowed again on it)."""
    if not stage.wtime:
        return []
    return ["window_time" + (":chained" if chained_ms(stage) else "")]


def widen(rng: random.Random, case: Case) -> None:
    """``window_time`` in half of the eligible stages, and in half the
    Spark-spelled window queries grouped again: their results windowed again
    by ``window(window_time(window), '<m> seconds')`` (``["wtime", m]``: 2,
    3 or 5 windows' sizes; a sliding window's result lands in the window
    of its end - 1)."""
    st = case.stage
    if eligible(st) and rng.random() < 0.5:
        st.wtime = True
    elif chainable(st) and rng.random() < 0.5:
        st.wtime = True
        st.exprs.append(["wtime", st.size_ms * rng.choice([2, 3, 5])])
