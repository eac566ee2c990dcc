"""The ``fagg`` stage (``F`` aggregates per key): the DSL's
``key_by("k")[.window(...)].agg(...)`` or Spark's spelling
``group_by([F.window(...) | F.session_window(...),] "k").agg(...)``, running or
in tumbling, sliding or session windows, with or without a late output; the
reference is pandas over the main stream's rows (no eddyline code).

Approximate aggregates are checked within their documented accuracy
(docs/API.md "Aggregates"): the reference gives an ``Approx`` interval and the
comparison (``check.py``) accepts any value inside it.

- ``approx_count_distinct`` is DataFusion's HyperLogLog with 2^14 registers
  (``HLL_P = 14``): a standard error of 1.04 / sqrt(2^14) = 0.81%. Its
  registers merge by maximum, so batching, restores and session merges do not
  change it. Allowed: 3 standard errors (2.5%), plus the expected register
  collisions of ``n`` values, ``n^2 / 2^15``, plus 1 for the rounding.
- ``approx_percentile`` is a t-digest of 100 centroids whose rank error is
  below 1% (the documented accuracy); its value is of the input's type and
  may lie between two input values. Allowed: any value between the exact
  order statistics ``ceil(1% n) + 1`` ranks either side of rank ``q (n - 1)``
  (the one rank more for the rank convention and the interpolation).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator
from typing import Any

import pandas as pd

from . import ansi, fnaggs, wtime
from .case import Case, Stage

APPROX = ["approx_count_distinct", "approx_percentile", "collect_set"]


@dataclasses.dataclass(frozen=True)
class Approx:
    """A reference cell for an approximate aggregate: any value in
    ``[lo, hi]`` matches (``check.py``)."""

    lo: float
    hi: float

    def fits(self, x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and self.lo <= x <= self.hi


def approx_distinct(values: pd.Series) -> Approx:
    n = int(values.nunique())
    slack = 1 + math.ceil(3 * 1.04 / 128 * n + n * n / 2**15)
    return Approx(max(min(n, 1), n - slack), n + slack)  # a non-empty sketch is never 0


def approx_percentile(values: pd.Series, q: float) -> Approx:
    ordered = sorted(int(x) for x in values)
    n = len(ordered)
    rank = q * (n - 1)
    ranks = 1 + math.ceil(0.01 * n)
    lo = ordered[max(0, math.floor(rank) - ranks)]
    hi = ordered[min(n - 1, math.ceil(rank) + ranks)]
    return Approx(lo, hi)


def _column(name: str) -> str:
    return "k" if name in ("first", "last") else "v"  # first/last: deterministic


def call(expr: list[Any]) -> str:
    """The DSL text of one aggregate of ``exprs`` (``[name, *params]``)."""
    name = expr[0]
    if fnaggs.is_fnagg(name):  # of a function's output (fnaggs.py)
        return fnaggs.call(expr)
    if name == "sum_big":  # ansi.py: a sum that may leave bigint's range
        return f'{ansi.sum_big_call(expr[1], expr[2])}.alias("a_{name}")'
    if name == "approx_percentile":
        return f'F.approx_percentile("v", {expr[1]}).alias("a_{name}")'
    return f'F.{name}("{_column(name)}").alias("a_{name}")'


def value(group: pd.DataFrame, expr: list[Any]) -> Any:
    """The reference value of one aggregate over a group's rows."""
    name, v = expr[0], group["v"]
    if fnaggs.is_fnagg(name):
        return fnaggs.value(group, expr)
    if name == "sum_big":
        return ansi.sum_big(group, expr[1], expr[2])
    if name == "approx_count_distinct":
        return approx_distinct(v)
    if name == "approx_percentile":
        return approx_percentile(v, expr[1])
    if name == "collect_set":
        return sorted(set(v.tolist()))
    return {
        "sum": lambda: v.sum(),
        "avg": lambda: v.mean(),
        "min": lambda: v.min(),
        "max": lambda: v.max(),
        "count_distinct": lambda: v.nunique(),
        "first": lambda: group["k"].iloc[0],
        "last": lambda: group["k"].iloc[-1],
        "collect_list": lambda: sorted(v.tolist()),
        "stddev": lambda: v.std(ddof=1),
        "variance": lambda: v.var(ddof=1),
        "stddev_pop": lambda: v.std(ddof=0),
        "var_pop": lambda: v.var(ddof=0),
    }[name]()


def window_column(stage: Stage) -> str:
    """Spark's name of the window struct column (``group_by`` spelling)."""
    return "session_window" if stage.form == "session" else "window"


def output_columns(stage: Stage) -> list[str]:
    """The columns a ``group_by`` spelling gives, in Spark's order: the
    grouping columns as given, then ``n`` and the aggregates."""
    keys = ["k"]
    if stage.form:
        keys = ["k", window_column(stage)]
        if stage.spelling == "group_by_window_first":
            keys.reverse()
    wt = ["wt"] if stage.wtime else []  # F.window_time after the aggregates (wtime.py)
    return [*keys, "n", *(f"a_{e[0]}" for e in stage.exprs), *wt]


