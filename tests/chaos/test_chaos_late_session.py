"""A late row joining an open session (tools/chaos_lib/late_session.py,
docs/CHAOS.md): the outcomes the reference allows for a late candidate that
shares its key, on hand-made rows, and that the checker fails on any other."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import reference
from chaos_lib.case import Case, Stage
from chaos_lib.check import compare, compare_partial
from chaos_lib.data import LATE_KEY, late_candidates, splits_of
from chaos_lib.generate import generate
from chaos_lib.late_session import joins, outcomes

from .hand import rows_of

GAP = 1_000


def test_a_candidate_bridging_two_sessions_joins_both_or_the_open_one() -> None:
    """Rows at 0 and 500 make [0, 1500), one at 2000 makes [2000, 3000). A
    candidate at 1200 touches both: before the first fired (W < 1499) all are
    one session; after it, the candidate opens [1200, 2200), which the second
    (open) session merges, and the first stays as it fired; once the second
    fired too (W >= 2999) the candidate touches no open session and is late."""
    others = [(0, 1), (500, 2), (2_000, 4)]
    late, accepted = outcomes(others, (1_200, 8), GAP)
    assert late == [(0, 1_500, [(0, 1), (500, 2)]), (2_000, 3_000, [(2_000, 4)])]
    assert accepted == [
        [(0, 3_000, [(0, 1), (500, 2), (1_200, 8), (2_000, 4)])],
        [(0, 1_500, [(0, 1), (500, 2)]), (1_200, 3_000, [(1_200, 8), (2_000, 4)])],
    ]


def test_a_candidate_inside_a_session_joins_it_or_is_late() -> None:
    """A candidate at 300, inside [0, 1500): it joins the session while it is
    open and is late once it fired (its own [300, 1300) is over by then)."""
    late, accepted = outcomes([(0, 1), (500, 2)], (300, 8), GAP)
    assert late == [(0, 1_500, [(0, 1), (500, 2)])]
    assert accepted == [[(0, 1_500, [(0, 1), (300, 8), (500, 2)])]]


def test_a_candidate_after_a_fired_session_opens_its_own() -> None:
    """A candidate at 1400 touches [0, 1500) only: merged into it while it is
    open; after it fired, the candidate's own [1400, 2400) is not over before
    W reaches 2399, so it is a session of its own, overlapping the fired one."""
    _, accepted = outcomes([(0, 1), (500, 2)], (1_400, 8), GAP)
    assert accepted == [
        [(0, 2_400, [(0, 1), (500, 2), (1_400, 8)])],
        [(0, 1_500, [(0, 1), (500, 2)]), (1_400, 2_400, [(1_400, 8)])],
    ]


ROWS = {
    "id": [1, 2, 3, 4, 9],
    "k": [0, 0, 0, 1, 0],
    "ts": [0, 500, 2_000, 700, 1_200],
    "v": [1, 2, 4, 5, 8],
}
"""Key 0: the rows of the first test and the candidate (id 9) at 1200; key 1
one row, no candidate."""

COLUMNS = ["k", "window_start", "window_end", "v"]


def with_candidate(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    """A case of ``stage`` (no other operators, a Parquet sink) whose source has one
    late candidate, which shares its key and joins a session, over ``ROWS``, the
    reference taking id 9 as that candidate: the body of a ``case_and_patch`` fixture."""
    case = dataclasses.replace(generate(7), stage=stage, ops=[], union=[], sinks=["parquet"])
    source = case.source(case.main)
    source.late_rows, source.late_keys, source.late_join = 1, False, True
    monkeypatch.setattr(reference, "candidates", lambda _c: {9})
    with rows_of(case, ROWS):
        yield case


@pytest.fixture
def case_and_patch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    yield from with_candidate(Stage("session", "sum", gap_ms=GAP, late=True), monkeypatch)


def _sessions(rows: list[list[int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def test_the_checker_takes_any_allowed_outcome_and_nothing_else(case_and_patch: Case) -> None:
    case = case_and_patch
    assert joins(case)
    want = reference.expected(case, set())
    key1 = [1, 700, 1_700, 5]
    merged = _sessions([[0, 0, 3_000, 15], key1])
    split = _sessions([[0, 0, 1_500, 3], [0, 1_200, 3_000, 12], key1])
    no_late = pd.DataFrame(columns=["id", "k", "ts", "v"])
    for good in (merged, split):
        assert compare(case, {"parquet": good, "late": no_late}, want) == []
    # the sessions as if the candidate were late, though the late output lacks it
    as_late = _sessions([[0, 0, 1_500, 3], [0, 2_000, 3_000, 4], key1])
    problems = compare(case, {"parquet": as_late, "late": no_late}, want)
    assert len(problems) == 1 and "none of the 2 outcome(s)" in problems[0]
    # one outcome's first session with the other's second: the candidate counted twice
    mixed = _sessions([[0, 0, 3_000, 15], [0, 1_200, 3_000, 12], key1])
    assert compare(case, {"parquet": mixed, "late": no_late}, want)
    # a key without a candidate is exact
    wrong = _sessions([[0, 0, 3_000, 15], [1, 700, 1_700, 6]])
    assert "1 row(s) lost, 1 extra" in compare(case, {"parquet": wrong, "late": no_late}, want)[0]
    # a refused restore: any session of any outcome, none twice
    assert compare_partial(case, {"parquet": split.iloc[:1]}, want) == []
    twice = pd.concat([split, split.iloc[:1]])
    assert compare_partial(case, {"parquet": twice}, want)


def test_a_candidate_the_run_found_late_has_one_outcome(case_and_patch: Case) -> None:
    case = case_and_patch
    want = reference.expected(case, {9})
    assert list(want["late"]["id"]) == [9] and want["sessions"].empty
    late = want["late"]
    exact = _sessions([[0, 0, 1_500, 3], [0, 2_000, 3_000, 4], [1, 700, 1_700, 5]])
    assert compare(case, {"parquet": exact, "late": late}, want) == []
    split = _sessions([[0, 0, 1_500, 3], [0, 1_200, 3_000, 12], [1, 700, 1_700, 5]])
    assert compare(case, {"parquet": split, "late": late}, want)


def test_candidates_sharing_keys_are_drawn_one_a_key() -> None:
    """Drawn after every older draw, before session windows with a late
    output only, on the main source only; the n-th candidate has key n."""
    drawn = [c for c in (generate(seed) for seed in range(1_500)) if joins(c)]
    assert len(drawn) >= 5
    for case in drawn:
        assert "kafka" not in case.sinks and "late_rows:session_join" in case.features()
        main = case.source(case.main)
        assert all(not s.late_rows for s in case.sources if s.name != case.main)
        rows = [r for split in splits_of(main) for r in split]
        ids = late_candidates(main)
        keys = [r["k"] for r in rows if r["id"] in ids]
        # one key a candidate, or a burst of them (late_burst.py)
        assert len(set(keys)) * max(1, main.late_burst) == len(keys)
        shared = sorted({k for k in keys if k < LATE_KEY})
        assert shared == list(range(min(len(set(keys)), main.keys)))


def _engine(rows: list[dict[str, int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sessions (gap 1 s) and the late output of ``rows``, one a batch in
    this order, on the engine (a watermark 100 ms behind)."""
    import eddyline as ed

    env = ed.StreamEnvironment(1, batch_size=1)
    timed = env.from_collection(rows).assign_timestamps("ts", max_out_of_orderness="100ms")
    tag = ed.OutputTag("late")
    windows = timed.key_by("k").window(ed.Session(f"{GAP}ms"), late_output=tag).sum("v")
    out, late = windows.collect(), windows.side_output(tag).collect()
    env.execute()
    return out.to_arrow().to_pandas(), late.to_arrow().to_pandas()


