"""Aggregates over function outputs in the generator: an aggregate's argument
is an expression of the row, not a column (``F.sum(F.length(...))`` in an
``fagg`` stage's ``agg``, ``sum(length(CAST(v AS STRING)))`` in a SQL window
query), so the aggregate operators evaluate it per row before they
accumulate, in running and windowed state, across merges of sessions,
checkpoints and restores.

- ``fagg`` (the DSL's ``key_by(...).agg`` and Spark's ``group_by(...).agg``,
  running or windowed): ``sum_length`` (``F.sum(F.length(v as string))``),
  ``max_abs`` (``F.max(F.abs(v - c))``), ``avg_double`` (``F.avg(v * 2)``,
  a double: within the float tolerance), ``count_upper`` (``F.count`` of
  ``F.upper`` of ``k`` as a string, null where ``v % m == 0``: a count of
  the non-null values). Their references are pandas over the group's rows
  (aggs.py), so every check of the stage applies (running: the update of the
  largest ``n``; windows, sessions and late rows as the stage's).
- SQL ``TUMBLE``/``HOP``/``SESSION`` queries (either spelling): the same as
  select items ``f_<name>`` after the other aggregates, integers only (the
  window queries' rows are compared as integers): ``min(v * 2 - c)`` in the
  place of the average. The reference is DuckDB running the same text.
  Running ``GROUP BY``s are left out: their check follows the last column's
  monotone value per key, and these columns would take its place.

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import random
from typing import Any

import pandas as pd

from .case import Case

FAGG = ["sum_length", "max_abs", "avg_double", "count_upper"]
SQL = ["sum_length", "max_abs", "min_double", "count_upper"]


def _param(rng: random.Random, name: str) -> list[Any]:
    if name in ("max_abs", "min_double"):
        return [rng.randint(0, 21)]
    if name == "count_upper":
        return [rng.randint(2, 4)]
    return []


def call(expr: list[Any]) -> str:
    """An ``fagg`` aggregate's DSL text, aliased ``a_<name>``."""
    name = expr[0]
    if name == "sum_length":
        text = 'F.sum(F.length(F.col("v").cast("string")))'
    elif name == "max_abs":
        text = f'F.max(F.abs(F.col("v") - {expr[1]}))'
    elif name == "avg_double":
        text = 'F.avg(F.col("v") * 2)'
    else:
        text = (
            f'F.count(F.upper(F.when(F.col("v") % {expr[1]} == 0, None)'
            '.otherwise(F.col("k").cast("string"))))'
        )
    return f'{text}.alias("a_{name}")'


def value(group: pd.DataFrame, expr: list[Any]) -> Any:
    """The reference value of one of these aggregates over a group's rows."""
    name, v = expr[0], group["v"]
    if name == "sum_length":
        return int(v.astype(str).str.len().sum())
    if name == "max_abs":
        return int((v - expr[1]).abs().max())
    if name == "avg_double":
        return float((v * 2).mean())
    if name == "min_double":
        return int((v * 2 - expr[1]).min())
    return int((v % expr[1] != 0).sum())


def sql_items(stage: Any) -> list[str]:
    """A SQL window query's select items ``f_<name>`` (``["fnaggs", [name,
    *params]...]``), after its other aggregates."""
    entry = next((e for e in stage.exprs if e[0] == "fnaggs"), None)
    if entry is None:
        return []
    texts = {
        "sum_length": lambda: "sum(length(CAST(v AS STRING)))",
        "max_abs": lambda c: f"max(abs(v - {c}))",
        "min_double": lambda c: f"min(v * 2 - {c})",
        "count_upper": lambda m: (
            f"count(upper(CASE WHEN v % {m} = 0 THEN NULL ELSE CAST(k AS STRING) END))"
        ),
    }
    return [f"{texts[e[0]](*e[1:])} AS f_{e[0]}" for e in entry[1:]]


def is_fnagg(name: str) -> bool:
    return name in FAGG


def windowed_sql(stage: Any) -> bool:
    """A SQL ``TUMBLE``/``HOP``/``SESSION`` query whose rows are not grouped
    again (a regrouping reads only the stage's own aggregate)."""
    windowed = stage.kind == "sql" and stage.form in ("tumble", "hop", "session")
    return windowed and not any(e[0] == "regroup" for e in stage.exprs)


def widen(rng: random.Random, case: Case) -> None:
    """Half the ``fagg`` stages get one or two of these aggregates (at most
    eight in all), and half the SQL window queries not grouped again one to
    three."""
    st = case.stage
    if st.kind == "fagg" and rng.random() < 0.5:
        if any(e[0] == "sum_big" for e in st.exprs):
            return  # ANSI's failing sum (ansi.py): the job's failure is the check
        for name in rng.sample(FAGG, rng.randint(1, 2)):
            st.exprs.append([name, *_param(rng, name)])
    elif windowed_sql(st) and rng.random() < 0.5:
        names = rng.sample(SQL, rng.randint(1, 3))
        st.exprs.append(["fnaggs", *([n, *_param(rng, n)] for n in names)])
