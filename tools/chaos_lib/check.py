"""Exact comparison of a run's committed outputs with the reference.

Append sinks (Parquet, Delta append, collect) of a stateless chain, a window or
a join must hold the reference rows as a multiset: nothing lost, nothing
committed twice. A running aggregate emits one updated row per key per input
batch, so how many rows it emits depends on batching; its exact checks are: an
upsert table equals the final value per key; an append sink's last value per
key (the largest for sum, count and max, the smallest for min: ``v`` stays
positive, so sums and counts only grow) equals it, and for sum and count no
value repeats for a key (a repeat is an update committed twice).
"""

from __future__ import annotations

import datetime
import math
from collections import Counter
from typing import Any

import pandas as pd

from . import late_groupby
from .aggs import Approx, output_columns, unnest_window
from .case import Case
from .sqlmore import counted


def running(case: Case) -> bool:
    """Whether the stage is a running aggregate of one column (an upsert stream)."""
    return case.stage.kind == "running" or (case.stage.kind == "sql" and case.stage.form == "group")


def typed(case: Case) -> bool:
    """Whether the outputs have other types than int64 (compared by ``_cell``)."""
    return case.stage.kind in ("fn", "fagg", "over") or (
        case.stage.kind == "sql" and case.stage.form in ("select", "union", "closing", "over")
    )


def _cell(x: Any) -> Any:
    """One value in a form both sides agree on: null as None, a number as an
    int when whole (pandas makes an int column with nulls float), else rounded
    to 9 significant digits (avg and deviations: the one float tolerance), a
    timestamp as its UTC time without zone, a list as its sorted values (a
    collect_list follows arrival order)."""
    if x is None or x is pd.NaT:
        return None
    if isinstance(x, bool):
        return x
    if hasattr(x, "tolist") and not isinstance(x, (pd.Timestamp, datetime.datetime)):
        x = x.tolist()  # numpy scalars and arrays
        if not isinstance(x, list):
            return _cell(x)
    if isinstance(x, (list, tuple)):
        return tuple(sorted(_cell(e) for e in x))
    if isinstance(x, float):
        if math.isnan(x):
            return None
        return int(x) if x.is_integer() else float(f"{x:.9g}")
    if isinstance(x, datetime.datetime):
        if x.tzinfo is not None:
            x = x.astimezone(datetime.UTC).replace(tzinfo=None)
        return x.isoformat()
    return x


def _typed_rows(df: pd.DataFrame, columns: list[str]) -> Counter[tuple[Any, ...]]:
    if df.empty:
        return Counter()
    missing = [c for c in columns if c not in df.columns]
    if missing:
        return Counter({("<missing columns>", *missing): 1})
    values = [[_cell(x) for x in df[c].astype(object).tolist()] for c in columns]
    return Counter(zip(*values, strict=True))


def _fagg_running(name: str, got: pd.DataFrame, want: pd.DataFrame) -> list[str]:
    """A running ``agg``: its final row per key (the one with the largest row
    count ``n``: each update counts more rows) equals the reference's, all
    columns; no key's count repeats (an update committed twice)."""
    columns = list(want.columns)
    if name != "upsert" and not got.empty and "n" in got.columns:
        problems = []
        repeats = got[got.duplicated(["k", "n"], keep=False)]
        if not repeats.empty:
            problems.append(
                f"{name}: {len(repeats)} update row(s) repeat a key's count (committed twice), "
                f"e.g. {repeats[['k', 'n']].head(5).values.tolist()}"
            )
        final = got.sort_values("n", kind="stable").groupby("k").tail(1)
        problem = _diff(
            f"{name} (final per key)", _typed_rows(final, columns), _typed_rows(want, columns)
        )
        return problems + ([problem] if problem else [])
    problem = _diff(name, _typed_rows(got, columns), _typed_rows(want, columns))
    return [problem] if problem else []


def _rows(df: pd.DataFrame, columns: list[str]) -> Counter[tuple[Any, ...]]:
    if df.empty:
        return Counter()
    missing = [c for c in columns if c not in df.columns]
    if missing:
        return Counter({("<missing columns>", *missing): 1})
    # a null (an outer join's missing side) is -1: every generated value is >= 0
    values = [df[c].fillna(-1).astype("int64").tolist() for c in columns]
    return Counter(zip(*values, strict=True))


