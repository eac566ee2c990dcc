"""SQL in the generator: a ``sql`` stage registers the main stream as the
temporary view ``t`` and runs ``env.sql`` over it; the reference is DuckDB
running the same query over the batch of the main stream's rows (no eddyline
code). The windowing table functions, which DuckDB does not have, become a
``GROUP BY`` on the window start computed from ``ts`` (the same window
assignment as the DSL's windows: docs/API.md "SQL").

The select expressions are those whose meaning Spark and DuckDB share on the
generated rows (non-negative integers, no nulls reaching ``concat``), so one
text serves both: eddyline promises Spark's semantics, DuckDB computes them.
"""

from __future__ import annotations

import random
from typing import Any

from . import floordiv, fnaggs, overs, sqlmore, wtime

# name -> (draw params, SQL text from params)
SELECT: dict[str, tuple[Any, Any]] = {
    "arith": (lambda r: [r.randint(2, 5)], lambda a: f"v * {a} + k - id % 7"),
    "case": (
        lambda r: [r.randint(2, 12)],
        lambda c: f"CASE WHEN v > {c} THEN 'hi' WHEN k = 0 THEN 'zero' ELSE 'lo' END",
    ),
    "upper_concat": (lambda r: [], lambda: "upper(concat('ab', CAST(v AS STRING)))"),
    "pipe": (lambda r: [], lambda: "'x' || CAST(k AS STRING) || '-' || CAST(v AS STRING)"),
    "length": (lambda r: [], lambda: "length(CAST(id AS STRING))"),
    "between": (
        lambda r: sorted(r.sample(range(1, 20), 2)),
        lambda lo, hi: f"v BETWEEN {lo} AND {hi}",
    ),
    "in": (lambda r: sorted(r.sample(range(10), 2)), lambda a, b: f"k IN ({a}, {b})"),
    "coalesce": (
        lambda r: [r.randint(2, 4)],
        lambda m: f"coalesce(CASE WHEN v % {m} = 0 THEN NULL ELSE v END, -1)",
    ),
    "md5": (lambda r: [], lambda: "md5(CAST(k AS STRING))"),
    "abs": (lambda r: [r.randint(3, 12)], lambda c: f"abs(v - {c})"),
    "greatest": (lambda r: [r.randint(1, 9)], lambda c: f"greatest(v, k, {c})"),
    "is_null": (
        lambda r: [r.randint(2, 4)],
        lambda m: f"(CASE WHEN v % {m} = 0 THEN NULL ELSE k END) IS NULL",
    ),
}

WHERE: dict[str, tuple[Any, Any]] = {
    "mod": (lambda r: [r.randint(2, 4), 0], lambda a, b: f"v % {a} <> {b}"),
    "between": (
        lambda r: sorted(r.sample(range(1, 25), 2)),
        lambda lo, hi: f"v BETWEEN {lo} AND {hi}",
    ),
    "in": (lambda r: sorted(r.sample(range(10), 3)), lambda a, b, c: f"k NOT IN ({a}, {b}, {c})"),
    "like": (lambda r: [r.randint(1, 9)], lambda d: f"CAST(v AS STRING) LIKE '%{d}%' OR k > 1"),
}

COLUMN = {"sum": "v", "count": "count", "min": "v", "max": "v"}
CALL = {"sum": "sum(v)", "count": "count(*)", "min": "min(v)", "max": "max(v)"}


def draw(rng: random.Random) -> list[list[Any]]:
    """A select stage's expressions, and sometimes its WHERE as ``["where", ...]`` (first)."""
    names = rng.sample(sorted(SELECT), rng.randint(2, 5))
    exprs: list[list[Any]] = [[n, *SELECT[n][0](rng)] for n in names]
    if rng.random() < 0.7:
        name = rng.choice(sorted(WHERE))
        exprs.insert(0, ["where", name, *WHERE[name][0](rng)])
    return exprs


