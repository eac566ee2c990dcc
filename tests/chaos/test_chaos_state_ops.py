"""``ed.read_state`` of windows' and joins' state in the tester
(tools/chaos_lib/state_ops.py, docs/CHAOS.md): the checks on the hand-made
rows of ``hand.py`` pass on the right table and fail on a wrong one; the
draw comes after every older draw; real cases stopped with a savepoint and
restored at another parallelism, or SIGKILLed, read both tables."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import generate as generate_module
from chaos_lib import state, state_ops
from chaos_lib.case import Case, Stage
from chaos_lib.generate import generate

from .hand import hand, rescaled, rows_of, run_through, small_case, with_and_without

# hand.ROWS (id k ts v): 1 0 0 1, 2 0 999 6, 3 1 1000 5, 4 1 2500 8, 5 0 3100 2;
# hand.RIGHT: 11 0 500 3, 12 1 900 4, 13 1 2400 7.

WINDOW = ["k", "window_start", "window_end"]


def _final(case: Case, uid: str, got: pd.DataFrame, want: dict[str, pd.DataFrame]) -> list[str]:
    with rows_of(case):
        return state_ops.final_problems(case, uid, got, want)


def _saved(case: Case, uid: str, got: pd.DataFrame, want: dict[str, pd.DataFrame]) -> list[str]:
    with rows_of(case):
        return state_ops.savepoint_problems(case, uid, got, want)


def _row(id_: int, k: int, ts: int, v: int) -> dict[str, int]:
    return {"id": id_, "k": k, "ts": ts, "v": v}


def _kept(*rows: tuple[str, dict[str, int], int, bool]) -> pd.DataFrame:
    """A join's state table: (side, row, time_ms, matched) per kept row."""
    return pd.DataFrame(
        [
            {
                "k": row["k"],
                "side": side,
                "left": row if side == "left" else None,
                "right": row if side == "right" else None,
                "time_ms": time_ms,
                "matched": matched,
            }
            for side, row, time_ms, matched in rows
        ]
    )


def test_an_agg_windows_open_state_lies_below_its_final_values() -> None:
    """Tumbling windows of 1 s: key 0's [0, 1000) has n 2, sum 7, min 1,
    rows 1 and 6, first k 0."""
    exprs: list[list[Any]] = [["sum"], ["min"], ["collect_list"], ["first"], ["avg"]]
    case, want = hand(Stage("fagg", form="tumbling", size_ms=1_000, exprs=exprs))
    good = {"k": 0, "window_start": 0, "n": 1, "a_sum": 6, "a_min": 6, "a_collect_list": [6]}
    good.update(a_first=0, a_avg=6.0)
    assert _saved(case, "fagg", pd.DataFrame([good]), want) == []
    for wrong in (
        {"a_sum": 8},  # beyond the window's sum
        {"a_min": 0},  # a minimum only falls
        {"a_collect_list": [6, 6]},  # not a sub-multiset of [1, 6]
        {"a_first": 1},  # first("k") is the key
        {"n": 3},  # more rows than the window has
        {"window_start": 2_000},  # key 0 has no such window
    ):
        problems = _saved(case, "fagg", pd.DataFrame([{**good, **wrong}]), want)
        assert "not within a final window of the key or beyond" in problems[0], wrong
    assert _final(case, "fagg", pd.DataFrame(columns=["k", "window_start", "n"]), want) == []
    assert "1 open window(s), expected none" in _final(case, "fagg", pd.DataFrame([good]), want)[0]


def test_an_agg_sessions_open_state_lies_within_a_final_session() -> None:
    """Gap 1.5 s: key 0's sessions are [0, 2499) and [3100, 4600)."""
    case, want = hand(Stage("fagg", form="session", gap_ms=1_500, exprs=[["max"]]))
    good = {"k": 0, "window_start": 0, "window_end": 1_500, "n": 1, "a_max": 1}
    assert _saved(case, "fagg", pd.DataFrame([good]), want) == []
    spanning = {**good, "window_end": 4_600}  # over both sessions
    assert _saved(case, "fagg", pd.DataFrame([spanning]), want)


