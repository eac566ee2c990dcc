"""Late rows before Spark's ``group_by`` spelling of a window, which drops
them (tools/chaos_lib/late_groupby.py, docs/CHAOS.md): on hand-made rows,
every choice of dropped candidates passes and anything else fails; the draw
comes after every older draw; real cases under a SIGKILL and a savepoint
restored at another parallelism match."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import check, driver, reference
from chaos_lib import generate as generate_module
from chaos_lib.case import Stage
from chaos_lib.generate import generate

from .hand import ROWS, rows_of, with_and_without

# hand.ROWS (id k ts v): 1 0 0 1, 2 0 999 6, 3 1 1000 5, 4 1 2500 8, 5 0 3100 2;
# rows 2 and 4 are the late candidates here.


def _hand(monkeypatch: pytest.MonkeyPatch, late: frozenset[int] = frozenset({2, 4})) -> Any:
    """A tumbling ``group_by`` window of 1 s summing ``v`` over the hand-made
    rows, ``late`` the late candidates (rows 2 and 4 unless told); returns its
    case and a check of an output given as (k, window_start, n, sum) rows."""
    base = generate(7)
    stage = Stage("fagg", form="tumbling", size_ms=1_000, spelling="group_by", exprs=[["sum"]])
    case = dataclasses.replace(base, stage=stage, ops=[], union=[], sinks=["parquet"])
    case.sources = [dataclasses.replace(s, late_rows=1) for s in case.sources]
    monkeypatch.setattr(reference, "candidates", lambda _case: set(late))
    with rows_of(case, ROWS):
        want = reference.expected(case, set())

    def problems(rows: list[tuple[int, int, int, int]]) -> list[str]:
        got = pd.DataFrame(
            [
                {"k": k, "window": {"start": s, "end": s + 1_000}, "n": n, "a_sum": v}
                for k, s, n, v in rows
            ],
            columns=["k", "window", "n", "a_sum"],
        )
        with rows_of(case, ROWS):
            return check.compare(case, {"parquet": got}, want)

    return case, problems


def test_any_choice_of_dropped_candidates_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    case, problems = _hand(monkeypatch)
    assert "late_rows:dropped" in case.features()
    every = [(0, 0, 2, 7), (1, 1_000, 1, 5), (1, 2_000, 1, 8), (0, 3_000, 1, 2)]
    assert problems(every) == []
    # row 2 dropped from key 0's first window; row 4, its window's only row, too
    assert problems([(0, 0, 1, 1), (1, 1_000, 1, 5), (0, 3_000, 1, 2)]) == []


def test_anything_else_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _, problems = _hand(monkeypatch)
    rest = [(1, 1_000, 1, 5), (1, 2_000, 1, 8), (0, 3_000, 1, 2)]
    # row 1 is no candidate: key 0's first window without it is no outcome
    assert "no choice of dropped late rows" in problems([(0, 0, 1, 6), *rest])[0]
    assert "emitted twice" in problems([(0, 0, 2, 7), (0, 0, 2, 7), *rest])[0]
    # key 1's window at 1000 has no candidate: it may not be missing
    lost = problems([(0, 0, 2, 7), (1, 2_000, 1, 8), (0, 3_000, 1, 2)])
    assert "1 window(s) lost" in lost[0]
    assert "not expected" in problems([(0, 0, 2, 7), (0, 1_000, 1, 1), *rest])[0]


def test_candidates_no_window_holds_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # a candidate whose row a filter drops before the window (here: an id no
    # row has): no window may lose a row, and the failed attempts' outcomes
    # are none, with the aggregates' columns (no tester error)
    _, problems = _hand(monkeypatch, late=frozenset({99}))
    every = [(0, 0, 2, 7), (1, 1_000, 1, 5), (1, 2_000, 1, 8), (0, 3_000, 1, 2)]
    assert problems(every) == []
    assert "no choice of dropped late rows" in problems([(0, 0, 1, 1), *every[1:]])[0]


def test_late_rows_before_group_by_are_drawn_after_every_older_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A case with the draw is the case without it but for its sources'
    late candidates. The draws after it (over windows, window_time) are
    made no-ops on both sides."""
    changed = 0
    for seed, case, before in with_and_without(
        monkeypatch,
        generate_module.late_groupby,
        (generate_module.overs, generate_module.wtime),
        seeds=1_500,
    ):
        if "late_rows:dropped" in case.features():
            changed += 1
            for source, old in zip(case.sources, before.sources, strict=True):
                assert not old.late_rows
                source.late_rows, source.late_keys = old.late_rows, old.late_keys
        assert case.to_json() == before.to_json(), seed
    assert changed >= 5


@pytest.mark.chaos
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", [324, 743])
def test_a_real_case_with_dropped_late_rows_matches(seed: int, tmp_path: Path) -> None:
    """Seed 324: session windows and a SIGKILL; 743: tumbling windows and a
    savepoint restored at another parallelism."""
    case = generate(seed)
    assert "late_rows:dropped" in case.features()
    assert case.fault.kind == "sigkill" or case.execution.restore_parallelism != (
        case.execution.parallelism
    )
    problems, fired, _ = driver.check_case(case, tmp_path)
    assert problems == [] and fired, (problems, fired)


def test_an_agg_windows_late_output_is_still_its_late_rows() -> None:
    """Chaos seed 183543143 (a TESTER-ERROR of this draw's first version: the
    late output's reference was replaced by a flag): an ``fagg`` session
    window with a late output and candidates expects the candidates the run
    found late there."""
    case = generate(183543143)
    assert case.stage.kind == "fagg" and case.stage.late
    late = sorted(reference.candidates(case))[:1]
    want = reference.expected(case, set(late))
    assert isinstance(want["late"], pd.DataFrame)
    assert sorted(want["late"]["id"]) == late
