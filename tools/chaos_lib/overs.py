"""Over windows in the generator (docs/API.md "Over windows"): SQL's
``agg(v) OVER (PARTITION BY k ORDER BY ts[, v][, id] ROWS BETWEEN n PRECEDING
AND CURRENT ROW)`` (a ``sql`` stage of ``form`` ``over``) and its DSL twin
``key_by("k").over_rows(..., preceding=n, order_by=...)`` (a stage of kind
``over``). ``a`` is ``n``; ``exprs`` holds ``["agg", name]`` per aggregate
(``sum``, ``count`` of rows, ``count_v`` of values, ``avg``, ``min``,
``max``), ``["order", *columns]`` (the ``ORDER BY`` columns after the event
time), ``["spell", "inline" | "window"]`` (SQL: an ``OVER (...)`` per
aggregate or one named ``WINDOW w``), ``["frame", "between" | "short"]``
(SQL: ``ROWS BETWEEN n PRECEDING AND CURRENT ROW`` or ``ROWS n PRECEDING``)
and SQL's ``["where", ...]`` (sqlgen.WHERE: a filter before the window).

Each row comes out once with the aggregates over itself and its key's ``n``
rows before it, in event-time order, ties ordered by the ``order`` columns
and then by every column of the operator's input in schema order; the
stream's columns are ``id, k, ts, v`` in that order and ``id`` is unique, so
the order is ``ts, <order>, id`` whatever else ties: the reference is
DuckDB's window functions over that order.

Late rows: half of the stages get late candidates (``data.py``: a split ends
with a row far ahead, then rows of the first half of the span). A row at or
before the watermark when it arrives is dropped (counted in
``late_records``, no late output); which candidates were depends on the
other splits. But every other row is on time (``data.py``), and an on-time
candidate is above the watermark, so no row of its key at or after its time
has been released: it takes its place in its key's order exactly as in the
batch. So the output is exactly the batch over-window over every row but the
dropped candidates, and the dropped ones are the candidates no output holds
(``dropped``). A committed row's frame holds only rows released before it,
which a checkpoint commits with it, so a run that stopped early (a refused
restore) is checked the same way. Not with KafkaSink: an attempt that failed
may have dropped other candidates than the committed one, and its rows'
frames then differ.

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import random
from typing import Any

import pandas as pd

from . import overframes
from .case import Case, Stage

AGGS = ["sum", "count", "count_v", "avg", "min", "max"]
SQL_CALL = {
    "sum": "sum(v)",
    "count": "count(*)",
    "count_v": "count(v)",
    "avg": "avg(v)",
    "min": "min(v)",
    "max": "max(v)",
}
DSL_CALL = {
    "sum": 'F.sum("v")',
    "count": 'F.count("*")',
    "count_v": 'F.count("v")',
    "avg": 'F.avg("v")',
    "min": 'F.min("v")',
    "max": 'F.max("v")',
}
COLUMNS = ["id", "k", "ts", "v"]


def _expr(stage: Stage, name: str) -> list[Any] | None:
    return next((e for e in stage.exprs if e[0] == name), None)


def is_over(stage: Stage) -> bool:
    """Whether the stage is an over window (SQL's or the DSL's)."""
    return stage.kind == "over" or (stage.kind == "sql" and stage.form == "over")


def aggregates(stage: Stage) -> list[str]:
    """The stage's aggregates (``count`` where shrinking dropped every entry)."""
    return [e[1] for e in stage.exprs if e[0] == "agg"] or ["count"]


def order(stage: Stage) -> list[str]:
    """The ``ORDER BY`` columns after the event time."""
    entry = _expr(stage, "order")
    return list(entry[1:]) if entry else []


def _frame(stage: Stage, duck: bool) -> str:
    newer = overframes.frame(stage, duck)
    if newer is not None:
        return newer
    n = stage.a
    short = (_expr(stage, "frame") or ["frame", "between"])[1] == "short"
    if short and not duck:
        return "ROWS CURRENT ROW" if n == 0 else f"ROWS {n} PRECEDING"
    return f"ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"


def _window(stage: Stage, duck: bool) -> str:
    """The ``OVER`` specification; DuckDB's orders ties by ``id`` last (the
    engine's order, the module's docstring)."""
    cols = ["ts", *order(stage)]
    if duck and "id" not in cols and not overframes.is_range(stage):
        cols.append("id")  # a RANGE frame's peers share their values
    return f"PARTITION BY k ORDER BY {', '.join(cols)} {_frame(stage, duck)}".rstrip()