def _shape(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple("<float>" if isinstance(x, float) else x for x in row)


def _close(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(
        math.isclose(x, y, rel_tol=1e-8)
        if isinstance(x, float) and isinstance(y, float)
        else x == y
        for x, y in zip(a, b, strict=True)
    )


def _drop_close(lost: Counter[tuple[Any, ...]], extra: Counter[tuple[Any, ...]]) -> None:
    """Removes the lost and extra rows that pair up within the float
    tolerance: a value on a rounding boundary (20.80859375 exactly, computed
    as 20.808593749999996) rounds to two neighbours at 9 digits."""
    by_shape: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in extra.elements():
        by_shape.setdefault(_shape(row), []).append(row)
    for row in list(lost.elements()):
        candidates = by_shape.get(_shape(row), [])
        match = next((i for i, other in enumerate(candidates) if _close(row, other)), None)
        if match is not None:
            other = candidates.pop(match)
            lost[row] -= 1
            extra[other] -= 1
    lost += Counter()  # drops the zero counts
    extra += Counter()


def _drop_fitting(lost: Counter[tuple[Any, ...]], extra: Counter[tuple[Any, ...]]) -> None:
    """Removes the lost rows with ``Approx`` cells (an approximate aggregate's
    allowed interval, ``aggs.py``) that an extra row fits: its other cells
    equal (floats within the tolerance), its approximate ones inside."""
    approx = [row for row in lost.elements() if any(isinstance(x, Approx) for x in row)]
    if not approx:
        return
    # the approximate columns are the same in every row of an output; a float
    # column may hold a whole number (an int, ``_cell``) in some rows, so a
    # column is exact only where no row holds an interval or a float
    exact = [
        i
        for i in range(len(approx[0]))
        if not any(isinstance(row[i], (Approx, float)) for row in approx)
    ]
    index: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in extra.elements():
        index.setdefault(tuple(row[i] for i in exact), []).append(row)
    for row in approx:
        candidates = index.get(tuple(row[i] for i in exact), [])
        match = next((i for i, r in enumerate(candidates) if _fits(row, r)), None)
        if match is not None:
            other = candidates.pop(match)
            lost[row] -= 1
            extra[other] -= 1
    lost += Counter()
    extra += Counter()


def _fits(want: tuple[Any, ...], got: tuple[Any, ...]) -> bool:
    return all(
        w.fits(g)
        if isinstance(w, Approx)
        else math.isclose(w, g, rel_tol=1e-8)
        if isinstance(w, float) and isinstance(g, float)
        else w == g
        for w, g in zip(want, got, strict=True)
    )


def _diff(name: str, got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]]) -> str | None:
    if got == want:
        return None
    lost, extra = want - got, got - want
    _drop_fitting(lost, extra)
    _drop_close(lost, extra)
    if not lost and not extra:
        return None
    return (
        f"{name}: {sum(lost.values())} row(s) lost, {sum(extra.values())} extra "
        f"(of {sum(want.values())} expected); lost e.g. {sorted(lost, key=repr)[:5]}, "
        f"extra e.g. {sorted(extra, key=repr)[:5]}"
    )


def _running(name: str, case: Case, got: pd.DataFrame, want: pd.DataFrame) -> list[str]:
    col = want.columns[-1]
    problems = []
    if name == "upsert":
        problem = _diff(name, _rows(got, ["k", col]), _rows(want, ["k", col]))
        return [problem] if problem else []
    if got.empty:
        return [] if want.empty else [f"{name}: no rows, expected {len(want)} keys"]
    pick = "min" if case.stage.agg == "min" else "max"
    final = got.groupby("k")[col].agg(pick).reset_index()
    problem = _diff(f"{name} (final per key)", _rows(final, ["k", col]), _rows(want, ["k", col]))
    if problem:
        problems.append(problem)
    if case.stage.agg in ("sum", "count"):
        repeats = got[got.duplicated(["k", col], keep=False)]
        if not repeats.empty:
            problems.append(
                f"{name}: {len(repeats)} update row(s) repeat a key's value (committed twice), "
                f"e.g. {repeats[['k', col]].head(5).values.tolist()}"
            )
    return problems


