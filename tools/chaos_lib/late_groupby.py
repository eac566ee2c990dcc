"""Late rows before Spark's ``group_by`` spelling of a window (``late_rows:dropped``).

``group_by(F.window(...), "k").agg(...)`` and ``group_by("k",
F.session_window(...))`` take no late output (docs/API.md "Aggregates"): a
late row is dropped. So which late candidates (``data.py``) were dropped is
not known, unlike before a window with a late output; what is exact: a
tumbling window gives a row one window and a candidate before a session
window has a key of its own (a session of itself), so a window's value is
the reference's over its rows minus some subset of its candidates (the
outcomes ``reference.retried`` lists per group of candidates sharing a
window), each window comes once, a window none of whose rows is a
candidate is exactly the batch one, and a window may be missing only when
every row of it is a candidate.

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pandas as pd

from .case import Case

WINDOW = ("k", "window_start", "window_end")


def widen(rng: random.Random, case: Case) -> None:
    """Late candidates before six in ten tumbling and session windows of the
    ``group_by`` spelling (a key of their own before a session window); not
    behind an explode (it gives rows new ids: candidates are known by id)."""
    st = case.stage
    if st.kind != "fagg" or not st.spelling or st.form not in ("tumbling", "session"):
        return
    if any(op.kind == "explode" for op in case.ops) or any(s.late_rows for s in case.sources):
        return
    if rng.random() < 0.6:
        for source in case.sources:
            if source.kind != "sequence":
                source.late_rows = rng.randint(1, 5)
                source.late_keys = st.form == "session"


def dropped(case: Case) -> bool:
    """Whether late candidates come before a window without a late output."""
    st = case.stage
    late = any(s.late_rows for s in case.sources)
    return st.kind == "fagg" and bool(st.spelling) and st.form in ("tumbling", "session") and late


def _may_be_missing(case: Case) -> set[tuple[Any, ...]]:
    """The windows whose every row is a late candidate."""
    from . import aggs
    from .check import _cell
    from .reference import candidates, main_stream

    maybe = candidates(case)
    return {
        tuple(_cell(found[c]) for c in WINDOW)
        for found, group in aggs.groups(case, set(), main_stream(case))
        if set(group["id"]) <= maybe
    }


def compare(
    case: Case,
    name: str,
    got: pd.DataFrame,
    want: dict[str, pd.DataFrame],
    read: Callable[[pd.DataFrame, list[str]], Counter[tuple[Any, ...]]],
) -> list[str]:
    """The problems of output ``name`` (the module's docstring): ``want``'s
    ``main`` holds every candidate, ``retried`` every outcome."""
    from .check import _fits

    ref = want["main"]
    columns = sorted(ref.columns)
    at = [columns.index(c) for c in WINDOW]
    allowed: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    outcomes = pd.concat([ref, want["retried"][list(ref.columns)]], ignore_index=True)
    for row in read(outcomes, columns):
        allowed.setdefault(tuple(row[i] for i in at), []).append(row)
    rows = read(got, columns)
    seen: Counter[tuple[Any, ...]] = Counter()
    unknown, outside = [], []
    for row in rows.elements():
        window = tuple(row[i] for i in at)
        seen[window] += 1
        if window not in allowed:
            unknown.append(row)
        elif not any(_fits(value, row) for value in allowed[window]):
            outside.append((row, allowed[window][:3]))
    problems = []
    twice = sorted(w for w, n in seen.items() if n > 1)
    if twice:
        problems.append(f"{name}: {len(twice)} window(s) emitted twice, e.g. {twice[:5]}")
    if unknown:
        problems.append(f"{name}: {len(unknown)} window(s) not expected, e.g. {unknown[:3]}")
    if outside:
        problems.append(
            f"{name}: {len(outside)} window(s) whose value no choice of dropped late rows "
            f"gives, e.g. (row, allowed) {outside[:3]}"
        )
    missing = set(allowed) - set(seen) - _may_be_missing(case)
    if missing:
        problems.append(
            f"{name}: {len(missing)} window(s) lost (not all of their rows may be late), "
            f"e.g. {sorted(missing)[:5]}"
        )
    return problems
