"""Several late rows of one key arriving together before a session window
(tools/chaos_lib/late_burst.py, docs/CHAOS.md): the outcomes the reference
allows on hand-made rows, the engine's outcome when the watermark moves between
two candidates of a key, a reference that holds it still failing that outcome,
the draw after every older one, and a real run under a SIGKILL."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import late_burst, reference
from chaos_lib.case import Case, Stage
from chaos_lib.check import compare
from chaos_lib.data import late_candidates, splits_of
from chaos_lib.generate import generate
from chaos_lib.late_session import joins, outcomes

from .hand import rows_of, run_through, small_case, with_and_without

GAP = 1_000
OTHERS = [(0, 1), (500, 2), (2_000, 4)]


def test_two_candidates_of_a_key_by_what_was_late() -> None:
    """Rows make [0, 1500) and [2000, 3000); candidates at 1200 then 1600.
    Neither late: one session, or the first fired and both join the second;
    the second late (the sessions fired after the first joined); both late."""
    found = late_burst.burst_outcomes(OTHERS, [(1_200, 8), (1_600, 16)], GAP)
    first, second = [(0, 1), (500, 2)], [(2_000, 4)]
    assert found == {
        frozenset(): [
            [(0, 3_000, [*first, (1_200, 8), (1_600, 16), *second])],
            [(0, 1_500, first), (1_200, 3_000, [(1_200, 8), (1_600, 16), *second])],
        ],
        frozenset({1}): [
            [(0, 3_000, [*first, (1_200, 8), *second])],
            [(0, 1_500, first), (1_200, 3_000, [(1_200, 8), *second])],
        ],
        frozenset({0, 1}): [[(0, 1_500, first), (2_000, 3_000, second)]],
    }
    # one candidate: the outcomes late_session.py gives it
    late, accepted = outcomes(OTHERS, (1_200, 8), GAP)
    assert late_burst.burst_outcomes(OTHERS, [(1_200, 8)], GAP) == {
        frozenset(): accepted,
        frozenset({0}): [late],
    }


# key 0: rows at 0, 500, 2000, 3500 and candidates 9 (1200) and 10 (2900);
# key 1 one row
ROWS = {
    "id": [1, 2, 3, 4, 5, 9, 10],
    "k": [0, 0, 0, 1, 0, 0, 0],
    "ts": [0, 500, 2_000, 700, 3_500, 1_200, 2_900],
    "v": [1, 2, 4, 5, 32, 8, 16],
}
COLUMNS = ["k", "window_start", "window_end", "v"]


@pytest.fixture
def case() -> Iterator[Case]:
    stage = Stage("session", "sum", gap_ms=GAP, late=True)
    case = dataclasses.replace(generate(7), stage=stage, ops=[], union=[], sinks=["parquet"])
    source = case.source(case.main)
    source.late_rows, source.late_keys, source.late_join = 1, False, True
    source.late_burst, source.late_spread_ms = 2, GAP
    with pytest.MonkeyPatch.context() as m, rows_of(case, ROWS):
        m.setattr(reference, "candidates", lambda _c: {9, 10})
        yield case


def _engine(order: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sessions and late output of ``ROWS`` in this order, one a batch,
    on the engine (a watermark 100 ms behind)."""
    import eddyline as ed

    by_id = {r[0]: dict(zip(ROWS, r, strict=True)) for r in zip(*ROWS.values(), strict=True)}
    env = ed.StreamEnvironment(1, batch_size=1)
    timed = env.from_collection([by_id[i] for i in order]).assign_timestamps(
        "ts", max_out_of_orderness="100ms"
    )
    tag = ed.OutputTag("late")
    windows = timed.key_by("k").window(ed.Session(f"{GAP}ms"), late_output=tag).sum("v")
    out, late = windows.collect(), windows.side_output(tag).collect()
    env.execute()
    return out.to_arrow().to_pandas(), late.to_arrow().to_pandas()