def lines(case: Case) -> list[str]:
    """The job lines of an ``fagg`` stage (``out = ...``), and its late output's sink."""
    st = case.stage
    calls = ['F.count("*").alias("n")', *(call(e) for e in st.exprs)]
    late = ', late_output=ed.OutputTag("late")' if st.late else ""
    if st.spelling:  # Spark's spelling
        window = ""
        if st.form == "tumbling":
            window = f'F.window("ts", "{st.size_ms} milliseconds")'
        elif st.form == "sliding":
            window = f'F.window("ts", "{st.size_ms} milliseconds", "{st.slide_ms} milliseconds")'
        elif st.form == "session":
            window = f'F.session_window("ts", "{st.gap_ms} milliseconds")'
        keys = ['"k"', *([window] if window else [])]
        if st.spelling == "group_by_window_first":
            keys.reverse()
        keyed = f"main.group_by({', '.join(keys)})"
    else:
        keyed = 'main.key_by("k")'
        if st.form == "tumbling":
            keyed += f'.window(ed.Tumbling("{st.size_ms}ms"){late})'
        elif st.form == "sliding":
            keyed += f'.window(ed.Sliding("{st.size_ms}ms", "{st.slide_ms}ms"){late})'
        elif st.form == "session":
            keyed += f'.window(ed.Session("{st.gap_ms}ms"){late})'
    out = [
        f"    out = {keyed}.agg(",
        *(f"        {c}," for c in calls),
        '    ).name("fagg").uid("fagg")',
        *wtime.dsl_line(st),
    ]
    if st.late:
        out.append(
            '    out.side_output(ed.OutputTag("late")).sink_to(ed.ParquetSink(STORE + "/late"))'
            '.name("sink_late").uid("sink_late")'
        )
    return out


def unnest_window(df: pd.DataFrame) -> pd.DataFrame:
    """A ``group_by`` output's ``window`` / ``session_window`` struct as the
    columns ``window_start`` and ``window_end`` the reference has."""
    for name in ("window", "session_window"):
        if name in df.columns and not df.empty:
            cells = df[name].tolist()
            return df.drop(columns=[name]).assign(
                window_start=[None if c is None else c["start"] for c in cells],
                window_end=[None if c is None else c["end"] for c in cells],
            )
    return df


def widen(rng: random.Random, case: Case) -> None:
    """The draws added to an ``fagg`` stage after the first ones (so earlier
    seeds keep their cases): session windows, Spark's ``group_by`` spelling,
    the approximate aggregates and ``collect_set``, and a late output."""
    st = case.stage
    if st.kind != "fagg":
        return
    if rng.random() < 0.3:
        st.form, st.size_ms, st.slide_ms = "session", 0, 0
        st.gap_ms = rng.choice([200, 1_000, 5_000])
        # sessions are not an upsert stream: the upsert sink (keyed by k)
        # goes with a running aggregate only, as _function_stage decides
        case.sinks = [s for s in case.sinks if s != "upsert"] or ["parquet"]
    if rng.random() < 0.5:
        extra = rng.sample(APPROX, rng.randint(1, 2))
        st.exprs = [e for e in st.exprs if e[0] not in extra][: 6 - len(extra)]
        st.exprs += [
            [n, rng.choice([0.1, 0.5, 0.9, 0.99])] if n == "approx_percentile" else [n]
            for n in extra
        ]
    if rng.random() < 0.4:  # Spark's spelling, the window before or after the key
        st.spelling = rng.choice(["group_by", "group_by_window_first"])
    explode = any(op.kind == "explode" for op in case.ops)  # new ids: no candidates
    if (
        not st.spelling
        and st.form in ("tumbling", "session")
        and not explode
        and rng.random() < 0.4
    ):
        st.late = True
        if rng.random() < 0.6:
            for source in case.sources:
                if source.kind != "sequence":
                    source.late_rows = rng.randint(1, 5)
                    source.late_keys = st.form == "session"


def groups(
    case: Case, late_ids: set[int], main: pd.DataFrame
) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """An ``fagg`` stage's groups: per key (and window) its keys and its rows,
    of the rows not in the late output."""
    from .reference import _sessions, _windows

    st = case.stage
    df = main[~main["id"].isin(late_ids)]
    keys = ["k"]
    if st.form == "session":
        df = _sessions(df, st.gap_ms)
        keys = ["k", "window_start", "window_end"]
    elif st.form:
        slide = st.slide_ms if st.form == "sliding" else st.size_ms
        df = _windows(df, st.size_ms, slide)
        keys = ["k", "window_start", "window_end"]
    for key, group in df.groupby(keys, sort=False):
        yield dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)), group


def aggregates(case: Case, late_ids: set[int], main: pd.DataFrame) -> pd.DataFrame:
    """An ``fagg`` stage: per key (and window) the row count ``n`` and each
    aggregate (a sample deviation of one value is null, as Spark's), over the
    rows not in the late output."""
    st = case.stage
    keys = ["k", "window_start", "window_end"] if st.form else ["k"]
    rows = []
    for found, group in groups(case, late_ids, main):
        out = dict(found)
        out["n"] = len(group)
        for e in st.exprs:
            out[f"a_{e[0]}"] = value(group, e)
        if st.wtime:  # F.window_time: the window's end - 1 ms (wtime.py)
            out["wt"] = out["window_end"] - 1
        rows.append(out)
    columns = [*keys, "n", *(f"a_{e[0]}" for e in st.exprs), *(["wt"] if st.wtime else [])]
    return pd.DataFrame(rows, columns=columns, dtype=object)
