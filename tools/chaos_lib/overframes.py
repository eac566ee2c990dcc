"""The newer frames of over windows in the generator (docs/API.md "Over
windows"), drawn on the over stages of ``overs.py`` after every older draw:

- ``["rows", None, spell]``: ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT
  ROW`` (``between``) or ``ROWS UNBOUNDED PRECEDING`` (``short``); the DSL's
  ``over_rows(..., preceding=None)``. Ties are ordered as for ``ROWS n``.
- ``["range", ms | None, spell]``: ``RANGE BETWEEN <ms> | INTERVAL 'x' SECOND
  | UNBOUNDED PRECEDING AND CURRENT ROW`` (``between``, ``interval``), ``RANGE
  <ms> | INTERVAL 'x' SECOND | UNBOUNDED PRECEDING`` (``short``,
  ``interval_short``), ``RANGE CURRENT ROW`` (``current``, ``ms`` 0) or the
  default frame of an ``OVER`` with ``ORDER BY`` (``default``, unbounded);
  the DSL's ``over_range(..., preceding="<ms>ms" | None)``. A RANGE frame is
  ordered by the event time alone (the engine refuses more), so the stage
  has no ``order`` entry; rows of one time are peers and get the same values.
- ``["chain", agg, "rows" | "range", n | ms | None]``: one more over window
  after the stage's own, with another frame (SQL: another ``OVER (...)`` in
  the same ``SELECT``, ordered by the event time alone; the DSL: a second
  ``key_by("k").over_rows`` or ``over_range``), adding ``c<i>_<agg>``.

The reference is DuckDB's window functions with the same frame, a RANGE of
milliseconds over the bigint ``ts`` (an interval is its milliseconds), over
the rows the engine did not drop as late. Late rows are modelled as in
``overs.py``: an on-time candidate is above the watermark, so no row of its key
at or after its time (its peers included) has been released, and it takes its
batch place in every frame; a chained window gets its rows before the
watermark that passes their time, so it never drops one.
"""

from __future__ import annotations

import random
from typing import Any

from .case import Case, Stage

RANGE_MS = [0, 1, 50, 500, 1_000, 2_000, 10_000]
CHAIN_ROWS: list[int | None] = [0, 1, 3, None]


def _entry(stage: Stage, name: str) -> list[Any] | None:
    return next((e for e in stage.exprs if e[0] == name), None)


def is_range(stage: Stage) -> bool:
    """Whether the stage's own frame is a RANGE frame."""
    return _entry(stage, "range") is not None


def _range_sql(ms: int | None, spell: str) -> str:
    if spell == "default":
        return ""
    if spell == "current":
        return "RANGE CURRENT ROW"
    if ms is None:
        bound = "UNBOUNDED"
    elif spell.startswith("interval"):
        bound = f"INTERVAL '{ms // 1000}' SECOND"
    else:
        bound = str(ms)
    if spell in ("short", "interval_short"):
        return f"RANGE {bound} PRECEDING"
    return f"RANGE BETWEEN {bound} PRECEDING AND CURRENT ROW"


def _range_duck(ms: int | None) -> str:
    bound = "UNBOUNDED" if ms is None else str(ms)
    return f"RANGE BETWEEN {bound} PRECEDING AND CURRENT ROW"


def frame(stage: Stage, duck: bool) -> str | None:
    """The stage's own frame when it is one of this module's (None: a ``ROWS
    n`` frame of ``overs.py``); DuckDB's spelling for ``duck``."""
    rows = _entry(stage, "rows")
    if rows is not None:
        if rows[2] == "short" and not duck:
            return "ROWS UNBOUNDED PRECEDING"
        return "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    ranged = _entry(stage, "range")
    if ranged is not None:
        return _range_duck(ranged[1]) if duck else _range_sql(ranged[1], ranged[2])
    return None


