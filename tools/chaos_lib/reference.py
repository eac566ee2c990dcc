"""The expected output of a case, computed with pandas from its input rows alone.

Nothing here imports eddyline: the engine's code is never its own reference.
Event time follows docs/API.md: no input row is late by construction
(``data.py``), so every window fires once with all its rows at the end of the
input at the latest, and an interval join emits every matching pair.
"""

from __future__ import annotations

import pandas as pd

from . import aggs, chained, fnlib, late_groupby, late_session, overs, sqlgen, sqlmore
from .case import Case, Op
from .data import late_candidates, rows_of
from .fnmore import Explode

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
    if op.kind == "explode":
        parts = [df.assign(id=df["id"] * 4 + j, v=df["v"] + j) for j in range(op.a)]
        return pd.concat(parts, ignore_index=True)
    if op.kind == "loop":
        # v + a until v >= b: ceil((b - v) / a) more rounds for a row below b
        rounds = ((op.b - df["v"] + op.a - 1) // op.a).clip(lower=0)
        return df.assign(v=df["v"] + op.a * rounds)
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


def _tumbling_sums(df: pd.DataFrame, size: int, column: str, count: bool) -> pd.DataFrame:
    df = df.assign(window_start=df["ts"] - df["ts"] % size)
    groups = df.groupby(["k", "window_start"])
    out = (groups.size() if count else groups["v"].sum()).rename(column).reset_index()
    return out


def process_windows(case: Case) -> pd.DataFrame:
    """The process function's timer output: per key and tumbling window the sum
    of ``v`` and the row count (coprocess: the left's sum, the right's count,
    0 for a side without rows), and which of the key's windows it is (timers
    of a key fire in time order)."""
    size = case.stage.size_ms
    left = _tumbling_sums(main_stream(case), size, "v", count=False)
    if case.stage.kind == "process":
        counts = _tumbling_sums(main_stream(case), size, "n", count=True)
    else:
        counts = _tumbling_sums(_frame(case, case.stage.right), size, "n", count=True)
    out = left.merge(counts, on=["k", "window_start"], how="outer").fillna(0)
    out = out.astype("int64").sort_values(["k", "window_start"])
    out["fired"] = out.groupby("k").cumcount() + 1
    return out.assign(window_end=out["window_start"] + size).reset_index(drop=True)


def _suffixed(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(columns={c: f"{c}_right" for c in ("id", "ts", "v")})


def temporal(case: Case) -> pd.DataFrame:
    """Each main row with the newest version of its key at or before its time."""
    left = main_stream(case).sort_values("ts", kind="stable")
    versions = _suffixed(_frame(case, case.stage.right)).sort_values("ts_right", kind="stable")
    out = pd.merge_asof(
        left, versions, left_on="ts", right_on="ts_right", by="k", direction="backward"
    )
    if case.stage.how == "inner":
        out = out.dropna(subset=["id_right"])
    return out.reset_index(drop=True)


def interval(case: Case) -> pd.DataFrame:
    """An interval join's pairs, and with ``how`` the unmatched rows of the
    outer side(s) with nulls for the other's columns."""
    st = case.stage
    left = main_stream(case)
    right = _suffixed(_frame(case, st.right))
    pairs = left.merge(right, on="k")
    keep = (pairs["ts"] + st.lower_ms <= pairs["ts_right"]) & (
        pairs["ts_right"] <= pairs["ts"] + st.upper_ms
    )
    parts = [pairs[keep]]
    if st.how in ("left", "outer"):
        parts.append(left[~left["id"].isin(pairs[keep]["id"])])
    if st.how in ("right", "outer"):
        parts.append(right[~right["id_right"].isin(pairs[keep]["id_right"])])
    return pd.concat(parts, ignore_index=True)


def session_join(case: Case) -> pd.DataFrame:
    """Session windows over both sides' rows of a key together, then every
    left-right pair of a session."""
    gap = case.stage.gap_ms
    left = main_stream(case).assign(side=0)
    right = _frame(case, case.stage.right).assign(side=1)
    both = _sessions(pd.concat([left, right], ignore_index=True), gap)
    keys = ["k", "window_start", "window_end"]
    cols = ["id", "ts", "v", *keys]
    a = both[both["side"] == 0][cols]
    b = _suffixed(both[both["side"] == 1][cols])
    return a.merge(b, on=keys)


def sliding_bounds(case: Case, late_ids: set[int]) -> pd.DataFrame:
    """Per key and sliding window: the fewest (``lo``) and most (``hi``) rows it
    may count when late candidates came. A candidate whose windows were all
    over is late (in the late output); one some of whose windows were over is
    counted in the others only, and those are the later ones (windows are over
    in the order of their ends), so it is always counted in its last window:
    ``lo`` counts the on-time rows and each such candidate in its last window,
    ``hi`` every row not in the late output in every window; ``lo_any`` and
    ``hi_any`` bound the count whatever was late."""
    st = case.stage
    df = main_stream(case)
    maybe = candidates(case) - late_ids
    df = df[~df["id"].isin(late_ids)]
    every = _windows(df, st.size_ms, st.slide_ms)
    keys = ["k", "window_start", "window_end"]
    hi = every.groupby(keys).size().rename("hi")
    sure = every[~every["id"].isin(maybe)]
    last = every[every["id"].isin(maybe)]
    last = last[last["window_start"] == last["ts"] - last["ts"] % st.slide_ms]
    lo = pd.concat([sure, last]).groupby(keys).size().rename("lo")
    # whatever an attempt found late (one that failed, for an at-least-once
    # sink: ``retried``): every row but the candidates, at most every row
    whole = _windows(main_stream(case), st.size_ms, st.slide_ms)
    hi_any = whole.groupby(keys).size().rename("hi_any")
    lo_any = whole[~whole["id"].isin(candidates(case))].groupby(keys).size().rename("lo_any")
    both = pd.concat([lo, hi, lo_any, hi_any], axis=1)
    return both.fillna(0).astype("int64").reset_index()


def retried(case: Case, late_ids: set[int]) -> pd.DataFrame:
    """Rows that an attempt which failed may have emitted for the windows
    holding late candidates (tumbling and session windows with a late output).

    Whether a candidate is late depends on how far the other splits' watermark
    got when it came, so an attempt that failed and was restored may have
    decided otherwise than the committed one: its window fired without the
    candidate (then late), or with one that the committed attempt found late.
    An exactly-once sink drops that attempt's output; an at-least-once one
    (KafkaSink, docs/API.md) keeps it. So: per group of candidates that share
    windows (a key and tumbling window, or a key for sessions), the window
    rows for every late/on-time choice of the group's candidates.

    The same holds for what a run that stopped early committed (a restore
    refused after a damaged checkpoint): a window may have fired without a
    candidate whose late output was never committed (``check.compare_partial``).
    ``fagg`` stages' tumbling and session windows are grouped the same way."""
    st = case.stage
    maybe = candidates(case)
    none = pd.DataFrame(columns=["k", "window_start", "window_end", _agg_name(st.agg)])
    kind = st.form if st.kind == "fagg" else st.kind
    late = st.late or late_groupby.dropped(case)  # late_groupby.py: dropped late rows
    if kind not in ("tumbling", "session") or not late or not maybe:
        return none
    df = main_stream(case)
    rows = df[df["id"].isin(maybe)]
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in rows.itertuples(index=False):
        at = (int(r.k),) if kind == "session" else (int(r.k), int(r.ts) // st.size_ms)
        groups.setdefault(at, []).append(int(r.id))
    parts = []
    for ids in groups.values():
        # every subset for a small group; past 6 candidates, each alone and all
        n = len(ids)
        picks = (
            [[ids[i] for i in range(n) if m >> i & 1] for m in range(1 << n)]
            if n <= 6
            else [[], ids, *([i] for i in ids)]
        )
        for late in picks:
            parts.append(expected(case, (late_ids - set(ids)) | set(late), retry=False)["main"])
    # the candidates' rows may all be filtered out before the window: no group
    # (an fagg stage's rows have the aggregates' columns, not ``none``'s)
    if not parts:
        return expected(case, late_ids, retry=False)["main"].iloc[:0]
    out = pd.concat(parts, ignore_index=True)
    # an fagg's collect_list/collect_set cells are lists, which pandas cannot hash
    hashable = out.map(lambda x: tuple(x) if isinstance(x, list) else x)
    return out[~hashable.duplicated()].reset_index(drop=True)


def candidates(case: Case) -> set[int]:
    """Ids of the rows that may be late (``data.late_candidates``)."""
    return set().union(*(late_candidates(case.source(n)) for n in [case.main, *case.union]))


def functions(case: Case) -> pd.DataFrame:
    """A ``fn`` stage: the base columns, the filter (null drops a row, as
    Spark's) and each expression, per row in plain Python (``fnlib``)."""
    where, exprs = fnlib.split(case.stage.exprs)
    rows = []
    for row in main_stream(case).to_dict("records"):
        full = fnlib.base({c: int(row[c]) for c in COLUMNS})
        if where is not None and fnlib.value(full, where) is not True:
            continue
        out = {"id": full["id"]}
        out.update({f"c{i}": fnlib.value(full, e) for i, e in enumerate(exprs)})
        many = next((c for c, x in out.items() if isinstance(x, Explode)), None)
        if many is None:
            rows.append(out)
        else:  # a generator: one row per element
            rows += [{**out, many: x} for x in out[many]]
    return pd.DataFrame(rows, columns=["id", *(f"c{i}" for i in range(len(exprs)))], dtype=object)


def sql(case: Case) -> dict[str, pd.DataFrame]:
    """A ``sql`` stage: DuckDB runs the query over the main stream's rows (as
    ``t``) and the right source's (as ``u``). An equi-join with a state TTL
    also gives the pairs it may emit (``maybe``: ``sqlgen.ttl_pairs``)."""
    import duckdb

    t = main_stream(case)
    u = _frame(case, case.stage.right) if case.stage.right else None
    with duckdb.connect() as con:
        con.register("t", t)
        if u is not None:
            con.register("u", sqlmore.right_frame(case.stage, u))
        if case.stage.ttl_ms:
            sure, maybe = sqlgen.ttl_pairs(case.stage)
            return {"main": con.execute(sure).df(), "maybe": con.execute(maybe).df()}
        return {"main": con.execute(sqlgen.reference_query(case.stage)).df()}


def expected(
    case: Case, late_ids: set[int] | None = None, retry: bool = True
) -> dict[str, pd.DataFrame]:
    """Expected rows per output (``main``; ``late`` for a window's late
    output); for a running aggregate, ``main`` holds the final value per key.

    ``late_ids``: the ids the run's late output holds. Of them, the late
    candidates are the expected late output, and a tumbling window counts every
    other row: a late row's only window had fired, an on-time row's had not.
    ``retry``: with ``retried``, a failed attempt's values of those windows.
    """
    st = case.stage
    if st.kind == "none":
        return {"main": main_stream(case)}
    if st.kind == "running":
        return {"main": running_final(case)}
    if st.kind == "fn":
        return {"main": functions(case)}
    if st.kind == "fagg":
        late = main_stream(case)
        late = late[late["id"].isin((late_ids or set()) & candidates(case))]
        out = {"main": aggs.aggregates(case, set(late["id"]), main_stream(case))}
        maybe_late = st.late or late_groupby.dropped(case)  # dropped: no late output
        if late_session.joins(case):  # candidates sharing keys (late_session.py)
            out["sessions"] = late_session.allowed(case, main_stream(case), late_ids or set())
        elif retry and maybe_late and candidates(case) and st.form in ("tumbling", "session"):
            out["retried"] = retried(case, late_ids or set())
        return {**out, "late": late} if st.late else out
    if overs.is_over(st):  # the candidates no output holds were dropped (overs.py)
        dropped = (late_ids or set()) & candidates(case)
        return {"main": overs.expected(case, main_stream(case), dropped)}
    if st.kind == "sql":
        return sql(case)
    if st.kind == "ujoin":
        pairs = main_stream(case).merge(_frame(case, st.right), on="k", suffixes=("", "_right"))
        if not st.ttl_ms:
            return {"main": pairs}
        # state_ttl: the pairs within the TTL must come, the others may (sqlgen.ttl_pairs)
        close = (pairs["ts"] - pairs["ts_right"]).abs() <= st.ttl_ms
        return {"main": pairs[close], "maybe": pairs[~close]}
    if st.kind in ("process", "coprocess"):
        return {"main": process_windows(case)}
    if st.kind == "comap":
        main = main_stream(case).assign(v=lambda d: d["v"] + st.a)
        right = _frame(case, st.right).assign(v=lambda d: d["v"] + st.b)
        return {"main": pd.concat([main, right], ignore_index=True)}
    if st.kind == "tjoin":
        return {"main": temporal(case)}
    if st.kind == "wjoin" and st.gap_ms:
        return {"main": session_join(case)}
    if st.kind == "wjoin":
        keys = ["k", "window_start", "window_end"]
        left = _windows(main_stream(case), st.size_ms, st.slide_ms)
        right = _windows(_frame(case, st.right), st.size_ms, st.slide_ms)
        return {"main": left.merge(right, on=keys, suffixes=("", "_right"))}
    if st.kind == "ijoin":
        return {"main": interval(case)}
    df = main_stream(case)
    late = df[df["id"].isin((late_ids or set()) & candidates(case))]
    df = df[~df["id"].isin(late["id"])]
    if st.kind == "session":
        assigned = _sessions(df, st.gap_ms)
    else:
        size = chained.size(case)  # a chained window's second, longer windows
        slide = st.slide_ms if st.kind == "sliding" else size
        assigned = _windows(df, size, slide)
    col = _agg_name(st.agg)
    groups = assigned.groupby(["k", "window_start", "window_end"])
    out = _aggregate(groups, st.agg).rename(col).reset_index()
    result = {"main": out[["k", "window_start", "window_end", col]]}
    if st.kind == "sliding" and candidates(case):
        result["bounds"] = sliding_bounds(case, late_ids or set())
    if st.late:
        result["late"] = late
    if late_session.joins(case):
        # a candidate sharing its key: the outcomes it allows (late_session.py)
        result["sessions"] = late_session.allowed(case, main_stream(case), late_ids or set())
        return result
    if retry and st.late and candidates(case) and st.kind in ("tumbling", "session"):
        result["retried"] = retried(case, late_ids or set())
    return result