def _bounded(
    name: str, got: pd.DataFrame, bounds: pd.DataFrame, dedupe: bool, retry: bool
) -> list[str]:
    """Counts of sliding windows with late candidates: each window once, its
    count within its bounds (``reference.sliding_bounds``); a window may be
    missing only when it may count nothing. ``retry``: an at-least-once sink
    after a failure may also hold a failed attempt's count of a window, within
    the bounds of any choice of late candidates (``lo_any``, ``hi_any``)."""
    keys = ["k", "window_start", "window_end"]
    rows = _rows(got, [*keys, "count"])
    if dedupe:
        rows = Counter(dict.fromkeys(rows, 1))
    problems = []
    counts: dict[tuple[Any, ...], list[int]] = {}
    for r in rows.elements():
        counts.setdefault(r[:3], []).append(r[3])
    limits = {
        (int(b.k), int(b.window_start), int(b.window_end)): (
            (int(b.lo), int(b.hi)),
            (int(b.lo_any), int(b.hi_any)) if retry else (int(b.lo), int(b.hi)),
        )
        for b in bounds.itertuples(index=False)
    }
    twice = [
        w
        for w, n in counts.items()
        if len(n) > 1
        and not (retry and w in limits and all(limits[w][1][0] <= c <= limits[w][1][1] for c in n))
    ]
    if twice:
        problems.append(f"{name}: {len(twice)} window(s) emitted twice, e.g. {sorted(twice)[:5]}")
    unknown = sorted(set(counts) - set(limits))
    if unknown:
        problems.append(f"{name}: {len(unknown)} window(s) not expected, e.g. {unknown[:5]}")
    wrong = []
    for w, ((lo, hi), (lo_any, hi_any)) in sorted(limits.items()):
        seen = counts.get(w, [0])
        if not any(lo <= c <= hi for c in seen) or not all(lo_any <= c <= hi_any for c in seen):
            wrong.append((w, seen[0] if len(seen) == 1 else seen, lo, hi))
    if wrong:
        problems.append(
            f"{name}: {len(wrong)} window count(s) outside their bounds, "
            f"e.g. (window, count, lo, hi) {wrong[:5]}"
        )
    return problems


def compare(
    case: Case, outputs: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]
) -> list[str]:
    """Every difference between ``outputs`` and the reference ``want``, as sentences."""
    problems: list[str] = []
    for name, got in outputs.items():
        if case.stage.kind == "fagg" and case.stage.spelling and name != "late":
            problems += _spark_columns(name, case, got)
            got = unnest_window(got)
            if late_groupby.dropped(case):  # late rows dropped, which is not known
                problems += late_groupby.compare(case, name, got, want, _typed_rows)
                continue
        ref = want["late"] if name == "late" else want["main"]
        if "sessions" in want and name != "late":
            problems += _sessions(name, got, ref, want["sessions"], typed(case))
            continue
        if "bounds" in want and name != "late":
            kafka = name == "kafka"
            retry = kafka and case.fault.kind != "none"
            problems += _bounded(name, got, want["bounds"], dedupe=kafka, retry=retry)
            continue
        if running(case):
            problems += _running(name, case, got, ref)
            continue
        if (case.stage.kind == "fagg" and not case.stage.form) or counted(case.stage):
            problems += _fagg_running(name, got, ref)
            continue
        columns = sorted(ref.columns)
        read = _typed_rows if typed(case) else _rows
        rows, want_rows = read(got, columns), read(ref, columns)
        if name == "kafka" and case.fault.kind != "none":
            # KafkaSink is at-least-once (docs/API.md): after a recovery a row
            # may come twice, but every row comes and nothing else does, but
            # a failed attempt's value of a window with late candidates
            # (``reference.retried``)
            rows = Counter(dict.fromkeys(rows, 1))
            want_rows = Counter(dict.fromkeys(want_rows, 1))
            if "retried" in want:
                retry = Counter(dict.fromkeys(read(want["retried"], columns), 1))
                rows -= retry - want_rows
        if "maybe" in want:
            # pairs an equi-join with a state TTL may emit, each at most once
            rows -= (rows - want_rows) & Counter(dict.fromkeys(read(want["maybe"], columns), 1))
        problem = _diff(name, rows, want_rows)
        if problem:
            problems.append(problem)
    return problems