def test_a_python_reduces_state_is_a_row_of_its_window_with_a_partial_value() -> None:
    case, want = hand(Stage("tumbling", "sum", size_ms=1_000, spelling="reduce"))
    cols = [*WINDOW, "id", "ts", "v"]
    good = pd.DataFrame([[0, 0, 1_000, 1, 0, 1]], columns=cols)
    assert _saved(case, "win", good, want) == []
    other = pd.DataFrame([[0, 0, 1_000, 3, 1_000, 1]], columns=cols)  # key 1's row, ts 1000
    assert "not of their window" in _saved(case, "win", other, want)[0]
    beyond = pd.DataFrame([[0, 0, 1_000, 1, 0, 8]], columns=cols)  # the window sums 7
    assert "beyond its value" in _saved(case, "win", beyond, want)[0]
    assert _final(case, "win", good, want)


def test_a_python_applys_state_holds_rows_of_its_window_once() -> None:
    """Gap 1.5 s: an open session [0, 1500) of key 0 holds row 1."""
    case, want = hand(Stage("session", "max", gap_ms=1_500, spelling="apply"))
    good = pd.DataFrame([[0, 0, 1_500, [_row(1, 0, 0, 1)]]], columns=[*WINDOW, "rows"])
    assert _saved(case, "win", good, want) == []
    changed = good.assign(rows=[[_row(1, 0, 0, 2)]])  # v is 1
    assert "not the reference's" in _saved(case, "win", changed, want)[0]
    foreign = good.assign(rows=[[_row(3, 1, 1_000, 5)]])  # key 1's row
    assert "not the reference's" in _saved(case, "win", foreign, want)[0]
    twice = good.assign(rows=[[_row(1, 0, 0, 1), _row(1, 0, 0, 1)]])
    assert "held by two windows" in _saved(case, "win", twice, want)[0]


def test_a_chained_windows_states_are_each_windows_own() -> None:
    """Sums over 1 s windows, then 2 s: key 0's [0, 1000) sums 7, [0, 2000) too."""
    case, want = hand(Stage("tumbling", "sum", size_ms=1_000, a=2))
    assert state_ops.uids(case) == ["win", "win2"]
    short = pd.DataFrame([[0, 0, 1_000, 6]], columns=[*WINDOW, "v"])
    long = pd.DataFrame([[0, 0, 2_000, 7]], columns=[*WINDOW, "v"])
    assert _saved(case, "win", short, want) == []
    assert _saved(case, "win2", long, want) == []
    assert _saved(case, "win", long, want)  # the first window's are 1 s long
    assert _saved(case, "win2", short, want)


def test_an_unbounded_joins_final_state_keeps_every_row_matched_by_key() -> None:
    case, want = hand(Stage("ujoin", right="s9"))
    left = [_row(1, 0, 0, 1), _row(2, 0, 999, 6), _row(3, 1, 1_000, 5)]
    left += [_row(4, 1, 2_500, 8), _row(5, 0, 3_100, 2)]
    right = [_row(11, 0, 500, 3), _row(12, 1, 900, 4), _row(13, 1, 2_400, 7)]
    rows = [("left", r, 0, True) for r in left] + [("right", r, 0, True) for r in right]
    assert _final(case, "ujoin", _kept(*rows), want) == []
    assert "1 row(s) lost" in _final(case, "ujoin", _kept(*rows[1:]), want)[0]
    unmatched = [("left", left[0], 0, False), *rows[1:]]
    assert "1 row(s) lost, 1 extra" in _final(case, "ujoin", _kept(*unmatched), want)[0]


def test_a_temporal_joins_final_state_is_each_keys_newest_version() -> None:
    case, want = hand(Stage("tjoin", right="s9"))
    newest = _kept(
        ("right", _row(11, 0, 500, 3), 500, False), ("right", _row(13, 1, 2_400, 7), 2_400, False)
    )
    assert _final(case, "tjoin", newest, want) == []
    older = _kept(
        ("right", _row(11, 0, 500, 3), 500, False), ("right", _row(12, 1, 900, 4), 900, False)
    )
    assert "1 row(s) lost, 1 extra" in _final(case, "tjoin", older, want)[0]


def test_an_interval_joins_kept_rows_are_input_rows_matched_only_with_a_partner() -> None:
    """Within (-100 ms, 600 ms): left row 1 (ts 0) has right row 11 (ts 500)
    of its key in its interval; left row 2 (ts 999) has none."""
    case, want = hand(Stage("ijoin", right="s9", lower_ms=-100, upper_ms=600, how="outer"))
    good = _kept(("left", _row(1, 0, 0, 1), 0, True), ("right", _row(11, 0, 500, 3), 500, True))
    assert _saved(case, "join", good, want) == []
    for wrong, what in (
        (("left", _row(2, 0, 999, 6), 999, True), "matched without a partner"),
        (("left", _row(2, 0, 999, 7), 999, False), "not an input row"),
        (("left", _row(2, 0, 999, 6), 0, False), "key or time"),
        (("right", _row(1, 0, 0, 1), 0, False), "not an input row"),  # a left row as right
    ):
        assert what in _saved(case, "join", _kept(wrong), want)[0], what
    twice = _kept(("left", _row(1, 0, 0, 1), 0, True), ("left", _row(1, 0, 0, 1), 0, True))
    assert "kept twice" in _saved(case, "join", twice, want)[0]
    assert "1 kept row(s), expected none" in _final(case, "join", good.iloc[:1], want)[0]