def query(stage: Stage, duck: bool = False) -> str:
    """The SQL the engine runs (``duck``: the reference's text, which DuckDB
    runs over the rows the engine did not drop as late)."""
    from .sqlgen import _where

    named = (_expr(stage, "spell") or ["spell", "inline"])[1] == "window"
    over = "w" if named else f"({_window(stage, duck)})"
    calls = [f"{SQL_CALL[a]} OVER {over} AS a_{a}" for a in aggregates(stage)]
    calls += overframes.chain_sql(stage, duck)
    where = _where(stage.exprs) if stage.kind == "sql" else ""
    window = f" WINDOW w AS ({_window(stage, duck)})" if named else ""
    return f"SELECT id, k, ts, v, {', '.join(calls)} FROM t{where}{window}"


def dsl_lines(case: Case) -> list[str]:
    """The DSL stage (``out = ...``)."""
    st = case.stage
    calls = [f'{DSL_CALL[a]}.alias("a_{a}")' for a in aggregates(st)]
    by = order(st)
    order_by = f", order_by={tuple(by)!r}" if by else ""
    op, arg = overframes.dsl_call(st) or ("over_rows", f"preceding={st.a}")
    return [
        f'    out = main.key_by("k").{op}(',
        *(f"        {c}," for c in calls),
        f"        {arg}{order_by},",
        '    ).name("over").uid("over")',
        *overframes.chain_dsl(st),
    ]


def expected(case: Case, main: pd.DataFrame, late_ids: set[int]) -> pd.DataFrame:
    """DuckDB's window functions over ``main`` but for the dropped candidates."""
    import duckdb

    t = main[~main["id"].isin(late_ids)]
    with duckdb.connect() as con:
        con.register("t", t)
        out = con.execute(query(case.stage, duck=True)).df()
    return out


def dropped(case: Case, outputs: dict[str, pd.DataFrame]) -> set[int]:
    """The late candidates no output holds: dropped as late (the module's
    docstring). Any other row an output lacks is lost, and the comparison says so."""
    from .reference import candidates

    maybe = candidates(case)
    if not maybe:
        return set()
    seen: set[int] = set()
    for got in outputs.values():
        if not got.empty and "id" in got.columns:
            seen.update(int(i) for i in got["id"])
    return maybe - seen


def features(stage: Stage) -> list[str]:
    """The mix names of an over stage: its aggregates and order."""
    if not is_over(stage):
        return []
    out = [f"over:{a}" for a in aggregates(stage)]
    if order(stage):
        out.append("over:order_by")
    return out + overframes.features(stage)


def _stage(rng: random.Random, sql: bool) -> Stage:
    st = Stage("sql", form="over") if sql else Stage("over")
    st.a = rng.choice([0, 1, 2, 5, 20])
    st.exprs = [["agg", a] for a in rng.sample(AGGS, rng.randint(1, 3))]
    extra = rng.choice([[], [], ["v"], ["v", "id"], ["id"]])
    if extra:
        st.exprs.append(["order", *extra])
    if sql:
        st.exprs.append(["spell", rng.choice(["inline", "window"])])
        st.exprs.append(["frame", rng.choice(["between", "short"])])
        if rng.random() < 0.4:
            from .sqlgen import WHERE

            name = rng.choice(sorted(WHERE))
            st.exprs.insert(0, ["where", name, *WHERE[name][0](rng)])
    return st


def widen(rng: random.Random, case: Case) -> None:
    """An over window in the place of half the SQL selects and running
    ``GROUP BY``s (SQL's) and of 35% of the running aggregates and plain
    chains (half of them SQL's, half the DSL's: SQL stages are rare); half
    of them with late candidates (not behind an explode: candidates are
    known by id). Not in ANSI mode (its stages may fail the job)."""
    st = case.stage
    sql = st.kind == "sql" and st.form in ("select", "group")
    dsl = st.kind in ("running", "none")
    if not (sql or dsl) or case.execution.ansi:
        return
    if rng.random() >= (0.5 if sql else 0.35):
        return
    if dsl and rng.random() < 0.5:
        sql = True
        for op in case.ops:
            op.schema = True  # a view's schema is known while the graph is built
    case.stage = _stage(rng, sql)
    case.read_state = False
    case.sinks = [s for s in case.sinks if s not in ("upsert", "kafka")] or ["parquet"]
    if any(op.kind == "explode" for op in case.ops) or rng.random() >= 0.5:
        return
    for source in case.sources:
        if source.kind != "sequence":
            source.late_rows, source.late_keys = rng.randint(1, 5), False
