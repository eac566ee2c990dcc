"""``ed.read_state`` in the tester (docs/read_state.md): the keyed state of a
case's stateful operator, read from the job's final checkpoint and, after a
``stop_with_savepoint``, from the savepoint, checked against the reference.

The final checkpoint of a bounded job holds every operator's final state
(FLIP-147): a running aggregate's final value per key (the reference's
``running_final``), a process function's value state ``fired`` (how many of
its key's windows fired) with its list and map states emptied by the timers,
and no open window (every window fired at the end of the input).

A savepoint is taken mid-run, so its state is a prefix of the input's, which
the reference does not know. What is exact about it: a running aggregate's
state is the last update it emitted for the key before the savepoint's barrier,
and the savepoint commits everything before it, so every (key, value) of the
state is a committed update row; a value only grows (sum, count, max: ``v``
stays positive) or only falls (min), so it lies on the near side of the final
value; an open window is one of the reference's windows (a session, within
one of the reference's sessions of its key: it may merge later) and its
accumulator lies on the near side of the window's final value; a process
function's partial sums lie below their window's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from . import state_ops
from .case import Case
from .check import _diff, _rows, _typed_rows

UIDS = {
    "running": "agg",
    "tumbling": "win",
    "sliding": "win",
    "session": "win",
    "process": "process",
    "coprocess": "coprocess",
    "fagg": "fagg",
}
"""The uid of each stage's stateful operator (render.py, aggs.py)."""


def eligible(case: Case) -> bool:
    """Whether the case's stage keeps keyed state ``read_state`` checks: the
    DSL's running and native window aggregates, the process functions, and a
    running ``agg`` (``fagg`` without a window: its windows' state holds Spark's
    spelling's projection, and a final checkpoint holds none of them anyway).
    The others (windows of ``fagg``, Python window functions, chained
    windows, joins) are ``state_ops.py``'s, drawn after every older draw."""
    st = case.stage
    if st.kind == "fagg":
        return not st.form
    if st.kind in ("tumbling", "sliding", "session") and (st.spelling or st.a):
        return False  # a Python reduce/apply (pyops.py) or a chained window (chained.py)
    return st.kind in UIDS


def check_state(
    case: Case, workdir: Path, outcome: Any, want: dict[str, pd.DataFrame]
) -> list[str]:
    """The problems of the state ``read_state`` reads after the case's run:
    the final checkpoint's (under the case's root, ``execute.root_of``: its
    folder or its S3 bucket, whose credentials the environment holds) and,
    when the case stopped with a savepoint, the savepoint's. An ``ed.EddylineError`` of the read is
    a problem of the case (the engine's), not of the tester."""
    import eddyline as ed

    from .execute import root_of

    root = root_of(case, workdir)  # a local folder, or an S3 bucket (s3.py)
    if not eligible(case):  # windows' and joins' state (state_ops.py)

        def read(where: str, uid: str) -> pd.DataFrame | str:
            try:
                return ed.read_state(f"{root}/{where}", uid).to_pandas()
            except ed.EddylineError as e:
                return f"read_state of {where}, uid {uid!r}, failed: {e}"

        savepoint = case.fault.kind == "savepoint" and outcome.fired
        return state_ops.check(case, read, savepoint, want)
    uid = UIDS[case.stage.kind]
    problems: list[str] = []
    try:
        final = ed.read_state(root + "/chk", uid).to_pandas()
    except ed.EddylineError as e:
        return [f"read_state of the final checkpoint, uid {uid!r}, failed: {e}"]
    problems += final_problems(case, final, want)
    if case.fault.kind == "savepoint" and outcome.fired:
        try:
            taken = ed.read_state(root + "/savepoint", uid).to_pandas()
        except ed.EddylineError as e:
            return [*problems, f"read_state of the savepoint, uid {uid!r}, failed: {e}"]
        problems += savepoint_problems(case, taken, outcome.outputs, want)
    return problems


def final_problems(case: Case, got: pd.DataFrame, want: dict[str, pd.DataFrame]) -> list[str]:
    """The final checkpoint's state against the reference (``want`` as
    ``reference.expected`` gives it)."""
    kind = case.stage.kind
    name = "read_state (final checkpoint)"
    if kind in ("tumbling", "sliding", "session"):
        if got.empty:
            return []
        return [f"{name}: {len(got)} open window(s), expected none: {got.head(5).values.tolist()}"]
    if kind == "running":
        columns = list(want["main"].columns)
        problem = _diff(name, _rows(got, columns), _rows(want["main"], columns))
        return [problem] if problem else []
    if kind == "fagg":
        columns = list(want["main"].columns)
        problem = _diff(name, _typed_rows(got, columns), _typed_rows(want["main"], columns))
        return [problem] if problem else []
    return _process_final(name, case, got)


def _entries(cell: Any) -> list[tuple[Any, Any]]:
    """A map state's entries (Arrow maps come to pandas as lists of pairs);
    a missing state (null) has none."""
    if _empty_value(cell):
        return []
    if isinstance(cell, dict):
        return list(cell.items())
    return [tuple(e) for e in cell]


def _empty_value(cell: Any) -> bool:
    return cell is None or (isinstance(cell, float) and math.isnan(cell))


def _empty(cell: Any) -> bool:
    """A state the timers emptied: null (removed) or an empty list or map."""
    return _empty_value(cell) or len(cell) == 0