def chains(stage: Stage) -> list[list[Any]]:
    """The stage's chained over windows."""
    return [e for e in stage.exprs if e[0] == "chain"]


def chain_sql(stage: Stage, duck: bool) -> list[str]:
    """The select items of the chained windows."""
    from .overs import SQL_CALL

    out = []
    for i, (_, agg, kind, bound) in enumerate(chains(stage)):
        if kind == "range":
            spec = "ORDER BY ts " + (_range_duck(bound) if duck else _range_sql(bound, "between"))
        else:
            word = "UNBOUNDED" if bound is None else str(bound)
            order = "ts, id" if duck else "ts"
            spec = f"ORDER BY {order} ROWS BETWEEN {word} PRECEDING AND CURRENT ROW"
        out.append(f"{SQL_CALL[agg]} OVER (PARTITION BY k {spec}) AS c{i}_{agg}")
    return out


def _duration(ms: int | None) -> str:
    return "None" if ms is None else repr(f"{ms}ms")


def dsl_call(stage: Stage) -> tuple[str, str] | None:
    """The DSL's operator and frame argument when the frame is this module's."""
    rows = _entry(stage, "rows")
    if rows is not None:
        return "over_rows", "preceding=None"
    ranged = _entry(stage, "range")
    if ranged is not None:
        return "over_range", f"preceding={_duration(ranged[1])}"
    return None


def chain_dsl(stage: Stage) -> list[str]:
    """The DSL's chained over windows (lines after the stage's own)."""
    from .overs import DSL_CALL

    out = []
    for i, (_, agg, kind, bound) in enumerate(chains(stage)):
        call = f'{DSL_CALL[agg]}.alias("c{i}_{agg}")'
        if kind == "range":
            op, arg = "over_range", f"preceding={_duration(bound)}"
        else:
            op, arg = "over_rows", f"preceding={bound!r}"
        out.append(f'    out = out.key_by("k").{op}({call}, {arg}).name("over{i}").uid("over{i}")')
    return out


def features(stage: Stage) -> list[str]:
    """The mix names of the frames drawn here."""
    out = []
    if _entry(stage, "rows") is not None:
        out.append("over:rows_unbounded")
    ranged = _entry(stage, "range")
    if ranged is not None:
        out += ["over:range", f"over:range:{ranged[2]}"]
        if ranged[1] is None:
            out.append("over:range:unbounded")
    if chains(stage):
        out.append("over:chained")
    return out


def _range(rng: random.Random, sql: bool) -> list[Any]:
    ms: int | None = rng.choice([*RANGE_MS, None, None])
    if not sql:
        return ["range", ms, "between"]
    spells = ["between", "short"]
    if ms is None:
        spells.append("default")
    elif ms == 0:
        spells.append("current")
    elif ms % 1000 == 0:
        spells += ["interval", "interval_short"]
    return ["range", ms, rng.choice(spells)]


def widen(rng: random.Random, case: Case) -> None:
    """Six in ten over stages get a newer frame of their own (a third an
    unbounded ROWS frame, two thirds a RANGE frame), and three in ten one or
    two chained over windows of other frames."""
    from .overs import AGGS, is_over

    st = case.stage
    if not is_over(st):
        return
    sql = st.kind == "sql"
    if rng.random() < 0.6:
        if rng.random() < 1 / 3:
            st.exprs.append(["rows", None, rng.choice(["between", "short"])])
        else:
            # a RANGE frame is ordered by the event time alone
            st.exprs = [e for e in st.exprs if e[0] != "order"]
            st.exprs.append(_range(rng, sql))
    if rng.random() < 0.3:
        for _ in range(rng.randint(1, 2)):
            agg = rng.choice(AGGS)
            if rng.random() < 0.5:
                st.exprs.append(["chain", agg, "rows", rng.choice(CHAIN_ROWS)])
            else:
                st.exprs.append(["chain", agg, "range", rng.choice([*RANGE_MS, None])])
