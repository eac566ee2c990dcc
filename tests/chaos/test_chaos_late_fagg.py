"""A late row joining an open session of an ``fagg`` session window (the native
keyed window ``agg``; tools/chaos_lib/late_session.py, docs/CHAOS.md): the
outcomes the reference allows, computed with every aggregate of the stage, on the
hand-made rows of test_chaos_late_session.py; the checker takes each allowed
outcome (floats within their tolerance, approximations within their interval) and
nothing else; the engine's outcome for two arrival orders; and real runs under a
SIGKILL and a savepoint restored at another parallelism."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import reference
from chaos_lib.case import Case, Stage
from chaos_lib.check import compare, compare_partial
from chaos_lib.generate import generate
from chaos_lib.late_session import joins

from .hand import rescaled, run_through, small_case
from .test_chaos_late_session import GAP, ROWS, with_candidate

AGGS = [["sum"], ["avg"], ["collect_list"], ["first"], ["approx_count_distinct"]]
COLUMNS = ["k", "window_start", "window_end", "n", "a_sum", "a_avg", "a_collect_list", "a_first"]


@pytest.fixture
def case_and_patch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    stage = Stage("fagg", form="session", gap_ms=GAP, late=True, exprs=[list(a) for a in AGGS])
    yield from with_candidate(stage, monkeypatch)


def _sessions(rows: list[list[Any]], distinct: list[int] | None = None) -> pd.DataFrame:
    """Sessions as the engine gives them: ``k, start, end, n, sum, avg, list,
    first``, and the approximate distinct count (by default the exact one)."""
    df = pd.DataFrame(rows, columns=COLUMNS)
    counts = distinct or [len(set(r[6])) for r in rows]
    return df.assign(a_approx_count_distinct=counts)


KEY1 = [1, 700, 1_700, 1, 5, 5.0, [5], 1]
MERGED = [0, 0, 3_000, 4, 15, 3.75, [1, 2, 8, 4], 0]
"""Key 0's rows at 0, 500 and 2000 with the candidate at 1200 (v 8), in one session."""
SPLIT = [[0, 0, 1_500, 2, 3, 1.5, [1, 2], 0], [0, 1_200, 3_000, 2, 12, 6.0, [8, 4], 0]]
"""[0, 1500) fired before the candidate came: it opened [1200, 2200), merged
into the open [2000, 3000)."""


def test_the_outcomes_carry_every_aggregate(case_and_patch: Case) -> None:
    case = case_and_patch
    assert joins(case)
    want = reference.expected(case, set())
    options = want["sessions"]
    assert sorted(options["outcome"].unique().tolist()) == [0, 1]
    merged = options[options["outcome"] == 0]
    assert merged[["n", "a_sum", "a_first"]].values.tolist() == [[4, 15, 0]]
    assert merged["a_collect_list"].tolist() == [[1, 2, 4, 8]]
    assert merged["a_approx_count_distinct"].iloc[0].fits(4)


def test_the_checker_takes_any_allowed_outcome_and_nothing_else(case_and_patch: Case) -> None:
    case = case_and_patch
    want = reference.expected(case, set())
    no_late = pd.DataFrame(columns=["id", "k", "ts", "v"])
    for good in (_sessions([MERGED, KEY1]), _sessions([*SPLIT, KEY1])):
        assert compare(case, {"parquet": good, "late": no_late}, want) == []
    # an approximate count inside its interval, an average a rounding off
    near = _sessions([MERGED, KEY1], distinct=[5, 1]).assign(a_avg=[3.75 + 1e-12, 5.0])
    assert compare(case, {"parquet": near, "late": no_late}, want) == []
    # an approximation outside its interval, an average off, a list short
    far = _sessions([MERGED, KEY1], distinct=[40, 1])
    assert "none of the 2 outcome(s)" in compare(case, {"parquet": far, "late": no_late}, want)[0]
    off = _sessions([[*MERGED[:5], 3.5, *MERGED[6:]], KEY1])
    assert compare(case, {"parquet": off, "late": no_late}, want)
    short = _sessions([[*MERGED[:6], [1, 2, 8], 0], KEY1])
    assert compare(case, {"parquet": short, "late": no_late}, want)
    # the sessions as if the candidate were late, though the late output lacks it
    as_late = _sessions(
        [[0, 0, 1_500, 2, 3, 1.5, [1, 2], 0], [0, 2_000, 3_000, 1, 4, 4.0, [4], 0], KEY1]
    )
    problems = compare(case, {"parquet": as_late, "late": no_late}, want)
    assert len(problems) == 1 and "none of the 2 outcome(s)" in problems[0]
    # one outcome's session with the other's: the candidate counted twice
    mixed = _sessions([MERGED, SPLIT[1], KEY1])
    assert compare(case, {"parquet": mixed, "late": no_late}, want)
    # a key without a candidate is exact
    wrong = _sessions([MERGED, [*KEY1[:4], 6, 6.0, [6], 1]])
    assert "1 row(s) lost, 1 extra" in compare(case, {"parquet": wrong, "late": no_late}, want)[0]
    # a refused restore: any session of any outcome, none twice
    split = _sessions([*SPLIT, KEY1])
    assert compare_partial(case, {"parquet": split.iloc[:1]}, want) == []
    assert compare_partial(case, {"parquet": pd.concat([split, split.iloc[:1]])}, want)


