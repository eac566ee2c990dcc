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


def query(stage: Any) -> str:
    """The query eddyline runs (``stage``: a ``case.Stage`` of kind sql)."""
    where = _where(stage.exprs)
    if stage.form == "select":
        cols = [
            f"{SELECT[e[0]][1](*e[1:])} AS c{i}"
            for i, e in enumerate(e for e in stage.exprs if e[0] != "where")
        ]
        return f"SELECT id, {', '.join(cols)} FROM t{where}"
    agg = f"{CALL[stage.agg]} AS {COLUMN[stage.agg]}"
    if stage.form == "group":
        return f"SELECT k, {agg} FROM t{where} GROUP BY k"
    if stage.form == "tumble":
        table = f"TUMBLE(TABLE t, DESCRIPTOR(ts), {_seconds(stage.size_ms)})"
    else:
        table = (
            f"HOP(TABLE t, DESCRIPTOR(ts), {_seconds(stage.slide_ms)}, {_seconds(stage.size_ms)})"
        )
    return (
        f"SELECT k, window_start, window_end, {agg} FROM TABLE({table}){where} "
        "GROUP BY k, window_start, window_end"
    )


def reference_query(stage: Any) -> str:
    """The same query for DuckDB over the table ``t``: a windowing table
    function becomes every window of a row (``ts`` in ``[start, start +
    size)``, starts on multiples of the slide) and a ``GROUP BY`` on it."""
    if stage.form in ("select", "group"):
        return query(stage)
    where = _where(stage.exprs)
    size = stage.size_ms
    slide = stage.slide_ms if stage.form == "hop" else size
    agg = f"{CALL[stage.agg]} AS {COLUMN[stage.agg]}"
    return (
        f"SELECT k, window_start, window_start + {size} AS window_end, {agg} FROM ("
        f"SELECT *, ts - ts % {slide} - i * {slide} AS window_start "
        f"FROM t, range(0, {size // slide}) AS r(i){where}) "
        f"WHERE ts < window_start + {size} "
        "GROUP BY k, window_start, window_end"
    )