def _where(exprs: list[list[Any]]) -> str:
    where = next((e for e in exprs if e[0] == "where"), None)
    return "" if where is None else f" WHERE {WHERE[where[1]][1](*where[2:])}"


def _seconds(ms: int) -> str:
    return f"INTERVAL '{ms // 1000}' SECOND"


HAVING_OPS = {"sum": ">", "count": ">", "max": ">", "min": "<"}
"""A running ``HAVING`` compares the way its aggregate moves (``v`` stays
positive: sums, counts and maxima only grow, minima only fall), so a key that
passes stays passing and its last update is its final value."""


def _having(stage: Any) -> str:
    having = next((e for e in stage.exprs if e[0] == "having"), None)
    if having is None:
        return ""
    return f" HAVING {CALL[stage.agg]} {having[1]} {having[2]}"


def _from(stage: Any) -> tuple[str, str]:
    """A ``WITH`` prefix and the table the query reads: ``t``, or a CTE or a
    subquery over it (``["src", "with" | "sub", a]``: ``v + a``)."""
    src = next((e for e in stage.exprs if e[0] == "src"), None)
    if src is None:
        return "", "t"
    inner = f"SELECT id, k, ts, v + {src[2]} AS v FROM t"
    if src[1] == "with":
        return f"WITH w AS ({inner}) ", "w"
    return "", f"({inner}) AS sub"


def _select_item(expr: list[Any]) -> str:
    if expr[0] == floordiv.NAME:  # drawn last (floordiv.py)
        return floordiv.sql_item(expr)
    return str(SELECT[expr[0]][1](*expr[1:]))


def _select_list(stage: Any) -> list[str]:
    items = (e for e in stage.exprs if e[0] in SELECT or e[0] == floordiv.NAME)
    return [f"{_select_item(e)} AS c{i}" for i, e in enumerate(items)]


def _tvf(form: str, table: str, stage: Any) -> str:
    if form == "tumble":
        return f"TUMBLE(TABLE {table}, DESCRIPTOR(ts), {_seconds(stage.size_ms)})"
    if form == "session":
        return f"SESSION(TABLE {table}, DESCRIPTOR(ts), {_seconds(stage.gap_ms)})"
    return (
        f"HOP(TABLE {table}, DESCRIPTOR(ts), {_seconds(stage.slide_ms)}, {_seconds(stage.size_ms)})"
    )


JOIN_COLUMNS = "id, k, ts, v, id_right, k_right, ts_right, v_right"


def _join_select(left: str, right: str) -> str:
    return (
        f"SELECT {left}.id AS id, {left}.k AS k, {left}.ts AS ts, {left}.v AS v, "
        f"{right}.id AS id_right, {right}.k AS k_right, {right}.ts AS ts_right, "
        f"{right}.v AS v_right"
    )


HOW = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "outer": "FULL OUTER JOIN"}


def _join(stage: Any, duck: bool) -> str:
    """A join of ``t`` with ``u`` (``form`` ijoin, tjoin, wjoin, ujoin)."""
    if stage.form == "ijoin":
        return (
            f"{_join_select('t', 'u')} FROM t {HOW[stage.how]} u ON t.k = u.k AND "
            f"u.ts BETWEEN t.ts - {-stage.lower_ms} AND t.ts + {stage.upper_ms}"
        )
    if stage.form == "tjoin":
        if duck:  # DuckDB's as-of join: the newest version at or before t.ts
            asof = "ASOF LEFT JOIN" if stage.how == "left" else "ASOF JOIN"
            return f"{_join_select('t', 'r')} FROM t {asof} u AS r ON t.k = r.k AND t.ts >= r.ts"
        return (
            f"{_join_select('t', 'r')} FROM t {HOW[stage.how]} u "
            "FOR SYSTEM_TIME AS OF t.ts AS r ON t.k = r.k"
        )
    if stage.form == "wjoin":
        kind = "hop" if stage.slide_ms != stage.size_ms else "tumble"
        left, right = (
            (_windowed("t", stage), _windowed("u", stage))
            if duck
            else (f"TABLE({_tvf(kind, 't', stage)})", f"TABLE({_tvf(kind, 'u', stage)})")
        )
        return (
            "SELECT L.id AS id, L.k AS k, L.window_start AS window_start, "
            "L.window_end AS window_end, L.v AS v, R.id AS id_right, R.v AS v_right "
            f"FROM {left} L JOIN {right} R ON L.k = R.k AND "
            "L.window_start = R.window_start AND L.window_end = R.window_end"
        )
    if stage.form in WINDOW_RESULT_JOINS:
        return _window_results_join(stage, duck)
    query = f"{_join_select('t', 'u')} FROM t JOIN u ON t.k = u.k"
    return query


