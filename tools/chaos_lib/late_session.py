"""A late row joining an open session: the outcomes the reference allows.

Before a session window with a late output, a source may give its late
candidates keys that other rows have (``Source.late_join``), one candidate a
key (data.py). Whether a candidate is late, and which sessions it joins,
depends on the watermark ``W`` of its key group when it arrives, which the
reference does not simulate (docs/CHAOS.md). The operator's rule (docs/API.md
"Windows", core/src/operator/window/session_multi.rs): a row at ``t`` opens
``[t, t + gap)``; it joins (and merges) every open session of its key it
touches; touching none, it is late if ``t + gap - 1 <= W``, else it opens a
session of its own; a session fires once ``end - 1 <= W``.

No other row is late (data.py), so every other row of the key at or before
``W`` arrived before the candidate and every one after ``W`` comes after it;
the key's other rows form its batch sessions ``B1 < B2 < ...`` (sorted by
end, they fire in that order), and at ``W`` the fired ones are those with
``end - 1 <= W``. An open session the candidate touches is one whose first
row is before the candidate's end (its end is past ``W``, so past the
candidate's time). So for each ``W`` the outcome is exact: the fired
sessions as they are, then the sessions of the other rows with the candidate
(or without it: late). ``W`` matters only at the sessions' last
milliseconds and the candidate's, so one ``W`` per stretch between them
gives every outcome. A candidate the run's late output holds has one
outcome (every batch session of the other rows); one it does not hold, each
accepted outcome of a ``W``: the key's output must be one of them.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pandas as pd

from .case import Case

Row = tuple[int, int]
"""One row of the key: ``(ts, v)``."""
Session = tuple[int, int, list[Row]]
"""A session: its start, its end (its last row's time + gap) and its rows."""


def sessions_of(rows: list[Row], gap: int) -> list[Session]:
    """The batch sessions of one key's rows: in time order, a row ``gap`` or
    more after the previous one starts a new session."""
    out: list[Session] = []
    for ts, v in sorted(rows):
        if out and ts - (out[-1][1] - gap) < gap:
            start, _, members = out[-1]
            out[-1] = (start, ts + gap, [*members, (ts, v)])
        else:
            out.append((ts, ts + gap, [(ts, v)]))
    return out


def outcomes(
    others: list[Row], candidate: Row, gap: int
) -> tuple[list[Session], list[list[Session]]]:
    """The key's sessions when the candidate is late, and each distinct
    outcome when it is not (one per watermark stretch that accepts it)."""
    base = sessions_of(others, gap)
    t = candidate[0]
    marks = sorted({end - 1 for _, end, _ in base} | {t + gap - 1})
    accepted: list[list[Session]] = []
    for w in [marks[0] - 1, *marks]:
        fired = [s for s in base if s[1] - 1 <= w]
        rest = [s for s in base if s[1] - 1 > w]
        touches = any(start < t + gap for start, _, _ in rest)
        if t + gap - 1 <= w and not touches:
            continue  # late at this watermark
        joined = [row for _, _, members in rest for row in members]
        outcome = fired + sessions_of([*joined, candidate], gap)
        if outcome not in accepted:
            accepted.append(outcome)
    return base, accepted


AGGS: dict[str, Callable[[list[int]], int]] = {"sum": sum, "count": len, "min": min, "max": max}


def _values(case: Case, k: int, members: list[Row]) -> list[object]:
    """A session's values: the stage's aggregate, or an ``fagg`` stage's row
    count and aggregates (aggs.py) over the session's rows."""
    st = case.stage
    if st.kind != "fagg":
        return [AGGS[st.agg]([v for _, v in members])]
    from .aggs import value

    group = pd.DataFrame(sorted(members), columns=["ts", "v"]).assign(k=k)
    return [len(members), *(value(group, e) for e in st.exprs)]


def allowed(case: Case, main: pd.DataFrame, late_ids: set[int]) -> pd.DataFrame:
    """Per key with a candidate the run did not find late: each outcome it
    allows as rows ``outcome, k, window_start, window_end, <agg>`` (an ``fagg``
    stage: ``n`` and its aggregates; ``main``: the rows reaching the window,
    candidates included)."""
    from .reference import candidates

    st = case.stage
    column = ["count" if st.agg == "count" else "v"]
    if st.kind == "fagg":
        column = ["n", *(f"a_{e[0]}" for e in st.exprs)]
    from .late_burst import burst_outcomes

    rows = []
    found = main[main["id"].isin(candidates(case))]
    for k, group in found.groupby("k", sort=True):
        ids = sorted(int(i) for i in group["id"])
        if set(ids) <= late_ids:
            continue  # every candidate of the key late: its sessions are exact
        key = main[(main["k"] == k) & ~main["id"].isin(ids)]
        others = list(zip(key["ts"].tolist(), key["v"].tolist(), strict=True))
        ordered = group.sort_values("id")  # their arrival order (one split, data.py)
        cands = list(zip(ordered["ts"].tolist(), ordered["v"].tolist(), strict=True))
        if len(ids) == 1:
            _, accepted = outcomes(others, cands[0], st.gap_ms)
        else:  # several of one key (late_burst.py): the outcomes with these late
            late = frozenset(i for i, c in enumerate(ids) if c in late_ids)
            accepted = burst_outcomes(others, cands, st.gap_ms).get(late, [])
            accepted = accepted or [[(-1, -1, cands)]]  # none: no session can match
        for index, outcome in enumerate(accepted):
            for start, end, members in outcome:
                values = _values(case, int(k), members)
                rows.append((index, int(k), start, end, *values))
    columns = ["outcome", "k", "window_start", "window_end", *column]
    return pd.DataFrame(rows, columns=columns, dtype=object if st.kind == "fagg" else None)


def joins(case: Case) -> bool:
    """Whether the case's session window (of the DSL's aggregates or an
    ``fagg`` stage's) has candidates sharing keys."""
    st = case.stage
    session = st.kind == "session" or (st.kind == "fagg" and st.form == "session")
    return session and any(s.late_rows and s.late_join for s in case.sources)


def widen(rng: random.Random, case: Case) -> None:
    """Drawn after every older draw (generate.py): half the ``fagg`` session
    windows with late candidates (each with a key of its own) give the main
    source's candidates keys the other rows have instead, one a key, as the
    DSL's session windows do (``late_rows:session_join``); the other sources
    none, and no KafkaSink (a failed attempt's sessions would be another
    outcome)."""
    st = case.stage
    main = case.source(case.main)
    if not (st.kind == "fagg" and st.form == "session" and st.late):
        return
    if not (main.late_rows and main.late_keys) or rng.random() >= 0.5:
        return
    if any(e[0] == "sum_big" for e in st.exprs):
        return  # its values depend on the rows' ids, which the outcomes do not keep
    share_keys(case)


def share_keys(case: Case) -> None:
    """Gives the main source's late candidates keys the other rows have, one a key
    (a candidate may join an open session), the other sources no late rows, and the
    case no KafkaSink (an at-least-once sink: a failed attempt's sessions would be
    another outcome). Draws nothing."""
    for source in case.sources:
        source.late_keys = False
        if source.name != case.main:
            source.late_rows = 0
    case.source(case.main).late_join = True
    case.sinks = [s for s in case.sinks if s != "kafka"] or ["parquet"]
