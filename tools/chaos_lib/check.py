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

from collections import Counter
from typing import Any

import pandas as pd

from .case import Case


def _rows(df: pd.DataFrame, columns: list[str]) -> Counter[tuple[Any, ...]]:
    if df.empty:
        return Counter()
    missing = [c for c in columns if c not in df.columns]
    if missing:
        return Counter({("<missing columns>", *missing): 1})
    # a null (an outer join's missing side) is -1: every generated value is >= 0
    values = [df[c].fillna(-1).astype("int64").tolist() for c in columns]
    return Counter(zip(*values, strict=True))


def _diff(name: str, got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]]) -> str | None:
    if got == want:
        return None
    lost, extra = want - got, got - want
    return (
        f"{name}: {sum(lost.values())} row(s) lost, {sum(extra.values())} extra "
        f"(of {sum(want.values())} expected); lost e.g. {sorted(lost)[:5]}, "
        f"extra e.g. {sorted(extra)[:5]}"
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


def _bounded(name: str, got: pd.DataFrame, bounds: pd.DataFrame, dedupe: bool) -> list[str]:
    """Counts of sliding windows with late candidates: each window once, its
    count within its bounds (``reference.sliding_bounds``); a window may be
    missing only when it may count nothing."""
    keys = ["k", "window_start", "window_end"]
    rows = _rows(got, [*keys, "count"])
    if dedupe:
        rows = Counter(dict.fromkeys(rows, 1))
    problems = []
    seen = Counter(r[:3] for r in rows.elements())
    twice = [w for w, n in seen.items() if n > 1]
    if twice:
        problems.append(f"{name}: {len(twice)} window(s) emitted twice, e.g. {sorted(twice)[:5]}")
    counts = {r[:3]: r[3] for r in rows}
    limits = {
        (int(b.k), int(b.window_start), int(b.window_end)): (int(b.lo), int(b.hi))
        for b in bounds.itertuples(index=False)
    }
    unknown = sorted(set(counts) - set(limits))
    if unknown:
        problems.append(f"{name}: {len(unknown)} window(s) not expected, e.g. {unknown[:5]}")
    wrong = [
        (w, counts.get(w, 0), lo, hi)
        for w, (lo, hi) in sorted(limits.items())
        if not lo <= counts.get(w, 0) <= hi
    ]
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
        ref = want["late"] if name == "late" else want["main"]
        if "bounds" in want and name != "late":
            problems += _bounded(name, got, want["bounds"], dedupe=name == "kafka")
            continue
        if case.stage.kind == "running":
            problems += _running(name, case, got, ref)
            continue
        columns = sorted(ref.columns)
        rows, want_rows = _rows(got, columns), _rows(ref, columns)
        if name == "kafka" and case.fault.kind != "none":
            # KafkaSink is at-least-once (docs/API.md): after a recovery a row
            # may come twice, but every row comes and nothing else does
            rows = Counter(dict.fromkeys(rows, 1))
            want_rows = Counter(dict.fromkeys(want_rows, 1))
        problem = _diff(name, rows, want_rows)
        if problem:
            problems.append(problem)
    return problems


def compare_partial(
    case: Case, outputs: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]
) -> list[str]:
    """For a run that stopped early (a restore refused): every committed row is
    a reference row, none committed twice (running aggregates: no update repeats)."""
    problems: list[str] = []
    for name, got in outputs.items():
        if name == "late":
            continue
        if "bounds" in want:
            bounds = want["bounds"].assign(lo=0)
            problems += _bounded(name, got, bounds, dedupe=name == "kafka")
            continue
        ref = want["main"]
        if case.stage.kind == "running":
            if name != "upsert" and case.stage.agg in ("sum", "count") and not got.empty:
                col = ref.columns[-1]
                if got.duplicated(["k", col]).any():
                    problems.append(
                        f"{name}: an update row repeats a key's value (committed twice)"
                    )
            continue
        columns = sorted(ref.columns)
        rows = _rows(got, columns)
        if name == "kafka":  # at-least-once: a repeat is allowed
            rows = Counter(dict.fromkeys(rows, 1))
        extra = rows - _rows(ref, columns)
        if extra:
            problems.append(
                f"{name}: {sum(extra.values())} row(s) committed that the reference does not "
                f"hold or holds fewer times, e.g. {sorted(extra)[:5]}"
            )
    return problems