def _grouped(table: str, stage: Any, agg: str, column: str, duck: bool) -> str:
    """A windowed ``GROUP BY k`` of ``table`` (``TUMBLE`` or ``HOP``: ``slide_ms``
    below ``size_ms``) with ``agg`` as ``column``; for DuckDB over ``_windowed``."""
    kind = "hop" if stage.slide_ms != stage.size_ms else "tumble"
    source = _windowed(table, stage) if duck else f"TABLE({_tvf(kind, table, stage)})"
    return (
        f"SELECT k, window_start, window_end, {CALL[agg]} AS {column} FROM {source} "
        "GROUP BY k, window_start, window_end"
    )


def _window_results_join(stage: Any, duck: bool) -> str:
    """Joins of windowed ``GROUP BY`` results (docs/API.md "SQL", event time
    after a windowed ``GROUP BY``). ``wrjoin``, Nexmark q8's shape: the
    aggregates of ``t`` and ``u`` over the same windows joined on the key and
    both window bounds (``how``; ``["ragg", agg]`` is ``u``'s aggregate).
    ``wrijoin``, q7's shape: the rows of ``t`` whose ``v`` is the ``agg`` (max
    or min) of their tumbling window (per key with ``["keyed"]``), the window's
    result timed by its ``window_end``, the time bound on ``window_end``
    (``["bound", "end"]``) or on both bounds (``["bound", "start"]``)."""
    if stage.spelling == "spark" and not duck:
        return sqlmore.spark_results_join(stage, CALL, HOW)
    if stage.form == "wrjoin":
        # count where shrinking dropped the entry (the Spark spelling's default too)
        ragg = next((e[1] for e in stage.exprs if e[0] == "ragg"), "count")
        left = _grouped("t", stage, stage.agg, "v", duck)
        right = _grouped("u", stage, ragg, "w", duck)
        return (
            "SELECT L.k AS k, L.window_start AS window_start, L.window_end AS window_end, "
            "L.v AS v, R.k AS k_right, R.window_start AS ws_right, R.w AS w "
            f"FROM ({left}) AS L {HOW[stage.how]} ({right}) AS R ON L.k = R.k AND "
            "L.window_start = R.window_start AND L.window_end = R.window_end"
        )
    source = _windowed("t", stage) if duck else f"TABLE({_tvf('tumble', 't', stage)})"

    def tops(key: str) -> str:
        return (
            f"SELECT {key}{CALL[stage.agg]} AS top, window_start AS ws, window_end AS we "
            f"FROM {source} GROUP BY {key}window_start, window_end"
        )

    return sqlmore.q7_join(stage, tops, "m.ws", "m.we")