def test_a_broadcast_temporal_joins_parked_rows_are_main_rows_of_their_key() -> None:
    case, want = hand(Stage("tjoin", right="s9", spelling="broadcast"))
    good = pd.DataFrame({"k": [0], "rows": [[[1, 0, 1], [5, 3_100, 2]]]})
    assert _saved(case, "tjoin", good, want) == []
    assert "not the key's" in _saved(case, "tjoin", good.assign(k=[1]), want)[0]
    twice = good.assign(rows=[[[1, 0, 1], [1, 0, 1]]])
    assert "parked twice" in _saved(case, "tjoin", twice, want)[0]
    assert _final(case, "tjoin", good, want)


def test_read_state_of_more_operators_is_drawn_after_every_older_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A case with the new draw is the case without it (the draw made a
    no-op) plus the read; only the stages state_ops.py reads draw it. The
    draws after it (user sources, processing-time timers, late rows before
    group_by, over windows, window_time) are made no-ops on both sides."""
    new = 0
    for seed, case, before in with_and_without(
        monkeypatch,
        generate_module.state_ops,
        (
            generate_module.usersrc,
            generate_module.ptimers,
            generate_module.late_groupby,
            generate_module.overs,
            generate_module.wtime,
        ),
    ):
        if case.read_state and not before.read_state:
            new += 1
            assert state_ops.eligible(case) and not state.eligible(case)
            before.read_state = True
        assert case.to_json() == before.to_json(), seed
    assert 15 <= new <= 120


def _case(stage: Stage, fault: str, base: Case | None = None) -> Case:
    case = small_case(base, sinks=["parquet"], fault={"kind": fault, "fraction": 0.4}, stage=stage)
    case.read_state = True
    if fault == "sigkill":
        case.fault.kills = 1
    return rescaled(case) if fault == "savepoint" else case


def _two_sources() -> Case:
    """A base with two in-memory or Parquet sources (a join's inputs)."""
    for seed in range(1_000):
        case = generate(seed)
        kinds = {s.kind for s in case.sources}
        if len(case.sources) == 2 and kinds <= {"arrow", "collection", "parquet"}:
            # two subtasks: about 6 batches of 0.4 s each, so a savepoint lands mid-run
            case.execution.s3, case.execution.parallelism = False, 2
            for source in case.sources:
                source.rows = min(source.rows, 600)
            return case
    raise AssertionError("no seed with two plain sources")


REAL = {
    "fagg-session": (
        Stage("fagg", form="session", gap_ms=1_000, exprs=[["sum"], ["max"]]),
        "savepoint",
    ),
    "reduce-session": (Stage("session", "max", gap_ms=1_000, spelling="reduce"), "savepoint"),
    "apply-sliding": (
        Stage("sliding", "count", size_ms=4_000, slide_ms=2_000, spelling="apply"),
        "sigkill",
    ),
    "chained": (Stage("tumbling", "count", size_ms=2_000, a=3), "savepoint"),
    "ijoin-outer": (Stage("ijoin", lower_ms=-500, upper_ms=500, how="outer"), "savepoint"),
    "ujoin": (Stage("ujoin"), "sigkill"),
    "tjoin": (Stage("tjoin"), "savepoint"),
}


@pytest.mark.chaos
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(REAL))
def test_a_real_case_reads_its_state(name: str, tmp_path: Path) -> None:
    """Each kind's real case, stopped with a savepoint and restored at
    another parallelism (or SIGKILLed and restored), matches, both reads too."""
    stage, fault = REAL[name]
    base = None
    if stage.kind in state_ops.JOINS:
        base = _two_sources()
        stage = dataclasses.replace(stage, right=base.sources[1].name)
        if stage.kind == "tjoin":
            versions = base.sources[1]
            versions.jitter_ms, versions.files = 0, 1
    case = _case(stage, fault, base)
    run_through(case, tmp_path)