def _sessions(
    name: str, got: pd.DataFrame, ref: pd.DataFrame, allowed: pd.DataFrame, typed_rows: bool
) -> list[str]:
    """Session windows whose late candidates share keys (``late_session.py``):
    the keys without an accepted candidate exactly, each other key's sessions
    one of the outcomes its candidate allows (an ``fagg`` stage's values
    typed: its floats within the tolerance, its approximations within their
    intervals)."""
    columns = list(ref.columns)
    read = _typed_rows if typed_rows else _rows
    rows, want = read(got, columns), read(ref, columns)
    keys = {int(k) for k in allowed["k"]}
    problems = []
    problem = _diff(
        name,
        Counter({r: n for r, n in rows.items() if r[0] not in keys}),
        Counter({r: n for r, n in want.items() if r[0] not in keys}),
    )
    if problem:
        problems.append(problem)
    for key, options in allowed.groupby("k"):
        mine = Counter({r: n for r, n in rows.items() if r[0] == key})
        choices = [read(o, columns) for _, o in options.groupby("outcome")]
        if all(_diff(name, mine, choice) for choice in choices):
            # how the output differs from the outcome it differs least from
            near = min(choices, key=lambda c: sum(((c - mine) + (mine - c)).values()))
            closest = _diff(f"key {key}", mine, near)
            problems.append(
                f"{name}: key {key}'s sessions are none of the {len(choices)} outcome(s) "
                f"its late candidate allows; against the closest, {closest}"
            )
    return problems


def _spark_columns(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """``group_by(...).agg`` gives Spark's columns in Spark's order (docs/API.md
    "Aggregates"): the grouping columns as given, the window as a struct of
    ``start`` and ``end``, then the aggregates (a JSON message has no order)."""
    if got.empty or name == "kafka":
        return []
    want = output_columns(case.stage)
    if list(got.columns) != want:
        return [f"{name}: columns {list(got.columns)}, expected {want} (Spark's order)"]
    return []


def compare_partial(
    case: Case, outputs: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]
) -> list[str]:
    """For a run that stopped early (a restore refused): every committed row is
    a reference row, none committed twice (running aggregates: no update repeats)."""
    problems: list[str] = []
    for name, got in outputs.items():
        if name == "late":
            continue
        if case.stage.kind == "fagg":
            got = unnest_window(got)
        if "bounds" in want:
            bounds = want["bounds"].assign(lo=0, lo_any=0)
            kafka = name == "kafka"
            problems += _bounded(name, got, bounds, dedupe=kafka, retry=kafka)
            continue
        ref = want["main"]
        if "sessions" in want:
            # any session of any outcome a candidate allows, each once
            ref = pd.concat([ref, want["sessions"][list(ref.columns)]])
            ref = ref[~ref.astype(str).duplicated()]  # (an fagg's values may be lists)
        if (case.stage.kind == "fagg" and not case.stage.form) or counted(case.stage):
            if name != "upsert" and not got.empty and got.duplicated(["k", "n"]).any():
                problems.append(f"{name}: an update row repeats a key's count (committed twice)")
            continue
        if running(case):
            if name != "upsert" and case.stage.agg in ("sum", "count") and not got.empty:
                col = ref.columns[-1]
                if got.duplicated(["k", col]).any():
                    problems.append(
                        f"{name}: an update row repeats a key's value (committed twice)"
                    )
            continue
        columns = sorted(ref.columns)
        read = _typed_rows if typed(case) else _rows
        rows = read(got, columns)
        if "maybe" in want:
            rows -= Counter(dict.fromkeys(read(want["maybe"], columns), 1))
        if name == "kafka":  # at-least-once: a repeat is allowed
            rows = Counter(dict.fromkeys(rows, 1))
            if "retried" in want:  # and a failed attempt's window (``compare``)
                rows -= Counter(dict.fromkeys(read(want["retried"], columns), 1))
        want_rows = read(ref, columns)
        extra, lost = rows - want_rows, want_rows - rows
        _drop_fitting(lost, extra)
        if "retried" in want and name != "kafka":
            # a window that fired without a late candidate whose late output the
            # run never committed (``reference.retried``), once
            extra -= Counter(dict.fromkeys(read(want["retried"], columns), 1))
        if extra:
            problems.append(
                f"{name}: {sum(extra.values())} row(s) committed that the reference does not "
                f"hold or holds fewer times, e.g. {sorted(extra, key=repr)[:5]}"
            )
    return problems