def query(stage: Any) -> str:
    """The query eddyline runs (``stage``: a ``case.Stage`` of kind sql)."""
    where = _where(stage.exprs)
    with_, table = _from(stage)
    if stage.form == "over":
        return overs.query(stage)
    if stage.form in JOINS:
        return _join(stage, duck=False)
    if stage.form == "closing":
        return sqlmore.closing_query(stage, duck=False)
    if stage.form in ("select", "union"):
        cols = ", ".join(_select_list(stage))
        first = f"{with_}SELECT id, {cols} FROM {table}{where}"
        if stage.form == "select":
            return first
        return f"{first} UNION ALL SELECT id + {UNION_ID} AS id, {cols} FROM t WHERE k % 2 = 0"
    agg = _aggregates(stage)
    having = _having(stage)
    if stage.form == "group":
        group = next((f"k % {e[1]}" for e in stage.exprs if e[0] == "gexpr"), "k")
        key = "k" if group == "k" else f"{group} AS k"
        return f"{with_}SELECT {key}, {agg} FROM {table}{where} GROUP BY {group}{having}"
    if stage.spelling == "spark" and any(e[0] == "regroup" for e in stage.exprs):
        return sqlmore.spark_regroup(stage, where, agg, having, COLUMN[stage.agg])
    if stage.spelling == "spark":
        column, call = _spark_window(stage)
        return (
            f"SELECT k, {column}.start AS window_start, {column}.end AS window_end"
            f"{wtime.sql_column(stage)}, {agg} "
            f"FROM t{where} GROUP BY {call}, k{having}"
        )
    return _regroup(
        stage,
        f"SELECT k, window_start, window_end, {agg} FROM TABLE({_tvf(stage.form, 't', stage)})"
        f"{where} GROUP BY k, window_start, window_end{having}",
    )


def _regroup(stage: Any, inner: str) -> str:
    """``["regroup", agg]``: the window query's results grouped again by their
    ``window_end`` (Nexmark q5's shape: a windowed aggregate's results are
    timed by their window's end downstream, docs/API.md "SQL")."""
    regroup = next((e for e in stage.exprs if e[0] == "regroup"), None)
    if regroup is None:
        return inner
    column = COLUMN[stage.agg]
    chained = wtime.chained_ms(stage)
    if chained:  # Spark's window(window_time(window), ...): by end - 1 (wtime.py)
        start = f"(window_end - 1) - (window_end - 1) % {chained}"
        return (
            f"SELECT {start} AS window_start, {start} + {chained} AS window_end, "
            f"{regroup[1]}({column}) AS r, count(*) AS n FROM ({inner}) AS w GROUP BY ALL"
        )
    if stage.form == "session":  # sessions of two keys may share an end, not a start
        return (
            f"SELECT window_start, window_end, {regroup[1]}({column}) AS r, count(*) AS n "
            f"FROM ({inner}) AS w GROUP BY window_start, window_end"
        )
    return (
        f"SELECT window_end, {regroup[1]}({column}) AS r, count(*) AS n "
        f"FROM ({inner}) AS w GROUP BY window_end"
    )


def _aggregates(stage: Any) -> str:
    """The stage's aggregate, then the others of ``["aggs", ...]`` as ``a_<name>``."""
    extra = next((e[1:] for e in stage.exprs if e[0] == "aggs"), [])
    return ", ".join(
        [
            f"{CALL[stage.agg]} AS {COLUMN[stage.agg]}",
            *(f"{CALL[a]} AS a_{a}" for a in extra),
            *fnaggs.sql_items(stage),  # of functions' outputs (fnaggs.py)
        ]
    )


def _spark_window(stage: Any) -> tuple[str, str]:
    """Spark's window grouping: the struct column's name and the grouping call."""
    if stage.form == "session":
        return "session_window", f"session_window(ts, '{stage.gap_ms // 1000} seconds')"
    size = f"'{stage.size_ms // 1000} seconds'"
    if stage.form == "hop":
        return "window", f"window(ts, {size}, '{stage.slide_ms // 1000} seconds')"
    return "window", f"window(ts, {size})"


