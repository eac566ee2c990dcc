"""``ed.read_state`` of the operators ``state.py`` did not read at first
(docs/CHAOS.md "read_state of windows' and joins' state"): the ``agg`` of
``F`` aggregates in windows (both spellings), Python window ``reduce`` and
``apply``, chained windows (both windows), and the joins.

The final checkpoint of a bounded job holds no open window and no kept row
of an interval, window or TTL join (the input ends with the maximum
watermark). What it holds, exactly: an unbounded join without ``state_ttl``
keeps every row of both inputs, each ``matched`` when the other input has its
key; a temporal join keeps each key's newest version and nothing else.

A savepoint's state is a prefix of the input's. What is exact about it: an
open window is one of the reference's windows of its key (a session within
one), its row count and aggregates on the near side of the window's final
values (sums, counts, maxima below, minima above; a ``collect_list`` a
sub-multiset; ``first``/``last`` of ``k`` the key); a Python ``reduce``'s
row is a row of the window with the partial ``v``; an ``apply``'s rows are
rows of the window, each once; a join keeps input rows as they are (the left
after the chain's operators), each once, at their time, and a row it marks
``matched`` has a partner in the reference.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Any

import pandas as pd

from .aggs import Approx
from .case import Case
from .check import _cell, _diff, _typed_rows

PY_WINDOWS = ("reduce", "apply", "apply_typed")
JOINS = {"ijoin": "join", "wjoin": "wjoin", "ujoin": "ujoin", "tjoin": "tjoin"}
"""The uid of each join stage's operator (render.py, bcast.py)."""


def eligible(case: Case) -> bool:
    """Whether the case's stage is one this module reads."""
    st = case.stage
    if st.kind == "fagg":
        return bool(st.form)
    if st.kind in ("tumbling", "sliding", "session"):
        return st.spelling in PY_WINDOWS or (st.kind == "tumbling" and st.a > 0)
    return st.kind in JOINS


def widen(rng: random.Random, case: Case, old: bool) -> None:
    """Draws ``read_state`` for a case this module reads, half of them
    (``old``: the case could draw it before, in ``generate``'s older draw)."""
    if not old and eligible(case) and rng.random() < 0.5:
        case.read_state = True


def uids(case: Case) -> list[str]:
    """The uids whose state the case reads: a chained window's both windows."""
    st = case.stage
    if st.kind == "fagg":
        return ["fagg"]
    if st.kind in JOINS:
        return [JOINS[st.kind]]
    return ["win", "win2"] if st.kind == "tumbling" and st.a else ["win"]


def check(
    case: Case,
    read: Any,
    savepoint: bool,
    want: dict[str, pd.DataFrame],
) -> list[str]:
    """The problems of each uid's state; ``read(where, uid)`` reads it
    (``where``: "chk" or "savepoint"; an error as a problem string)."""
    problems: list[str] = []
    for uid in uids(case):
        got = read("chk", uid)
        if isinstance(got, str):
            return [*problems, got]
        problems += final_problems(case, uid, got, want)
        if savepoint:
            taken = read("savepoint", uid)
            if isinstance(taken, str):
                return [*problems, taken]
            problems += savepoint_problems(case, uid, taken, want)
    return problems


# ---- the final checkpoint ------------------------------------------------------


def final_problems(
    case: Case, uid: str, got: pd.DataFrame, want: dict[str, pd.DataFrame]
) -> list[str]:
    name = f"read_state (final checkpoint, uid {uid!r})"
    st = case.stage
    if st.kind == "ujoin" and not st.ttl_ms:
        return _ujoin_final(name, case, got)
    if st.kind == "tjoin" and not st.spelling:
        return _tjoin_final(name, case, got)
    if got.empty:
        return []
    what = "kept row(s)" if st.kind in JOINS else "open window(s)"
    return [f"{name}: {len(got)} {what}, expected none: {got.head(5).values.tolist()}"]


