"""More SQL in the generator, drawn after every older draw (generate.py):
Nexmark q4's closing groups and Spark's spelling of window results downstream.

Closing groups (``form`` ``closing``): the view ``u`` (the auctions) has a
column ``expires`` per row, ``ts + v % m * step`` (``["expires", where, m,
step]``: made by ``with_columns`` before the view, ``view``, or in a subquery
of the query, ``sub``), and is joined with ``t`` (the bids) on the key with
``B.ts BETWEEN A.ts AND A.expires`` (or its two comparisons) and a constant
bound ``B.ts <= A.ts + c`` (``["bound", c, "ms" | "interval"]``: the join's
state needs one, docs/API.md "SQL"). Its ``GROUP BY A.id, A.k, A.expires``
closes each auction's group once the watermark passes its ``expires``: one
final row per auction with a bid in its time, ``agg`` of the bids' ``v`` as
``final`` and their count. No input row is late (data.py), so every joined
row comes before the watermark passes its ``expires`` (the later of its two
rows was above the watermark when it came): the rows are exactly DuckDB's
batch ``GROUP BY``. With ``["outer", m]`` q4's outer ``GROUP BY`` runs over
those rows: a running average and count ``n`` per ``k`` (``k % m``), an upsert
stream checked as a running ``agg`` (its row with the largest ``n`` per key,
no ``n`` twice: ``check.counted``).

Spark's spelling of window results (``spelling`` ``spark`` on the forms that
had only Flink's): ``GROUP BY window(ts, ...)`` results grouped again ``GROUP
BY window`` or ``GROUP BY window.end`` (``["by", ...]``), ``session_window``
results grouped again by ``session_window.start, session_window.end`` (a
session form with ``["regroup", agg]``), q8's join of two such results ``ON
L.k = R.k AND L.window = R.window`` or ``L.window.end = R.window.end``
(``["on", ...]``), and q7's rows interval-joined with their window's max or
min bounded by ``m.window.start``/``m.window.end``. Their columns are those
of the Flink spelling, so the reference is the same DuckDB text
(sqlgen.reference_query).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

CLOSING_COLUMNS = "A.id AS id, A.k AS k, A.expires AS expires"


def _expr(stage: Any, name: str) -> list[Any] | None:
    return next((e for e in stage.exprs if e[0] == name), None)


def expires_of(stage: Any) -> tuple[str, int, int]:
    """Where ``expires`` is made (``view`` or ``sub``), and its ``m``, ``step``
    (a default where shrinking dropped the entry: every entry may go)."""
    spec = _expr(stage, "expires") or ["expires", "view", 2, 1_000]
    return spec[1], spec[2], spec[3]


def expires_sql(stage: Any) -> str:
    _, m, step = expires_of(stage)
    return f"ts + v % {m} * {step}"


def _closing(stage: Any, duck: bool) -> str:
    where, _, _ = expires_of(stage)
    c, spelling = (_expr(stage, "bound") or ["bound", 5_000, "ms"])[1:]
    limit = f"INTERVAL '{c // 1000}' SECOND" if spelling == "interval" and not duck else str(c)
    auctions = "u AS A"
    if where == "sub":
        auctions = f"(SELECT id, k, ts, {expires_sql(stage)} AS expires FROM u) AS A"
    between = _expr(stage, "cond") is None or _expr(stage, "cond") == ["cond", "between"]
    span = "B.ts BETWEEN A.ts AND A.expires" if between else "B.ts >= A.ts AND B.ts <= A.expires"
    call = {"sum": "sum(B.v)", "count": "count(B.v)", "min": "min(B.v)", "max": "max(B.v)"}
    return (
        f"SELECT {CLOSING_COLUMNS}, {call[stage.agg]} AS final, count(*) AS bids "
        f"FROM {auctions} JOIN t AS B ON A.k = B.k AND {span} AND B.ts <= A.ts + {limit} "
        "GROUP BY A.id, A.k, A.expires"
    )


def closing_query(stage: Any, duck: bool) -> str:
    """The closing ``GROUP BY`` (and q4's outer one over it, ``["outer", m]``);
    for DuckDB (``duck``) the constant bound in milliseconds."""
    inner = _closing(stage, duck)
    outer = _expr(stage, "outer")
    if outer is None:
        return inner
    key = "Q.k" if not outer[1] else f"Q.k % {outer[1]}"
    return (
        f"SELECT {key} AS k, avg(Q.final) AS avg, count(*) AS n, sum(Q.bids) AS bids "
        f"FROM ({inner}) AS Q GROUP BY {key}"
    )


def counted(stage: Any) -> bool:
    """q4's outer ``GROUP BY``: a running aggregate whose count ``n`` orders
    its updates per key (checked as a running ``agg``: check.py)."""
    return stage.kind == "sql" and stage.form == "closing" and _expr(stage, "outer") is not None


def right_view(stage: Any) -> str:
    """The stream registered as ``u`` (render.py): the right source, with
    ``expires`` added when the view has it."""
    if stage.form != "closing" or expires_of(stage)[0] != "view":
        return stage.right
    _, m, step = expires_of(stage)
    return (
        f'{stage.right}.with_columns(expires=ed.col("ts") + ed.col("v") % {m} * {step})'
        '.name("u_expires").uid("u_expires")'
    )


def right_frame(stage: Any, frame: Any) -> Any:
    """The right source's rows as DuckDB's ``u`` (reference.py)."""
    if stage.form != "closing" or expires_of(stage)[0] != "view":
        return frame
    _, m, step = expires_of(stage)
    return frame.assign(expires=frame["ts"] + frame["v"] % m * step)


# -- Spark's spelling of window results ------------------------------------------


def spark_call(stage: Any, column: str = "ts") -> str:
    """``window(ts, size[, slide])`` of a tumble/hop (or a join's) windows."""
    size = f"'{stage.size_ms // 1000} seconds'"
    if stage.slide_ms and stage.slide_ms != stage.size_ms:
        return f"window({column}, {size}, '{stage.slide_ms // 1000} seconds')"
    return f"window({column}, {size})"


def spark_regroup(stage: Any, where: str, agg: str, having: str, column: str) -> str:
    """A Spark-spelled window query's results grouped again (``["regroup",
    r]``): tumble/hop by ``window`` or ``window.end``, session by both bounds."""
    regroup = _expr(stage, "regroup") or ["regroup", "sum"]
    r = f"{regroup[1]}({column}) AS r, count(*) AS n"
    if stage.form == "session":
        call = f"session_window(ts, '{stage.gap_ms // 1000} seconds')"
        inner = f"SELECT k, session_window, {agg} FROM t{where} GROUP BY k, {call}{having}"
        return (
            "SELECT session_window.start AS window_start, session_window.end AS window_end, "
            f"{r} FROM ({inner}) AS w GROUP BY session_window.start, session_window.end"
        )
    by = (_expr(stage, "by") or ["by", "window"])[1]
    inner = f"SELECT k, window, {agg} FROM t{where} GROUP BY {spark_call(stage)}, k{having}"
    chained = _expr(stage, "wtime")
    if stage.wtime and chained:  # windowed again on window_time, as Spark's docs (wtime.py)
        return (
            f"SELECT window.start AS window_start, window.end AS window_end, {r} "
            f"FROM ({inner}) AS w GROUP BY window(window_time(window), "
            f"'{chained[1] // 1000} seconds')"
        )
    group = "window.end" if by == "end" else "window"
    return f"SELECT window.end AS window_end, {r} FROM ({inner}) AS w GROUP BY {group}"


def spark_results_join(stage: Any, call: dict[str, str], how: dict[str, str]) -> str:
    """q8 (``wrjoin``) and q7 (``wrijoin``) in Spark's spelling, with the
    columns of sqlgen's Flink spelling. The right side's ``w`` comes before
    ``R.window.start``: a bare column at a position past the join's width
    panics the planner (docs/CHAOS.md, the open defect)."""
    if stage.form == "wrjoin":
        ragg = _expr(stage, "ragg") or ["ragg", "count"]
        on = (_expr(stage, "on") or ["on", "window"])[1]
        left = f"SELECT k, window, {call[stage.agg]} AS v FROM t GROUP BY k, {spark_call(stage)}"
        right = f"SELECT k, window, {call[ragg[1]]} AS w FROM u GROUP BY {spark_call(stage)}, k"
        cond = "L.window = R.window" if on == "window" else "L.window.end = R.window.end"
        return (
            "SELECT L.k AS k, L.window.start AS window_start, L.window.end AS window_end, "
            "L.v AS v, R.k AS k_right, R.w AS w, R.window.start AS ws_right "
            f"FROM ({left}) AS L {how[stage.how]} ({right}) AS R ON L.k = R.k AND {cond}"
        )

    def tops(key: str) -> str:
        return (
            f"SELECT {key}window, {call[stage.agg]} AS top FROM t "
            f"GROUP BY {key}window(ts, '{stage.size_ms // 1000} seconds')"
        )

    return q7_join(stage, tops, "m.window.start", "m.window.end")


def q7_join(stage: Any, tops: Callable[[str], str], start: str, end: str) -> str:
    """q7 (``wrijoin``): the rows of ``t`` joined with the top of their tumbling
    window, ``tops(key)`` (``key``: ``"k, "`` per key with ``["keyed"]``, else ``""``),
    whose window bounds ``m`` names ``start`` and ``end``; bounded by the window's
    end alone (``["bound", "end"]``) or by both bounds (``["bound", "start"]``)."""
    keyed = _expr(stage, "keyed") is not None
    bound = (_expr(stage, "bound") or ["bound", "end"])[1]
    on = ("e.k = m.k AND " if keyed else "") + "e.v = m.top"
    if bound == "end":
        where = f" WHERE e.ts BETWEEN {end} - {stage.size_ms} AND {end} - 1"
    else:
        on, where = on + f" AND e.ts >= {start} AND e.ts < {end}", ""
    return (
        f"SELECT e.id AS id, e.k AS k, e.ts AS ts, e.v AS v, {start} AS ws, {end} AS we "
        f"FROM t AS e JOIN ({tops('k, ' if keyed else '')}) AS m ON {on}{where}"
    )


def features(stage: Any) -> list[str]:
    """The mix names of these draws (case.features)."""
    if stage.kind != "sql":
        return []
    if stage.form == "closing":
        out = [f"sql:closing:{expires_of(stage)[0]}"]
        return out + (["sql:closing:outer"] if counted(stage) else [])
    if stage.spelling != "spark":
        return []
    if stage.form in ("wrjoin", "wrijoin"):
        on = (_expr(stage, "on") or ["on", "window"])[1]
        return [f"sql:window():{'q8:' + on if stage.form == 'wrjoin' else 'q7'}"]
    if _expr(stage, "regroup") is not None:
        by = "session" if stage.form == "session" else (_expr(stage, "by") or ["by", "window"])[1]
        return [f"sql:window():regroup:{by}"]
    return []


def _closing_stage(rng: random.Random, case: Any, right: str) -> Any:
    from .case import Stage

    st = Stage("sql", agg=rng.choice(["sum", "count", "min", "max"]), form="closing", right=right)
    step = rng.choice([100, 500, 1_000, 2_000])
    st.exprs = [["expires", rng.choice(["view", "sub"]), rng.randint(2, 5), step]]
    spelling = rng.choice(["ms", "interval"])
    c = rng.choice([1_000, 2_000, 5_000]) if spelling == "interval" else rng.randint(1, 40) * 100
    st.exprs.append(["bound", c, spelling])
    st.exprs.append(["cond", rng.choice(["between", "cmp"])])
    if rng.random() < 0.5:
        st.exprs.append(["outer", rng.choice([0, 0, 2, 3])])
    return st


def widen(rng: random.Random, case: Any, scale: float = 1.0) -> None:
    """The draws of this module, after every older one (generate.py)."""
    from .generate import _right_source

    st = case.stage
    if st.kind != "sql":
        return
    pick = rng.random()
    if st.form in ("wrjoin", "wrijoin") and pick < 0.4:
        st.spelling = "spark"
        if st.form == "wrjoin":
            st.exprs.append(["on", rng.choice(["window", "end"])])
        return
    if st.form in ("tumble", "hop") and pick < 0.4:
        spark = st.spelling == "spark"
        regroup = _expr(st, "regroup") is not None
        if spark and not regroup:
            st.exprs.append(["regroup", rng.choice(["sum", "max", "min"])])
        if spark or regroup:
            st.spelling = "spark"
            st.exprs.append(["by", rng.choice(["window", "end"])])
        return
    if st.form == "session" and st.spelling == "spark" and pick < 0.4:
        st.exprs.append(["regroup", rng.choice(["sum", "max", "min"])])
        return
    if st.form not in ("select", "group", "tumble", "hop", "session") or not 0.4 <= pick < 0.65:
        return
    # q4's closing groups in the place of a select, group or window query
    right = st.right or _right_source(rng, case, scale)
    case.union = [n for n in case.union if n != right]
    case.stage = _closing_stage(rng, case, right)
    case.read_state = False
    sinks = [s for s in case.sinks if s not in ("upsert", "kafka")]
    if counted(case.stage) and rng.random() < 0.5:
        sinks.append("upsert")  # the running average per key, keyed by k
    case.sinks = sinks or ["parquet"]
