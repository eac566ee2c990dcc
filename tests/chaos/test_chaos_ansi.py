"""The generator's newest draws (docs/CHAOS.md): ANSI mode's failing cast and
overflowing ``sum`` (a job that must fail, and must fail only then), SQL with
several aggregates per window, Spark's ``GROUP BY window(...)`` and
``session_window(...)`` and ``GROUP BY`` expressions, and ``posexplode``.
Their references on hand-made rows, checks that fail on a wrong outcome, and
one real run of each through the tester."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import ansi, driver, fnlib, sqlgen
from chaos_lib.case import Case, Op, Stage
from chaos_lib.generate import generate
from chaos_lib.render import render

from .hand import hand, rows_of


def _hand(stage: Stage, ansi_mode: bool = False) -> tuple[Case, dict[str, pd.DataFrame]]:
    return hand(stage, ansi=ansi_mode)


def _must_fail(case: Case) -> bool:
    with rows_of(case):
        return ansi.must_fail(case)


def _rows(df: pd.DataFrame) -> list[tuple[int, ...]]:
    return sorted(tuple(int(x) for x in r) for r in df.values)


def test_a_sum_past_bigint_wraps_and_must_fail_in_ansi_mode() -> None:
    # id % 2 == 1 is big: ids 1 and 3 and 5; key 0's first second holds 1 and 2
    stage = Stage("fagg", form="tumbling", size_ms=1_000, exprs=[["sum_big", 2, 1]])
    _, want = _hand(stage)
    got = {(r.k, r.window_start): r.a_sum_big for r in want["main"].itertuples()}
    assert got[(0, 0)] == 2**62 + 1 + 6
    assert got[(1, 1_000)] == 2**62 + 5
    assert not _must_fail(_hand(stage)[0]), "without ANSI mode it wraps, never fails"
    assert not _must_fail(_hand(stage, ansi_mode=True)[0]), "no group holds two big rows"
    both = dataclasses.replace(stage, exprs=[["sum_big", 1, 0]])  # every row is big
    _, want = _hand(both)
    got = {(r.k, r.window_start): r.a_sum_big for r in want["main"].itertuples()}
    assert got[(0, 0)] == 2 * 2**62 + 7 - 2**64, "the wrapped sum, as Spark's non-ANSI sum"
    case = _hand(both, ansi_mode=True)[0]
    assert _must_fail(case) and ansi.marker(case) == "ARITHMETIC_OVERFLOW"
    script = render(case, Path("/tmp/x"))
    assert "EXPECT = 'ARITHMETIC_OVERFLOW'" in script
    assert f'F.sum(F.when(F.col("id") % 1 == 0, F.col("v") + {2**62})' in script


def test_a_cast_that_does_not_convert_is_null_or_fails_in_ansi_mode() -> None:
    row = {"id": 9, "v": 12}
    assert fnlib.value(row, ["ansi_cast", 7, 2]) is None
    assert fnlib.value(row, ["ansi_cast", 7, 3]) == 12
    assert fnlib.value({"id": 1, "v": 2**40}, ["ansi_cast", 7, 3]) is None  # past int
    stage = Stage("fn", exprs=[["ansi_cast", 5, 4]])  # id 4 does not convert
    assert _must_fail(_hand(stage, ansi_mode=True)[0])
    assert not _must_fail(_hand(stage)[0])
    assert not _must_fail(_hand(dataclasses.replace(stage, exprs=[["ansi_cast", 7, 6]]), True)[0])


def test_the_job_fails_exactly_when_the_reference_says() -> None:
    must = _hand(Stage("fn", exprs=[["ansi_cast", 5, 4]]), ansi_mode=True)[0]
    never = _hand(Stage("fn", exprs=[["ansi_cast", 7, 6]]), ansi_mode=True)[0]
    with rows_of(must):
        assert driver._failure(must, "cannot cast", refused=True) == []
        assert "did not fail" in driver._failure(must, None, refused=False)[0]
        assert driver._failure(must, None, refused=True) == [], "a refused restore stops early"
        assert "no reference value fails" in driver._failure(never, "cannot cast", False)[0]
        assert driver._failure(never, None, refused=False) == []


def test_several_aggregates_and_sparks_window_grouping_in_sql() -> None:
    stage = Stage(
        "sql", agg="sum", form="tumble", size_ms=1_000, spelling="spark", exprs=[["aggs", "max"]]
    )
    assert sqlgen.query(stage) == (
        "SELECT k, window.start AS window_start, window.end AS window_end, sum(v) AS v, "
        "max(v) AS a_max FROM t GROUP BY window(ts, '1 seconds'), k"
    )
    _, want = _hand(stage)
    assert _rows(want["main"][["k", "window_start", "v", "a_max"]]) == [
        (0, 0, 7, 6),
        (0, 3_000, 2, 2),
        (1, 1_000, 5, 5),
        (1, 2_000, 8, 8),
    ]
    hop = dataclasses.replace(stage, form="hop", slide_ms=1_000, size_ms=2_000)
    assert "GROUP BY window(ts, '2 seconds', '1 seconds'), k" in sqlgen.query(hop)


def test_sparks_session_window_filters_before_the_sessions() -> None:
    # v % 2 <> 0 keeps ids 1 and 3: each its own session, not the end of one
    # that id 2 (v 6) would have stretched to 2,499
    stage = Stage(
        "sql",
        agg="count",
        form="session",
        gap_ms=1_500,
        spelling="spark",
        exprs=[["where", "mod", 2, 0]],
    )
    assert sqlgen.query(stage).endswith(
        "FROM t WHERE v % 2 <> 0 GROUP BY session_window(ts, '1 seconds'), k"
    )
    _, want = _hand(stage)
    assert _rows(want["main"][["k", "window_start", "window_end", "count"]]) == [
        (0, 0, 1_500, 1),
        (1, 1_000, 2_500, 1),
    ]


def test_window_results_grouped_again_by_their_end() -> None:
    stage = Stage("sql", agg="sum", form="tumble", size_ms=2_000, exprs=[["regroup", "max"]])
    assert sqlgen.query(stage).startswith(
        "SELECT window_end, max(v) AS r, count(*) AS n FROM (SELECT k, window_start, "
    )
    _, want = _hand(stage)
    # key 0: 1 + 6 in [0, 2000), 2 in [2000, 4000); key 1: 5, then 8
    assert _rows(want["main"][["window_end", "r", "n"]]) == [(2_000, 7, 2), (4_000, 8, 2)]


def test_a_running_group_by_an_expression() -> None:
    stage = Stage("sql", agg="sum", form="group", exprs=[["gexpr", 2]])
    assert sqlgen.query(stage) == "SELECT k % 2 AS k, sum(v) AS v FROM t GROUP BY k % 2"
    _, want = _hand(stage)
    assert _rows(want["main"]) == [(0, 9), (1, 13)]


def test_posexplode_is_rendered_both_ways() -> None:
    case = dataclasses.replace(generate(7), ops=[Op("explode", a=3, b=2)])
    script = render(case, Path("/tmp/x"))
    assert 'F.array(F.col("v"), F.col("v"), F.col("v"))' in script
    assert 'posexplode("e", pos="p")' in script
    case = dataclasses.replace(case, ops=[Op("explode", a=2, b=3)])
    assert 'F.posexplode("e").alias("p", "e")' in render(case, Path("/tmp/x"))
    assert "op:explode:pos" in case.features()


RUNS = {
    "ansi-sum-fails": (
        Stage("fagg", form="session", gap_ms=1_000, exprs=[["sum_big", 7, 6]]),
        True,
        [],
    ),
    "ansi-cast-fails": (Stage("fn", exprs=[["ansi_cast", 7, 2], ["upper"]]), True, []),
    "sum-wraps": (Stage("fagg", form="", exprs=[["sum_big", 7, 6]]), False, []),
    "posexplode": (Stage("none"), False, [Op("explode", 2, 2), Op("explode", 3, 3)]),
    "sql-regroup": (
        Stage(
            "sql",
            agg="max",
            form="hop",
            size_ms=4_000,
            slide_ms=2_000,
            exprs=[["regroup", "sum"]],
        ),
        False,
        [],
    ),
    "sql-window": (
        Stage(
            "sql",
            agg="min",
            form="session",
            gap_ms=1_000,
            spelling="spark",
            exprs=[["where", "mod", 3, 0], ["aggs", "count", "sum"]],
        ),
        False,
        [],
    ),
}


@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_new_draw_runs_through_the_tester(name: str, tmp_path: Path) -> None:
    """The engine against the reference for each draw, under a SIGKILL and a
    restore (the generator's own sources and rows)."""
    stage, ansi_mode, ops = RUNS[name]
    base = generate(472)  # an Arrow source of a few thousand rows, three subtasks
    case = dataclasses.replace(
        base,
        stage=stage,
        ops=ops,
        union=[],
        read_state=False,  # drawn for the base's own stage
        sinks=["parquet", "delta"],
        execution=dataclasses.replace(base.execution, ansi=ansi_mode, workers=0),
        fault=dataclasses.replace(base.fault, kind="sigkill", kills=1),
    )
    case.sources = [s for s in case.sources if s.name == case.main]
    assert ansi.must_fail(case) == ansi_mode
    problems, _, _ = driver.check_case(case, tmp_path)
    assert problems == []
    assert (tmp_path / "failed").exists() == ansi_mode