def _kept(got: pd.DataFrame) -> pd.DataFrame:
    """A join's kept rows as ``side``, ``id``, ``k``, ``ts``, ``v``, ``time_ms``,
    ``matched`` (the row from its side's struct)."""
    rows = []
    for r in got.to_dict("records"):
        cell = r.get(r.get("side"))
        row = cell if isinstance(cell, dict) else {}
        rows.append(
            {
                "side": r.get("side"),
                "key": r.get("k"),
                **{c: row.get(c) for c in ("id", "k", "ts", "v")},
                "time_ms": r.get("time_ms"),
                "matched": bool(r.get("matched")),
            }
        )
    columns = ["side", "key", "id", "k", "ts", "v", "time_ms", "matched"]
    return pd.DataFrame(rows, columns=columns)


def _inputs(case: Case) -> dict[str, pd.DataFrame]:
    from .reference import _frame, main_stream

    return {"left": main_stream(case), "right": _frame(case, case.stage.right)}


def _ujoin_final(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """Every row of both inputs, once, ``matched`` exactly when the other
    input has its key."""
    inputs = _inputs(case)
    want = []
    for side, other in (("left", "right"), ("right", "left")):
        df = inputs[side]
        keys = set(inputs[other]["k"])
        want.append(df.assign(side=side, matched=df["k"].isin(keys)))
    expected = pd.concat(want, ignore_index=True)
    columns = ["side", "id", "k", "ts", "v", "matched"]
    problem = _diff(name, _typed_rows(_kept(got), columns), _typed_rows(expected, columns))
    return [problem] if problem else []


def _tjoin_final(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """Each key's newest version (the versions have distinct times per key:
    generate.py), no main row."""
    versions = _inputs(case)["right"].sort_values("ts", kind="stable")
    newest = versions.groupby("k").tail(1).assign(side="right")
    columns = ["side", "id", "k", "ts", "v"]
    problem = _diff(name, _typed_rows(_kept(got), columns), _typed_rows(newest, columns))
    return [problem] if problem else []


# ---- a savepoint ---------------------------------------------------------------


def savepoint_problems(
    case: Case, uid: str, got: pd.DataFrame, want: dict[str, pd.DataFrame]
) -> list[str]:
    name = f"read_state (savepoint, uid {uid!r})"
    if got.empty:
        return []
    st = case.stage
    if st.kind in JOINS and not st.spelling:
        return _join_savepoint(name, case, got)
    if st.kind == "fagg":
        return _fagg_savepoint(name, case, got, want["main"])
    if st.kind == "tjoin":
        return _parked_savepoint(name, case, got)
    if st.spelling in ("apply", "apply_typed"):
        return _apply_savepoint(name, case, got)
    from .reference import expected
    from .state import _window_savepoint

    if uid == "win" and st.a:
        # a chained case's first window: the stage's aggregate over its own windows
        first = dataclasses.replace(case, stage=dataclasses.replace(st, a=0))
        return _window_savepoint(name, first, got, expected(first)["main"])
    problems = _window_savepoint(name, case, got, _windows_of(want))
    return problems + (_reduced_rows(name, case, got) if st.spelling == "reduce" else [])


def _windows_of(want: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The windows' final values, with any outcome a late candidate allows."""
    final = want["main"]
    if "sessions" in want:  # any outcome a late candidate allows (late_session.py)
        final = pd.concat([final, want["sessions"][list(final.columns)]]).drop_duplicates()
    return final


def _within(case: Case, window: tuple[int, int], final: tuple[int, int]) -> bool:
    """Whether an open window is ``final`` (a session: within it)."""
    session = case.stage.kind == "session" or case.stage.form == "session"
    if session:
        return final[0] <= window[0] and window[1] <= final[1]
    return window[0] == final[0] and (window[1] is None or window[1] == final[1])


def _rows_by_id(case: Case) -> dict[int, tuple[int, int, int]]:
    from .reference import main_stream

    df = main_stream(case)
    return {
        int(i): (int(k), int(t), int(v))
        for i, k, t, v in zip(df["id"], df["k"], df["ts"], df["v"], strict=True)
    }


def _reduced_rows(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """A reduce keeps its first row's ``id`` and ``ts``: a row of the key in the window."""
    rows = _rows_by_id(case)
    wrong = []
    for r in got.to_dict("records"):
        row = rows.get(int(r["id"]))
        if (
            row is None
            or row[0] != int(r["k"])
            or row[1] != int(r["ts"])
            or not int(r["window_start"]) <= row[1] < int(r["window_end"])
        ):
            wrong.append((int(r["k"]), int(r["window_start"]), int(r["id"]), int(r["ts"]), row))
    if not wrong:
        return []
    return [f"{name}: {len(wrong)} reduced row(s) not of their window, e.g. {wrong[:5]}"]


def _apply_savepoint(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """An ``apply`` window's rows: rows of the reference's stream, of the key,
    inside the window, each once; the window one of the reference's (a session
    within one: every final session of a key holds all its rows' times)."""
    from .reference import _sessions, _windows, main_stream

    rows = _rows_by_id(case)
    st = case.stage
    df = main_stream(case)
    if st.kind == "session":
        assigned = _sessions(df, st.gap_ms)
    else:
        slide = st.slide_ms if st.kind == "sliding" else st.size_ms
        assigned = _windows(df, st.size_ms, slide)
    finals: dict[int, list[tuple[int, int]]] = {}
    for k, s, e in set(
        zip(assigned["k"], assigned["window_start"], assigned["window_end"], strict=True)
    ):
        finals.setdefault(int(k), []).append((int(s), int(e)))
    wrong: list[Any] = []
    seen: Counter[tuple[int, int]] = Counter()
    for r in got.to_dict("records"):
        k, start, end = int(r["k"]), int(r["window_start"]), int(r["window_end"])
        if not any(_within(case, (start, end), f) for f in finals.get(k, [])):
            wrong.append(("no such window", k, start, end))
        held = r.get("rows")
        for item in [] if held is None else list(held):
            i = int(item["id"])
            seen[(i, start if st.kind == "sliding" else 0)] += 1
            here = (int(item["k"]), int(item["ts"]), int(item["v"]))
            if rows.get(i) != here or here[0] != k or not start <= here[1] < end:
                wrong.append(("row", k, start, end, i, here, rows.get(i)))
    twice = [i for (i, _), n in seen.items() if n > 1]  # a sliding window's row: per window
    problems = []
    if wrong:
        problems.append(
            f"{name}: {len(wrong)} window(s) or row(s) not the reference's: {wrong[:5]}"
        )
    if twice:
        problems.append(f"{name}: {len(twice)} row(s) held by two windows, e.g. {twice[:5]}")
    return problems


FAGG_NEAR = {"sum": "<=", "max": "<=", "count_distinct": "<=", "min": ">="}
FAGG_NEAR |= {"sum_length": "<=", "max_abs": "<=", "count_upper": "<="}  # fnaggs.py


def _fagg_savepoint(name: str, case: Case, got: pd.DataFrame, final: pd.DataFrame) -> list[str]:
    """An ``agg`` window's open windows: the key's windows, ``n`` at most the
    final count, each aggregate on its near side (``collect_list`` a
    sub-multiset, ``first``/``last`` of ``k`` the key); the others (``avg``,
    deviations, the approximate ones) are not bounded by a prefix."""
    finals: dict[int, list[dict[str, Any]]] = {}
    for r in final.to_dict("records"):
        finals.setdefault(int(r["k"]), []).append(r)
    wrong: list[Any] = []
    for r in got.to_dict("records"):
        k, start = int(r["k"]), int(r["window_start"])
        end = int(r["window_end"]) if "window_end" in r else None
        outer = [
            f
            for f in finals.get(k, [])
            if _within(case, (start, end), (int(f["window_start"]), int(f["window_end"])))
        ]
        if not any(_fagg_near(r, f, k) for f in outer):
            wrong.append(((k, start, end), {c: _cell(x) for c, x in r.items()}, len(outer)))
    if not wrong:
        return []
    return [
        f"{name}: {len(wrong)} open window(s) not within a final window of the key or beyond "
        f"its values, e.g. (window, state, final windows) {wrong[:3]}"
    ]


def _fagg_near(got: dict[str, Any], final: dict[str, Any], key: int) -> bool:
    if not 0 < int(got["n"]) <= int(final["n"]):
        return False
    for column, value in got.items():
        if not column.startswith("a_") or column not in final:
            continue
        agg, want = column[2:], final[column]
        if isinstance(want, Approx) or value is None:
            continue
        if agg in FAGG_NEAR:
            ok = value <= want if FAGG_NEAR[agg] == "<=" else value >= want
        elif agg in ("first", "last"):
            ok = int(value) == key
        elif agg == "collect_list":
            ok = not Counter(int(x) for x in value) - Counter(int(x) for x in want)
        elif agg == "collect_set":
            ok = {int(x) for x in value} <= {int(x) for x in want}
        else:
            ok = True
        if not ok:
            return False
    return True


def _join_savepoint(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """Kept rows: input rows as they are, each once, under their key, at
    their time (an unbounded join without ``state_ttl`` keeps no time), and
    ``matched`` only with a partner in the reference."""
    kept = _kept(got)
    inputs = _inputs(case)
    st = case.stage
    by_id = {side: {int(r["id"]): r for r in df.to_dict("records")} for side, df in inputs.items()}
    timed = not (st.kind == "ujoin" and not st.ttl_ms)
    wrong: list[Any] = []
    for r in kept.to_dict("records"):
        side = r["side"]
        ref = by_id.get(side, {}).get(int(r["id"])) if r["id"] is not None else None
        row = tuple(None if r[c] is None else int(r[c]) for c in ("id", "k", "ts", "v"))
        if ref is None or row != tuple(int(ref[c]) for c in ("id", "k", "ts", "v")):
            wrong.append(("not an input row", side, row))
        elif int(r["key"]) != row[1] or (timed and int(r["time_ms"]) != row[2]):
            wrong.append(("key or time", side, row, r["key"], r["time_ms"]))
        elif r["matched"] and not _has_partner(case, side, ref, inputs):
            wrong.append(("matched without a partner", side, row))
    twice = [k for k, n in Counter(zip(kept["side"], kept["id"], strict=True)).items() if n > 1]
    return _row_problems(name, "kept", "the reference's", wrong, twice)


def _has_partner(
    case: Case, side: str, row: dict[str, Any], inputs: dict[str, pd.DataFrame]
) -> bool:
    """Whether ``row`` of ``side`` joins a row of the other input: an
    interval join within its bounds, the others on its key."""
    st = case.stage
    other = inputs["right" if side == "left" else "left"]
    same = other[other["k"] == row["k"]]
    if st.kind != "ijoin":
        return not same.empty
    if side == "left":
        lo, hi = row["ts"] + st.lower_ms, row["ts"] + st.upper_ms
    else:
        lo, hi = row["ts"] - st.upper_ms, row["ts"] - st.lower_ms
    return bool(((same["ts"] >= lo) & (same["ts"] <= hi)).any())


def _parked_savepoint(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """The broadcast temporal join's list state ``rows`` (bcast.py): each
    parked ``[id, ts, v]`` a main row of the key, each once."""
    rows = _rows_by_id(case)
    wrong: list[Any] = []
    seen: Counter[int] = Counter()
    for r in got.to_dict("records"):
        held = r.get("rows")
        for item in [] if held is None or isinstance(held, float) else list(held):
            i, ts, v = (int(x) for x in item)
            seen[i] += 1
            if rows.get(i) != (int(r["k"]), ts, v):
                wrong.append((int(r["k"]), i, ts, v, rows.get(i)))
    twice = [i for i, n in seen.items() if n > 1]
    return _row_problems(name, "parked", "the key's", wrong, twice)


def _row_problems(
    name: str, held: str, whose: str, wrong: list[Any], twice: list[Any]
) -> list[str]:
    """The problems of the rows state ``name`` holds (``held``: kept, parked): rows
    not ``whose``, rows twice (a few of each as examples)."""
    problems = []
    if wrong:
        problems.append(f"{name}: {len(wrong)} {held} row(s) not {whose}, e.g. {wrong[:5]}")
    if twice:
        problems.append(f"{name}: {len(twice)} row(s) {held} twice, e.g. {twice[:5]}")
    return problems