@pytest.mark.parametrize(
    ("order", "sessions"),
    [
        # (key 1's row first: it would be late after the row at 2000)
        # the candidate before the row at 2000: nothing fired, one session
        ([4, 1, 2, 9, 3], [[0, 0, 3_000, 15]]),
        # after it (watermark 1899): [0, 1500) fired, the candidate joins [2000, 3000)
        ([4, 1, 2, 3, 9], [[0, 0, 1_500, 3], [0, 1_200, 3_000, 12]]),
    ],
    ids=["open", "bridges-to-fired"],
)
def test_the_engines_outcome_is_one_the_reference_allows(
    case_and_patch: Case, order: list[int], sessions: list[list[int]]
) -> None:
    """The engine's sessions when the candidate comes before or after the
    first session fired: each is exactly the outcome of that watermark, and
    the checker takes it."""
    case = case_and_patch
    by_id = {
        r["id"]: r
        for r in (dict(zip(ROWS, v, strict=True)) for v in zip(*ROWS.values(), strict=True))
    }
    got, late_out = _engine([by_id[i] for i in order])
    key0 = got[got["k"] == 0].sort_values("window_start")
    assert key0[COLUMNS].values.tolist() == sessions
    assert late_out.empty
    want = reference.expected(case, set())
    assert compare(case, {"parquet": got, "late": late_out}, want) == []


def test_a_candidate_whose_session_fired_is_late_on_the_engine(case_and_patch: Case) -> None:
    """A candidate at 100 once the watermark is 1899: its own [100, 1100) is
    over and the session it touches fired, so it is late, and every session
    is the batch one of the other rows."""
    case = case_and_patch
    rows = [dict(zip(ROWS, v, strict=True)) for v in zip(*ROWS.values(), strict=True)]
    candidate = {**rows[4], "ts": 100}
    got, late_out = _engine([rows[3], *rows[:3], candidate])
    assert list(late_out["id"]) == [9]
    assert got[got["k"] == 0][COLUMNS].values.tolist() == [[0, 0, 1_500, 3], [0, 2_000, 3_000, 4]]
    with rows_of(case, {**ROWS, "ts": [0, 500, 2_000, 700, 100]}):
        want = reference.expected(case, {9})
        assert compare(case, {"parquet": got, "late": late_out}, want) == []
