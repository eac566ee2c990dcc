"""Nexmark q4's closing groups in the randomized tester (tools/chaos_lib/sqlmore.py,
docs/CHAOS.md): the view ``u`` (auctions) with a per-row ``expires`` joined with
``t`` (bids) under a per-row and a constant bound, grouped by the auction and its
``expires`` (one final row per auction), and q4's running average over those rows.
Their DuckDB reference on the hand-made rows of ``hand.py``, checks that fail on a
wrong outcome, the draw, and real runs under a SIGKILL and a savepoint restored at
another parallelism."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import sqlgen
from chaos_lib.case import Case, Stage
from chaos_lib.check import compare, compare_partial
from chaos_lib.generate import generate
from chaos_lib.reference import expected
from chaos_lib.render import render

from .hand import hand, rescaled, run_through, small_case

# hand.ROWS are the bids (t): k 0 at 0 (v 1), 999 (v 6), 3100 (v 2); k 1 at 1000
# (v 5), 2500 (v 8). hand.RIGHT the auctions (u): 11 (k 0 at 500, v 3), 12 (k 1
# at 900, v 4), 13 (k 1 at 2400, v 7). With expires = ts + v % 5 * 1000: 11
# expires at 3500, 12 at 4900, 13 at 4400.


def closing(
    agg: str = "max",
    *,
    m: int = 5,
    bound: int = 2_000,
    where: str = "view",
    spelling: str = "ms",
    cond: str = "between",
    outer: int | None = None,
) -> Stage:
    exprs: list[list[Any]] = [
        ["expires", where, m, 1_000],
        ["bound", bound, spelling],
        ["cond", cond],
    ]
    if outer is not None:
        exprs.append(["outer", outer])
    return Stage("sql", agg=agg, form="closing", right="s1", exprs=exprs)


COLUMNS = ["id", "k", "expires", "final", "bids"]


def _cells(df: pd.DataFrame, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df[columns].values.tolist())


@pytest.mark.parametrize(
    ("bound", "rows"),
    [
        # 11 is bounded by ts + 2000 = 2500 before its expires: the bid at 3100 is out
        (2_000, [(11, 0, 3_500, 6, 1), (12, 1, 4_900, 8, 2), (13, 1, 4_400, 8, 1)]),
        # with 5 s the bound is past every expires: 11 has the bid at 3100 too
        (5_000, [(11, 0, 3_500, 6, 2), (12, 1, 4_900, 8, 2), (13, 1, 4_400, 8, 1)]),
    ],
)
@pytest.mark.parametrize("where", ["view", "sub"])
@pytest.mark.parametrize("cond", ["between", "cmp"])
def test_each_auction_closes_with_its_bids_between_its_time_and_expires(
    bound: int, rows: list[tuple[int, ...]], where: str, cond: str
) -> None:
    """One final row per auction with a bid in ``[ts, min(expires, ts + bound)]``
    of its key; a bid before the auction (0 for 11, 1000 for 13) is not one."""
    case, want = hand(closing(bound=bound, where=where, cond=cond, spelling="interval"))
    assert _cells(want["main"], COLUMNS) == rows
    text = sqlgen.query(case.stage)
    assert f"B.ts <= A.ts + INTERVAL '{bound // 1000}' SECOND" in text
    assert f"B.ts <= A.ts + {bound} " in sqlgen.reference_query(case.stage)
    assert text.endswith("GROUP BY A.id, A.k, A.expires")
    span = "B.ts BETWEEN A.ts AND A.expires" if cond == "between" else "B.ts >= A.ts AND "
    assert span in text
    assert ("FROM u AS A JOIN t AS B" in text) == (where == "view")
    got = want["main"]
    assert compare(case, {"parquet": got}, want) == []
    assert "1 row(s) lost" in compare(case, {"parquet": got.iloc[1:]}, want)[0]
    assert "1 extra" in compare(case, {"parquet": pd.concat([got, got.iloc[:1]])}, want)[0]
    # a group that closed before its last bid came: one bid short
    short = got.assign(bids=got["bids"] - (got["id"] == 12))
    assert "lost" in compare(case, {"parquet": short}, want)[0]
    # a refused restore: what was committed is reference rows, none twice
    assert compare_partial(case, {"parquet": got.iloc[:1]}, want) == []
    twice = compare_partial(case, {"parquet": pd.concat([got, got.iloc[:1]])}, want)
    assert "holds fewer times" in twice[0]


def test_an_auction_expiring_at_its_own_time_closes_without_a_bid() -> None:
    """expires = ts + v % 2 * 1000: auction 12 (v 4) expires at its own time, 900,
    when no bid of its key comes, so it has no row; 13's (v 7) window is [2400, 3400]."""
    _, want = hand(closing("min", m=2, bound=5_000))
    assert _cells(want["main"], COLUMNS) == [(11, 0, 1_500, 6, 1), (13, 1, 3_400, 8, 1)]