def test_a_candidate_the_run_found_late_has_one_outcome(case_and_patch: Case) -> None:
    case = case_and_patch
    want = reference.expected(case, {9})
    assert list(want["late"]["id"]) == [9] and want["sessions"].empty
    exact = _sessions(
        [[0, 0, 1_500, 2, 3, 1.5, [1, 2], 0], [0, 2_000, 3_000, 1, 4, 4.0, [4], 0], KEY1]
    )
    assert compare(case, {"parquet": exact, "late": want["late"]}, want) == []
    assert compare(case, {"parquet": _sessions([*SPLIT, KEY1]), "late": want["late"]}, want)


def _engine(rows: list[dict[str, int]]) -> pd.DataFrame:
    """The ``agg`` sessions (gap 1 s) of ``rows``, one a batch in this order (a
    watermark 100 ms behind)."""
    import eddyline as ed
    import eddyline.functions as F

    env = ed.StreamEnvironment(1, batch_size=1)
    timed = env.from_collection(rows).assign_timestamps("ts", max_out_of_orderness="100ms")
    tag = ed.OutputTag("late")
    windows = (
        timed.key_by("k")
        .window(ed.Session(f"{GAP}ms"), late_output=tag)
        .agg(
            F.count("*").alias("n"),
            F.sum("v").alias("a_sum"),
            F.avg("v").alias("a_avg"),
            F.collect_list("v").alias("a_collect_list"),
            F.first("k").alias("a_first"),
            F.approx_count_distinct("v").alias("a_approx_count_distinct"),
        )
    )
    out, late = windows.collect(), windows.side_output(tag).collect()
    env.execute()
    assert late.to_arrow().num_rows == 0
    return out.to_arrow().to_pandas()


@pytest.mark.parametrize(
    ("order", "sessions"),
    [([4, 1, 2, 9, 3], [MERGED]), ([4, 1, 2, 3, 9], SPLIT)],
    ids=["open", "bridges-to-fired"],
)
def test_the_engines_outcome_is_one_the_reference_allows(
    case_and_patch: Case, order: list[int], sessions: list[list[Any]]
) -> None:
    case = case_and_patch
    by_id = {
        r["id"]: r
        for r in (dict(zip(ROWS, v, strict=True)) for v in zip(*ROWS.values(), strict=True))
    }
    got = _engine([by_id[i] for i in order])
    key0 = got[got["k"] == 0].sort_values("window_start")
    assert key0[COLUMNS[:6]].values.tolist() == [s[:6] for s in sessions]
    empty = pd.DataFrame(columns=["id", "k", "ts", "v"])
    assert compare(case, {"parquet": got, "late": empty}, reference.expected(case, set())) == []


def _drawn() -> list[Case]:
    return [c for c in map(generate, range(3_000)) if c.stage.kind == "fagg" and joins(c)]


def test_candidates_sharing_keys_are_drawn_before_fagg_sessions() -> None:
    """Drawn after every older draw, before ``fagg`` session windows with a late
    output only, on the main source only, no KafkaSink nor ``sum_big``."""
    drawn = _drawn()
    assert len(drawn) >= 5
    for case in drawn:
        assert "kafka" not in case.sinks and "late_rows:session_join" in case.features()
        assert all(not s.late_rows for s in case.sources if s.name != case.main)
        assert all(e[0] != "sum_big" for e in case.stage.exprs)
        assert not case.stage.spelling


def _real(**fault: object) -> Case:
    """A drawn ``fagg`` session case whose sources are local files or memory."""
    base = next(
        c
        for c in _drawn()
        if {s.kind for s in c.sources} <= {"parquet", "arrow", "collection"}
        and not c.execution.s3
        and c.execution.parallelism > 1
    )
    case = small_case(base, sinks=["parquet", "delta"], fault=fault, stage=base.stage)
    case.source(case.main).late_rows = 3
    return case


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_fagg_sessions_with_joining_late_rows_under_a_sigkill(tmp_path: Path) -> None:
    run_through(_real(kind="sigkill", kills=1), tmp_path)


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_fagg_sessions_with_joining_late_rows_restored_at_another_parallelism(
    tmp_path: Path,
) -> None:
    run_through(rescaled(_real(kind="savepoint", fraction=0.4)), tmp_path)


def test_an_fagg_late_output_goes_where_the_tester_reads_it(tmp_path: Path) -> None:
    """On S3 the tester reads the late output from the store (``STORE``, the
    bucket), where the DSL's window writes it: an ``fagg`` window wrote it to the
    local ``OUT``, so a late candidate read as none was late (run seed
    2046990831, case seed 852128864: its shrinkless case is kept in
    regressions/fagg-late-output-on-s3-852128864.json)."""
    from chaos_lib.render import render

    case = generate(852128864)
    assert case.execution.s3 and case.stage.kind == "fagg" and case.stage.late
    text = render(case, tmp_path)
    assert 'out.side_output(ed.OutputTag("late")).sink_to(ed.ParquetSink(STORE + "/late"))' in text
    assert 'ParquetSink(OUT + "/late")' not in text