def widen(rng: random.Random, case: Any) -> None:
    """Draws added after every older one (earlier seeds keep their cases):
    several aggregates in one window, Spark's ``GROUP BY window(...)`` /
    ``session_window(...)`` (with a ``WHERE`` before the sessions), a
    window query's results grouped again by window end, and a running
    ``GROUP BY`` of an expression of ``k``."""
    st = case.stage
    if st.kind != "sql":
        return
    windowed = st.form in ("tumble", "hop", "session")
    if windowed and rng.random() < 0.5:
        st.exprs.append(["aggs", *rng.sample([a for a in CALL if a != st.agg], rng.randint(1, 3))])
    if windowed and rng.random() < 0.4:
        st.spelling = "spark"
        if st.form == "session" and rng.random() < 0.5:
            name = rng.choice(sorted(WHERE))
            st.exprs.insert(0, ["where", name, *WHERE[name][0](rng)])
    if st.form in ("tumble", "hop") and st.spelling != "spark" and rng.random() < 0.3:
        st.exprs.append(["regroup", rng.choice(["sum", "max", "min"])])
    if st.form == "group" and rng.random() < 0.6:
        st.exprs.append(["gexpr", rng.randint(2, 4)])


UNION_ID = 1_000_000_000_000
WINDOW_RESULT_JOINS = ("wrjoin", "wrijoin")
JOINS = ("ijoin", "tjoin", "wjoin", "ujoin", *WINDOW_RESULT_JOINS)


def _windowed(table: str, stage: Any) -> str:
    """Every (row, window) of ``table`` for DuckDB, which has no windowing
    table function: starts on multiples of the slide, ``ts`` below the end."""
    size = stage.size_ms
    slide = stage.slide_ms if stage.form in ("hop", "wjoin", "wrjoin") else size
    return (
        f"(SELECT *, window_start + {size} AS window_end FROM ("
        f"SELECT *, ts - ts % {slide} - i * {slide} AS window_start "
        f"FROM {table}, range(0, {size // slide}) AS r(i)) WHERE ts < window_start + {size})"
    )


def _sessions(table: str, gap: int) -> str:
    """Sessions for DuckDB: per key in time order (ties by id), a row at
    least ``gap`` after the previous one starts a new session (docs/API.md:
    rows exactly ``gap`` apart are two sessions)."""
    starts = (
        f"SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY k ORDER BY ts, id) < {gap} "
        f"THEN 0 ELSE 1 END AS new FROM {table}"
    )
    numbered = (
        "SELECT *, sum(new) OVER (PARTITION BY k ORDER BY ts, id "
        f"ROWS UNBOUNDED PRECEDING) AS sid FROM ({starts})"
    )
    return (
        f"(SELECT *, min(ts) OVER (PARTITION BY k, sid) AS window_start, "
        f"max(ts) OVER (PARTITION BY k, sid) + {gap} AS window_end FROM ({numbered}))"
    )


def reference_query(stage: Any) -> str:
    """The same query for DuckDB over the tables ``t`` (and ``u``): a windowing
    table function becomes every window of a row (``_windowed``) or its
    session (``_sessions``), and a temporal join an as-of join."""
    if stage.form in JOINS:
        return _join(stage, duck=True)
    if stage.form == "closing":
        return sqlmore.closing_query(stage, duck=True)
    if stage.form in ("select", "group", "union"):
        return query(stage)
    where = _where(stage.exprs)
    agg = _aggregates(stage)
    if stage.form == "session":  # a WHERE (Spark's spelling) comes before the sessions
        table, where = _sessions(f"(SELECT * FROM t{where})", stage.gap_ms), ""
    else:
        table = _windowed("t", stage)
    return _regroup(
        stage,
        f"SELECT k, window_start, window_end{wtime.duck_column(stage)}, {agg} FROM {table}{where} "
        f"GROUP BY k, window_start, window_end{_having(stage)}",
    )


def ttl_pairs(stage: Any) -> tuple[str, str]:
    """An equi-join with ``state_ttl``: the pairs it surely emits and those
    it may emit. A row expires once the watermark reaches its time + ttl,
    and a row arriving is above the watermark (no row is late, data.py): so
    a pair at most ttl apart always meets, one further apart meets only if
    the older row was still kept, which depends on the other splits."""
    base = _join(stage, duck=True)
    return (
        f"{base} WHERE abs(t.ts - u.ts) <= {stage.ttl_ms}",
        f"{base} WHERE abs(t.ts - u.ts) > {stage.ttl_ms}",
    )