OUTER = ["k", "avg", "n", "bids"]


def test_q4s_running_average_over_the_closed_auctions() -> None:
    """Per key the average of the auctions' ``final`` (min here: 11 has 6, 12
    has 5 and 8, 13 has 8), their count ``n`` and their bids; an upsert stream,
    checked by its row of the largest ``n`` per key."""
    case, want = hand(closing("min", outer=0))
    assert _cells(want["main"], OUTER) == [(0, 6.0, 1, 1), (1, 6.5, 2, 3)]
    text = sqlgen.query(case.stage)
    assert text.startswith("SELECT Q.k AS k, avg(Q.final) AS avg, count(*) AS n")
    assert text.endswith(") AS Q GROUP BY Q.k")
    # the updates as a running GROUP BY emits them: 13 closed first, then 12
    updates = pd.DataFrame(
        {"k": [1, 0, 1], "avg": [8.0, 6.0, 6.5], "n": [1, 1, 2], "bids": [1, 1, 3]}
    )
    assert compare(case, {"parquet": updates, "upsert": want["main"]}, want) == []
    # an update committed twice, and a key whose last update is not the final value
    twice = compare(case, {"parquet": pd.concat([updates, updates.iloc[:1]])}, want)
    assert "repeat a key's count" in twice[0]
    assert "lost" in compare(case, {"parquet": updates.iloc[:2]}, want)[0]
    wrong = want["main"].assign(avg=want["main"]["avg"] + 0.5)
    assert "lost" in compare(case, {"upsert": wrong}, want)[0]
    assert compare_partial(case, {"parquet": updates.iloc[:2]}, want) == []
    assert compare_partial(case, {"parquet": pd.concat([updates, updates.iloc[:1]])}, want)


def test_the_outer_group_of_an_expression_of_the_key() -> None:
    """``GROUP BY Q.k % 2`` puts both keys' auctions in groups 0 and 1."""
    case, want = hand(closing("max", outer=2))
    assert "GROUP BY Q.k % 2" in sqlgen.query(case.stage)
    assert _cells(want["main"], OUTER) == [(0, 6.0, 1, 1), (1, 8.0, 2, 3)]


def test_the_view_gets_expires_from_with_columns(tmp_path: Path) -> None:
    """``view``: the auctions' view has the column (a DSL ``with_columns`` before
    ``create_temporary_view``), and the reference's ``u`` has it too."""
    case, _ = hand(closing(where="view"))
    text = render(case, tmp_path)
    line = 's1.with_columns(expires=ed.col("ts") + ed.col("v") % 5 * 1000)'
    assert f'{line}.name("u_expires").uid("u_expires").create_temporary_view("u")' in text
    compile(text, "case.py", "exec")
    sub, _ = hand(closing(where="sub"))
    assert 's1.create_temporary_view("u")' in render(sub, tmp_path)
    assert "(SELECT id, k, ts, ts + v % 5 * 1000 AS expires FROM u) AS A" in sqlgen.query(sub.stage)


