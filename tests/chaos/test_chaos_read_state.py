"""``ed.read_state`` in the tester (tools/chaos_lib/state.py, docs/CHAOS.md):
the final checkpoint's and a savepoint's keyed state checked against the
reference on the hand-made rows of ``hand.py``; each check fails on a wrong
table; and one real case that stops with a savepoint reads both."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import driver, state, state_ops
from chaos_lib.case import Case, Stage
from chaos_lib.generate import generate

from .hand import hand, rows_of

# hand.ROWS: key 0 has v 1 (ts 0), 6 (ts 999), 2 (ts 3100); key 1 has v 5
# (ts 1000), 8 (ts 2500).


def _final(case: Case, got: pd.DataFrame, want: dict[str, pd.DataFrame]) -> list[str]:
    with rows_of(case):
        return state.final_problems(case, got, want)


def _savepoint(
    case: Case, got: pd.DataFrame, want: dict[str, pd.DataFrame], committed: pd.DataFrame
) -> list[str]:
    with rows_of(case):
        return state.savepoint_problems(case, got, {"parquet": committed}, want)


def test_a_running_aggregates_final_state_is_its_final_value_per_key() -> None:
    case, want = hand(Stage("running", "sum"))
    good = pd.DataFrame({"k": [1, 0], "v": [13, 9]})
    assert _final(case, good, want) == []
    wrong = _final(case, good.assign(v=[13, 8]), want)
    assert len(wrong) == 1 and "1 row(s) lost, 1 extra" in wrong[0]
    assert "1 row(s) lost" in _final(case, good.iloc[:1], want)[0]


def test_a_running_agg_final_state_holds_every_aggregate() -> None:
    case, want = hand(Stage("fagg", exprs=[["sum"], ["max"]]))
    good = pd.DataFrame({"k": [0, 1], "n": [3, 2], "a_sum": [9, 13], "a_max": [6, 8]})
    assert _final(case, good, want) == []
    assert _final(case, good.assign(a_max=[6, 5]), want)


def test_no_window_is_open_in_the_final_checkpoint() -> None:
    case, want = hand(Stage("tumbling", "count", size_ms=1_000))
    empty = pd.DataFrame(columns=["k", "window_start", "window_end", "count"])
    assert _final(case, empty, want) == []
    open_ = pd.DataFrame({"k": [0], "window_start": [0], "window_end": [1_000], "count": [2]})
    assert "1 open window(s), expected none" in _final(case, open_, want)[0]


def test_a_process_functions_final_state_counts_its_fired_windows() -> None:
    """Key 0 has windows of 1 s at 0 and 3000, key 1 at 1000 and 2000: each
    fired twice, and the timers emptied the list and map states."""
    case, want = hand(Stage("process", size_ms=1_000))
    good = pd.DataFrame(
        {
            "k": [0, 1],
            "fired": [2, 2],
            "left": [None, []],
            "right": [None, None],
            "times": [[], None],
        }
    )
    assert _final(case, good, want) == []
    assert "lost" in _final(case, good.assign(fired=[2, 1]), want)[0]
    kept = good.assign(left=[[(3_000, 2)], None])
    assert "the timers should have emptied" in _final(case, kept, want)[0]


def test_a_running_savepoint_state_is_a_committed_update_below_the_final_value() -> None:
    case, want = hand(Stage("running", "sum"))
    committed = pd.DataFrame({"k": [0, 1, 0], "v": [1, 5, 7]})
    assert _savepoint(case, pd.DataFrame({"k": [0, 1], "v": [7, 5]}), want, committed) == []
    # a value no update committed (the state and the output disagree)
    problems = _savepoint(case, pd.DataFrame({"k": [0], "v": [6]}), want, committed)
    assert "no update committed to parquet" in problems[0]
    # beyond the final sum of key 0 (9)
    problems = _savepoint(case, pd.DataFrame({"k": [0], "v": [10]}), want, committed)
    assert "beyond the key's final one" in problems[0]
    # a min only falls: its partial value is at least the final one (1 for key 0)
    case, want = hand(Stage("running", "min"))
    committed = pd.DataFrame({"k": [0, 0, 0], "v": [6, 1, 0]})
    assert _savepoint(case, pd.DataFrame({"k": [0], "v": [6]}), want, committed) == []
    assert "beyond" in _savepoint(case, pd.DataFrame({"k": [0], "v": [0]}), want, committed)[0]


def test_a_savepoints_open_windows_are_windows_of_the_reference() -> None:
    case, want = hand(Stage("tumbling", "sum", size_ms=1_000))
    cols = ["k", "window_start", "window_end", "v"]
    partial = pd.DataFrame([[0, 0, 1_000, 1], [1, 2_000, 3_000, 8]], columns=cols)
    assert _savepoint(case, partial, want, pd.DataFrame()) == []
    beyond = pd.DataFrame([[0, 0, 1_000, 8]], columns=cols)  # the window's sum is 7
    assert "beyond its value" in _savepoint(case, beyond, want, pd.DataFrame())[0]
    other = pd.DataFrame([[0, 1_000, 2_000, 1]], columns=cols)  # key 0 has no such window
    assert _savepoint(case, other, want, pd.DataFrame())


def test_an_open_session_lies_within_a_final_session_of_its_key() -> None:
    """Gap 1.5 s: key 0's rows at 0 and 999 make [0, 2499); an open session
    [0, 1500) of the row at 0 alone may still grow into it."""
    case, want = hand(Stage("session", "max", gap_ms=1_500))
    cols = ["k", "window_start", "window_end", "v"]
    assert (
        _savepoint(case, pd.DataFrame([[0, 0, 1_500, 1]], columns=cols), want, pd.DataFrame()) == []
    )
    outside = pd.DataFrame([[0, 0, 4_600, 6]], columns=cols)  # spans two final sessions
    assert _savepoint(case, outside, want, pd.DataFrame())


def test_a_process_functions_partial_sums_stay_below_their_windows() -> None:
    case, want = hand(Stage("process", size_ms=1_000))
    cols = ["k", "fired", "left", "right", "times"]
    ok = pd.DataFrame([[0, 1, [(3_000, 2)], None, [3_100]]], columns=cols)
    assert _savepoint(case, ok, want, pd.DataFrame()) == []
    over = pd.DataFrame([[0, 1, [(0, 8)], None, [0]]], columns=cols)  # window [0, 1000) sums 7
    assert "beyond the reference" in _savepoint(case, over, want, pd.DataFrame())[0]
    fired = pd.DataFrame([[1, 3, None, None, None]], columns=cols)  # key 1 has two windows
    assert _savepoint(case, fired, want, pd.DataFrame())


def test_read_state_is_drawn_after_every_older_draw() -> None:
    """Only stages with keyed state draw it, a quarter of the cases or so,
    and a case with it is the case without it plus the read."""
    drawn = [generate(seed) for seed in range(400)]
    with_it = [c for c in drawn if c.read_state and state.eligible(c)]
    # the others are state_ops.py's, drawn later (test_chaos_state_ops.py)
    assert all(state_ops.eligible(c) for c in drawn if c.read_state and not state.eligible(c))
    assert 40 <= len(with_it) <= 160
    kinds = {c.stage.kind for c in with_it}
    assert {"running", "tumbling", "session", "process", "coprocess"} <= kinds
    text = with_it[0].to_json()
    assert Case.from_json(text).read_state and '"read_state": true' in text


def _first(kind: str, fault: str) -> Case:
    """The first seed's case that reads the state of a ``kind`` stage and has
    ``fault``, on a local disk, without Kafka or Spark (quick, no broker)."""
    for seed in range(5_000):
        case = generate(seed)
        slow = any(s.kind in ("kafka", "spark") for s in case.sources) or case.execution.s3
        slow |= bool({"kafka", "spark"} & set(case.sinks))
        if case.read_state and case.stage.kind == kind and case.fault.kind == fault and not slow:
            return case
    raise AssertionError(f"no {kind} case with read_state and a {fault} fault")


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["running", "process", "tumbling"])
def test_a_case_stopped_with_a_savepoint_reads_its_state(kind: str, tmp_path: Path) -> None:
    """A running aggregate, a process function and a tumbling window stopped
    with a savepoint and restored at another parallelism: both reads match."""
    case = _first(kind, "savepoint")
    for attempt in range(3):
        problems, fired, _ = driver.check_case(case, tmp_path / f"run-{attempt}")
        if fired:
            break
    assert fired and problems == [], (case.seed, problems)


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_a_wrong_state_fails_the_case(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """driver.check_case adds state.check_state's problems to the case's."""
    case = _first("process", "none")
    monkeypatch.setattr(state, "final_problems", lambda *_: ["read_state (final checkpoint): x"])
    problems, _, _ = driver.check_case(case, tmp_path / "run")
    assert problems == ["read_state (final checkpoint): x"]
