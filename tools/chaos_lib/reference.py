"""The expected output of a case, computed with pandas from its input rows alone.

Nothing here imports eddyline: the engine's code is never its own reference.
Event time follows docs/API.md: no input row is late by construction
(``data.py``), so every window fires once with all its rows at the end of the
input at the latest, and an interval join emits every matching pair.
"""

from __future__ import annotations

import pandas as pd

from .case import Case, Op
from .data import late_candidates, rows_of

COLUMNS = ["id", "k", "ts", "v"]


def _apply(df: pd.DataFrame, op: Op) -> pd.DataFrame:
    if op.kind in ("nfilter", "pfilter"):
        return df[df["v"] % op.a != op.b]
    if op.kind == "nwith":
        return df.assign(v=df["v"] * op.a + op.b)
    if op.kind in ("pmap", "pbatch"):
        return df.assign(v=df["v"] + op.a)
    if op.kind == "nselect":
        return df
    raise ValueError(f"no reference for operator kind {op.kind!r}")


def _frame(case: Case, name: str) -> pd.DataFrame:
    return pd.DataFrame(rows_of(case.source(name)), columns=COLUMNS).astype("int64")


def main_stream(case: Case) -> pd.DataFrame:
    """The rows reaching the terminal stage."""
    df = pd.concat([_frame(case, n) for n in [case.main, *case.union]], ignore_index=True)
    for op in case.ops:
        df = _apply(df, op)
    return df.reset_index(drop=True)


def _agg_name(agg: str) -> str:
    return "count" if agg == "count" else "v"


def _aggregate(groups: pd.core.groupby.DataFrameGroupBy, agg: str) -> pd.Series:
    if agg == "count":
        return groups.size()
    return getattr(groups["v"], agg)()


def running_final(case: Case) -> pd.DataFrame:
    """A running aggregate's final value per key (an upsert table's content)."""
    df = main_stream(case)
    col = _agg_name(case.stage.agg)
    out = _aggregate(df.groupby("k"), case.stage.agg).rename(col).reset_index()
    return out[["k", col]]


def _windows(df: pd.DataFrame, size: int, slide: int) -> pd.DataFrame:
    parts = []
    for back in range(0, size, slide):
        start = df["ts"] - df["ts"] % slide - back
        inside = df["ts"] < start + size
        parts.append(df[inside].assign(window_start=start[inside]))
    out = pd.concat(parts, ignore_index=True)
    return out.assign(window_end=out["window_start"] + size)


def _sessions(df: pd.DataFrame, gap: int) -> pd.DataFrame:
    df = df.sort_values(["k", "ts"], kind="stable")
    new = (df["k"] != df["k"].shift()) | (df["ts"] - df["ts"].shift() >= gap)
    df = df.assign(session=new.cumsum())
    bounds = df.groupby("session")["ts"].agg(["min", "max"])
    df = df.join(bounds, on="session")
    return df.assign(window_start=df["min"], window_end=df["max"] + gap)


def candidates(case: Case) -> set[int]:
    """Ids of the rows that may be late (``data.late_candidates``)."""
    return set().union(*(late_candidates(case.source(n)) for n in [case.main, *case.union]))


def expected(case: Case, late_ids: set[int] | None = None) -> dict[str, pd.DataFrame]:
    """Expected rows per output (``main``; ``late`` for a window's late
    output); for a running aggregate, ``main`` holds the final value per key.

    ``late_ids``: the ids the run's late output holds. Of them, the late
    candidates are the expected late output, and a tumbling window counts every
    other row: a late row's only window had fired, an on-time row's had not.
    """
    st = case.stage
    if st.kind == "none":
        return {"main": main_stream(case)}
    if st.kind == "running":
        return {"main": running_final(case)}
    if st.kind == "ujoin":
        pairs = main_stream(case).merge(_frame(case, st.right), on="k", suffixes=("", "_right"))
        return {"main": pairs}
    if st.kind == "wjoin":
        keys = ["k", "window_start", "window_end"]
        left = _windows(main_stream(case), st.size_ms, st.slide_ms)
        right = _windows(_frame(case, st.right), st.size_ms, st.slide_ms)
        return {"main": left.merge(right, on=keys, suffixes=("", "_right"))}
    if st.kind == "ijoin":
        left = main_stream(case)
        right = _frame(case, st.right)
        pairs = left.merge(right, on="k", suffixes=("", "_right"))
        keep = (pairs["ts"] + st.lower_ms <= pairs["ts_right"]) & (
            pairs["ts_right"] <= pairs["ts"] + st.upper_ms
        )
        return {"main": pairs[keep].reset_index(drop=True)}
    df = main_stream(case)
    late = df[df["id"].isin((late_ids or set()) & candidates(case))]
    df = df[~df["id"].isin(late["id"])]
    if st.kind == "session":
        assigned = _sessions(df, st.gap_ms)
    else:
        slide = st.slide_ms if st.kind == "sliding" else st.size_ms
        assigned = _windows(df, st.size_ms, slide)
    col = _agg_name(st.agg)
    groups = assigned.groupby(["k", "window_start", "window_end"])
    out = _aggregate(groups, st.agg).rename(col).reset_index()
    result = {"main": out[["k", "window_start", "window_end", col]]}
    if st.late:
        result["late"] = late
    return result