def _closing_cases(count: int) -> list[Case]:
    return [c for c in map(generate, range(count)) if c.stage.form == "closing"]


def test_the_closing_groups_are_drawn_and_compile(tmp_path: Path) -> None:
    """Every variant comes among the first 3,000 seeds (drawn after every older
    draw: the seeds before keep their cases); no KafkaSink (a running average
    twice is an update committed twice) and an upsert sink only after q4's
    running average; no ``read_state``."""
    cases = _closing_cases(3_000)
    seen = {
        (e[0], e[1] if e[0] != "bound" else e[2])
        for c in cases
        for e in c.stage.exprs
        if e[0] != "outer"
    }
    assert seen == {
        ("expires", "view"),
        ("expires", "sub"),
        ("bound", "ms"),
        ("bound", "interval"),
        ("cond", "between"),
        ("cond", "cmp"),
    }
    outer = [c for c in cases if any(e[0] == "outer" for e in c.stage.exprs)]
    assert 0 < len(outer) < len(cases)
    assert {a for c in cases for a in [c.stage.agg]} == {"sum", "count", "min", "max"}
    for case in cases:
        assert "kafka" not in case.sinks and not case.read_state
        assert ("upsert" in case.sinks) <= (case in outer)
        assert case.stage.right in {s.name for s in case.sources}
        assert case.stage.right not in case.union
        assert "stage:sql:closing" in case.features()
    assert any("upsert" in c.sinks for c in outer)
    compile(render(outer[0], tmp_path), "case.py", "exec")


def plain(case: Case) -> bool:
    """A case whose sources are local files or memory (no broker, no Spark, no S3
    server): a base for the real runs below."""
    kinds = {s.kind for s in case.sources}
    return kinds <= {"parquet", "arrow", "collection", "sequence"} and not case.execution.s3


def _case(**fault: object) -> Case:
    """A closing case with q4's average (a view with ``expires``) at three
    subtasks over about 1,200 bids of 10 keys and 600 auctions."""
    base = next(c for c in _closing_cases(3_000) if c.execution.parallelism > 1 and plain(c))
    stage = closing("max", m=4, bound=1_500, outer=0)
    stage.exprs[0][3] = 500
    case = small_case(base, sinks=["parquet", "upsert"], fault=fault, stage=stage)
    for source in case.sources:
        source.rows, source.keys, source.span_ms, source.late_rows = 600, 10, 60_000, 0
    case.source(case.main).rows = 1_200
    return case


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_closing_groups_under_a_sigkill(tmp_path: Path) -> None:
    case = _case(kind="sigkill", kills=1)
    outputs = run_through(case, tmp_path)
    want = expected(case, set())
    assert int(want["main"]["n"].sum()) > 100
    # the check fails on a wrong average of a key
    wrong = want["main"].assign(avg=want["main"]["avg"] + 1)
    assert compare(case, outputs, {**want, "main": wrong}) != []


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_closing_groups_restored_at_another_parallelism(tmp_path: Path) -> None:
    case = rescaled(_case(kind="savepoint", fraction=0.4))
    case.stage.exprs = [e for e in case.stage.exprs if e[0] != "outer"]  # the closed rows
    case.sinks = ["parquet", "delta"]
    outputs = run_through(case, tmp_path)
    assert len(outputs["parquet"]) == len(expected(case, set())["main"]) > 100


def test_every_shrink_of_the_new_sql_draws_is_a_query() -> None:
    """Shrinking drops a stage's entries one at a time (shrink.py): each
    smaller closing or Spark-spelled case still renders both texts, and its
    reference runs."""
    from chaos_lib.shrink import _smaller

    cases = _closing_cases(400)
    cases += [c for c in map(generate, range(400)) if c.stage.spelling == "spark"][:4]
    assert len(cases) > 4
    for case in cases:
        for smaller in _smaller(case):
            if smaller.stage.exprs != case.stage.exprs:
                sqlgen.query(smaller.stage)
                expected(smaller, set())