def _process_final(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """Each key's ``fired`` is its number of windows; the timers emptied its
    map states (``left``, ``right``) and its list state (``times``)."""
    from .reference import process_windows

    windows = process_windows(case)
    fired = windows.groupby("k").size().rename("fired").reset_index()
    problems = []
    problem = _diff(name, _rows(got, ["k", "fired"]), _rows(fired, ["k", "fired"]))
    if problem:
        problems.append(problem)
    states = [c for c in ("left", "right", "times") if c in got.columns]
    if "left" not in states or "times" not in states:
        problems.append(f"{name}: columns {list(got.columns)}, expected left and times")
    left = [(int(r["k"]), c, r[c]) for _, r in got.iterrows() for c in states if not _empty(r[c])]
    if left:
        problems.append(f"{name}: state the timers should have emptied, e.g. {left[:5]}")
    return problems


NEAR = {"sum": "<=", "count": "<=", "max": "<=", "min": ">="}
"""Which side of its final value a partial aggregate lies on (``v`` > 0)."""


def _near(agg: str, partial: int, final: int) -> bool:
    return partial <= final if NEAR[agg] == "<=" else partial >= final


def savepoint_problems(
    case: Case, got: pd.DataFrame, outputs: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]
) -> list[str]:
    """The savepoint's state: what is exact about a prefix of the input
    (the module's docstring)."""
    kind = case.stage.kind
    name = "read_state (savepoint)"
    if got.empty:
        return []
    if kind in ("running", "fagg"):
        return _running_savepoint(name, case, got, outputs, want["main"])
    if kind in ("tumbling", "sliding", "session"):
        final = want["main"]
        if "sessions" in want:  # any outcome a late candidate allows (late_session.py)
            final = pd.concat([final, want["sessions"][list(final.columns)]]).drop_duplicates()
        return _window_savepoint(name, case, got, final)
    return _process_savepoint(name, case, got)


def _running_savepoint(
    name: str, case: Case, got: pd.DataFrame, outputs: dict[str, pd.DataFrame], final: pd.DataFrame
) -> list[str]:
    """A running aggregate's state: each (key, value) is a committed update
    (every append sink holds it) on the near side of the key's final value.
    ``agg`` (fagg): its row count ``n`` the same way."""
    col = "n" if case.stage.kind == "fagg" else final.columns[-1]
    agg = "count" if case.stage.kind == "fagg" else case.stage.agg
    problems = []
    ends = {int(k): int(v) for k, v in zip(final["k"], final[col], strict=True)}
    state = _rows(got, ["k", col])
    far = [(k, v, ends.get(k)) for k, v in state if k not in ends or not _near(agg, v, ends[k])]
    if far:
        problems.append(
            f"{name}: {len(far)} value(s) beyond the key's final one, e.g. (k, value, final) "
            f"{far[:5]}"
        )
    for sink, rows in outputs.items():
        if sink in ("upsert", "late"):
            continue
        committed = set(_rows(rows, ["k", col]))
        missing = sorted(set(state) - committed)
        if missing:
            problems.append(
                f"{name}: {len(missing)} (key, value) of the state no update committed to "
                f"{sink} before the savepoint, e.g. {missing[:5]}"
            )
    return problems


def _window_savepoint(name: str, case: Case, got: pd.DataFrame, final: pd.DataFrame) -> list[str]:
    """Open windows: each one of the key's final windows (a session within one
    of them), its accumulator on the near side of that window's final value."""
    col = final.columns[-1]
    keys = ["k", "window_start", "window_end"]
    ends: dict[int, list[tuple[int, int, int]]] = {}
    for k, s, e, v in _rows(final, [*keys, col]).elements():
        ends.setdefault(k, []).append((s, e, v))
    wrong = []
    for k, s, e, v in _rows(got, [*keys, col]).elements():
        if case.stage.kind == "session":
            outer = [f for f in ends.get(k, []) if f[0] <= s and e <= f[1]]
        else:
            outer = [f for f in ends.get(k, []) if (f[0], f[1]) == (s, e)]
        if not any(_near(case.stage.agg, v, f[2]) for f in outer):
            wrong.append(((k, s, e), v, outer))
    if not wrong:
        return []
    return [
        f"{name}: {len(wrong)} open window(s) not within a final window of the key or beyond "
        f"its value, e.g. (window, value, final windows) {wrong[:5]}"
    ]


def _process_savepoint(name: str, case: Case, got: pd.DataFrame) -> list[str]:
    """A process function's state: ``fired`` at most the key's windows; each
    ``left`` (``right``) entry a window start of the key with a partial sum
    (count) at most the window's."""
    from .reference import process_windows

    windows = process_windows(case)
    fired = windows.groupby("k").size().to_dict()
    sums = {(int(r.k), int(r.window_start)): (int(r.v), int(r.n)) for r in windows.itertuples()}
    wrong: list[Any] = []
    for _, row in got.iterrows():
        k = int(row["k"])
        value = row.get("fired")
        if not _empty_value(value) and int(value) > fired.get(k, 0):
            wrong.append((k, "fired", int(value)))
        for column, at in (("left", 0), ("right", 1)):
            for start, partial in _entries(row.get(column)):
                final = sums.get((k, int(start)))
                if final is None or not 0 < int(partial) <= final[at]:
                    wrong.append((k, column, int(start), int(partial), final))
    if not wrong:
        return []
    return [f"{name}: {len(wrong)} state value(s) beyond the reference, e.g. {wrong[:5]}"]
