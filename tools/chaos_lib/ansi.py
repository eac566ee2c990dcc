"""ANSI mode's failures in the generator (docs/API.md "Functions" and
"Aggregates"): an expression or an aggregate that fails the job on some rows
under ``StreamEnvironment(ansi=True)`` and gives null or wraps around without.

- ``ansi_cast`` (a ``fn`` stage): ``F.when(id % m == r, "x<r>")`` otherwise
  ``v`` as a string, cast to ``int``. A row with ``id % m == r`` does not
  convert: null without ANSI mode, a failed job with it.
- ``sum_big`` (an ``fagg`` stage): ``F.sum`` of ``v + 2^62`` on the rows with
  ``id % m == r`` and ``v`` on the others. A group holding two such rows leaves
  ``bigint``'s range: the sum wraps around without ANSI mode (Spark's
  non-ANSI ``sum``), and the job fails with ``ARITHMETIC_OVERFLOW`` with it.
  Every value is positive, so the running sum only grows: it overflows in any
  arrival order, batching or session merge exactly when the group's total does.

A case that must fail (``must_fail``, from the reference's rows) runs its job
script, which catches the job's ``ed.JobFailedError`` carrying the expected
marker, writes it to ``HERE/failed`` and ends normally (render.py's footer).
The check (driver.py) is then: the job failed if and only if the reference
says it must, and every row it committed before is a reference row (the
partial check of check.py, as for a refused restore).
"""

from __future__ import annotations

import random
from typing import Any

import pandas as pd

from .case import Case

BIG = 2**62
INT64 = 2**63
MARKERS = {"ansi_cast": "under ANSI mode", "sum_big": "ARITHMETIC_OVERFLOW"}
"""What the job's error says for each failing expression (cast.rs, aggregate_ansi.rs)."""


def _cast_int(text: str) -> int | None:
    return int(text) if abs(int(text)) < 2**31 else None


TEMPLATES: dict[str, tuple[Any, Any, Any]] = {
    "ansi_cast": (
        lambda r: [m := r.choice([7, 50, 400]), r.randrange(m)],
        lambda m, r: (
            f'F.when(F.col("id") % {m} == {r}, F.lit("x{r}"))'
            '.otherwise(F.col("v").cast("string")).cast("int")'
        ),
        lambda w, m, r: None if w["id"] % m == r else _cast_int(str(w["v"])),
    ),
}
"""The ``fn`` stage's failing expression (``fnlib``'s template shape: draw, DSL, reference)."""


def sum_big_call(m: int, r: int) -> str:
    big = f'F.col("v") + {BIG}'
    return f'F.sum(F.when(F.col("id") % {m} == {r}, {big}).otherwise(F.col("v")))'


def sum_big(group: pd.DataFrame, m: int, r: int, wrap: bool = True) -> int:
    """The group's sum; ``wrap``: as a ``bigint`` wraps around (else exact)."""
    ids, values = group["id"].tolist(), group["v"].tolist()
    total = sum(v + (BIG if i % m == r else 0) for i, v in zip(ids, values, strict=True))
    return (total + INT64) % (2 * INT64) - INT64 if wrap else total


def marker(case: Case) -> str:
    """What the error of a job this case may fail says ("" if it may not)."""
    if not case.execution.ansi:
        return ""
    names = {e[0] for e in case.stage.exprs if e and isinstance(e[0], str)}
    return next((MARKERS[n] for n in sorted(MARKERS) if n in names), "")


def widen(rng: random.Random, case: Case) -> None:
    """Draws a failing expression into a ``fn`` or ``fagg`` stage (after every
    older draw: earlier seeds keep their cases), in ANSI mode half the time."""
    from . import fnmore

    st = case.stage
    if st.kind == "fagg" and rng.random() < 0.3:
        m = rng.choice([7, 50, 400])
        st.exprs = [*st.exprs[:5], ["sum_big", m, rng.randrange(m)]]
        case.execution.ansi = rng.random() < 0.5
    elif st.kind == "fn" and fnmore.ansi_safe(st.exprs) and rng.random() < 0.3:
        name = "ansi_cast"
        st.exprs.append([name, *TEMPLATES[name][0](rng)])
        case.execution.ansi = rng.random() < 0.5
    if marker(case):
        # the job may fail before a savepoint or a cancel is taken: those
        # faults wait for progress the job may never make; a kill does not
        if case.fault.kind in ("savepoint", "cancel"):
            case.fault.kind = "sigkill"
        # a late candidate's row is not in the sums (check.py's partial check)
        for source in case.sources:
            source.late_rows, source.late_keys = 0, False
        st.late = False


def must_fail(case: Case) -> bool:
    """Whether the reference's rows make the case's job fail (``marker``)."""
    from . import aggs
    from .reference import functions, main_stream

    found = marker(case)
    if not found:
        return False
    st = case.stage
    if st.kind == "fn":
        exprs = [e for e in st.exprs if e[0] == "ansi_cast"]
        ids = functions(case)["id"].astype("int64")
        return any(bool((ids % m == r).any()) for _, m, r in exprs)
    (_, m, r) = next(e for e in st.exprs if e[0] == "sum_big")
    return any(
        not -INT64 <= sum_big(group, m, r, wrap=False) < INT64
        for _, group in aggs.groups(case, set(), main_stream(case))
    )