def test_the_watermark_moving_between_two_candidates(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Candidate 9 arrives at watermark 399 and joins [0, 1500), which row 3
    then extends to [0, 3000); row 5 (3500) moves the watermark to 3399, so
    that session fires, and candidate 10 (2900), whose own [2900, 3900) is
    not over, opens a session overlapping it, which row 5's merges. The
    reference allows it; one that gives both candidates one watermark does
    not (at any one watermark the first joins only if the second does too)."""
    got, late = _engine([4, 1, 2, 9, 3, 5, 10])
    assert late.empty
    key0 = got[got["k"] == 0].sort_values("window_start")[COLUMNS].values.tolist()
    assert key0 == [[0, 0, 3_000, 15], [0, 2_900, 4_500, 48]]
    want = reference.expected(case, set())
    assert compare(case, {"parquet": got, "late": late}, want) == []
    # a wrong output: the second candidate counted in the fired session too
    wrong = got.copy()
    wrong.loc[(wrong["k"] == 0) & (wrong["window_start"] == 0), "v"] = 31
    problems = compare(case, {"parquet": wrong, "late": late}, want)
    assert len(problems) == 1 and "key 0's sessions are none of" in problems[0]
    real = late_burst.burst_outcomes

    def one_watermark(
        others: list[tuple[int, int]], cands: list[tuple[int, int]], gap: int
    ) -> dict[frozenset[int], list[late_burst.Outcome]]:
        return real(others, cands, gap, one_watermark=True)

    monkeypatch.setattr(late_burst, "burst_outcomes", one_watermark)
    wrong_want = reference.expected(case, set())
    assert (
        "key 0's sessions are none of"
        in compare(case, {"parquet": got, "late": late}, wrong_want)[0]
    )


def test_a_late_second_candidate_on_the_engine(case: Case) -> None:
    """Row 5 first (watermark 3399): [0, 1500) and [2000, 3000) fired when
    candidate 9 comes (its [1200, 2200) is over, it touches no open one: late),
    and candidate 10 (2900) opens its own, merged with row 5's."""
    got, late = _engine([4, 1, 2, 3, 5, 9, 10])
    assert list(late["id"]) == [9]
    key0 = got[got["k"] == 0].sort_values("window_start")[COLUMNS].values.tolist()
    assert key0 == [[0, 0, 1_500, 3], [0, 2_000, 3_000, 4], [0, 2_900, 4_500, 48]]
    want = reference.expected(case, {9})
    assert compare(case, {"parquet": got, "late": late}, want) == []
    # the same sessions with the late output claiming the other candidate
    other = reference.expected(case, {10})
    assert compare(case, {"parquet": got, "late": late.assign(id=[10])}, other)


def test_bursts_are_drawn_after_every_older_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case with a burst is the case without the draw but for it; a key's
    candidates are rows of one split, in id order."""
    seen = 0
    for seed, case, before in with_and_without(monkeypatch, late_burst, seeds=3_000):
        main = case.source(case.main)
        if main.late_burst:
            seen += 1
            assert joins(case) and "late_rows:session_burst" in case.features()
            ids = late_candidates(main)
            assert len(ids) == main.late_rows * main.late_burst * len(splits_of(main))
            for split in splits_of(main):
                rows = [r for r in split if r["id"] in ids]
                assert all(n == main.late_burst for n in Counter(r["k"] for r in rows).values())
                for k in {r["k"] for r in rows}:  # a key's in id order: their arrival order
                    order = [r["id"] for r in rows if r["k"] == k]
                    assert order == sorted(order), seed
            main.late_burst, main.late_spread_ms = 0, 0
        assert case.to_json() == before.to_json(), seed
    assert seen >= 3, seen


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_a_real_burst_matches_after_a_sigkill(tmp_path: Path) -> None:
    stage = Stage("session", "sum", gap_ms=GAP, late=True)
    fault = {"kind": "sigkill", "kills": 1}
    case = small_case(sinks=["parquet"], fault=fault, stage=stage)
    source = case.source(case.main)
    source.late_rows, source.late_keys, source.late_join = 3, False, True
    source.late_burst, source.late_spread_ms = 3, GAP
    assert "late_rows:session_burst" in case.features()
    run_through(case, tmp_path)
