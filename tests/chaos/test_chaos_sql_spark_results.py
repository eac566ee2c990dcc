"""Spark's spelling of window results downstream in the randomized tester
(tools/chaos_lib/sqlmore.py, docs/CHAOS.md): ``GROUP BY window(ts, ...)`` and
``session_window`` results grouped again by ``window``, ``window.end`` or the
session's bounds, q8's join of two such results on ``window`` or ``window.end``,
and q7's rows interval-joined with their window's top, bounded by
``window.start``/``window.end``. Their DuckDB references on hand-made rows,
checks that fail on a wrong outcome, the draw, and real runs under a SIGKILL
and a restore at another parallelism."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import eddyline as ed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import sqlgen
from chaos_lib.case import Case, Stage
from chaos_lib.check import compare
from chaos_lib.generate import generate
from chaos_lib.reference import expected
from chaos_lib.render import render

from .hand import cells, checked, hand, rescaled, run_through, small_case
from .test_chaos_sql_closing import plain
from .window_joins import Q7, Q7_ROWS, Q8, Q8_ROWS, q8


def _spark(stage: Stage, *extra: list[Any]) -> Stage:
    return dataclasses.replace(stage, spelling="spark", exprs=[*stage.exprs, *extra])


REGROUP = ["window_end", "r", "n"]


@pytest.mark.parametrize("by", ["window", "end"])
def test_window_results_grouped_again_by_their_window(by: str) -> None:
    """Tumbling windows of 2 s over hand.ROWS: key 0 sums 7 in [0, 2000) and 2 in
    [2000, 4000), key 1 5 and 8; grouped again per window: 12 and 10, two keys each."""
    stage = Stage("sql", agg="sum", form="tumble", size_ms=2_000, exprs=[["regroup", "sum"]])
    case, want = hand(_spark(stage, ["by", by]))
    assert cells(want["main"], REGROUP) == [(2_000, 12, 2), (4_000, 10, 2)]
    text = sqlgen.query(case.stage)
    assert "FROM t GROUP BY window(ts, '2 seconds'), k) AS w" in text
    assert text.endswith(f"GROUP BY {'window' if by == 'window' else 'window.end'}")
    assert text.startswith("SELECT window.end AS window_end, sum(v) AS r, count(*) AS n")
    flink, flink_want = hand(dataclasses.replace(stage))
    assert "TUMBLE(TABLE t" in sqlgen.query(flink.stage)
    assert cells(flink_want["main"], REGROUP) == cells(want["main"], REGROUP)
    got = want["main"]
    assert compare(case, {"parquet": got}, want) == []
    # a window emitted twice (a running GROUP BY's second update), or a key short
    assert "1 extra" in compare(case, {"parquet": pd.concat([got, got.iloc[:1]])}, want)[0]
    short = got.assign(n=got["n"] - (got["window_end"] == 2_000))
    assert "lost" in compare(case, {"parquet": short}, want)[0]


SESSION_ROWS = {
    "id": [1, 2, 3, 4],
    "k": [0, 0, 1, 1],
    "ts": [0, 500, 500, 5_000],
    "v": [1, 2, 4, 3],
}
"""Sessions of 1 s: key 0's [0, 1500) sums 3, key 1's [500, 1500) 4 and
[5000, 6000) 3: two sessions that end together but start apart."""


def test_session_results_grouped_again_by_both_bounds() -> None:
    stage = Stage(
        "sql", agg="sum", form="session", gap_ms=1_000, spelling="spark",
        exprs=[["regroup", "max"]],
    )  # fmt: skip
    case, want = hand(stage, SESSION_ROWS)
    columns = ["window_start", "window_end", "r", "n"]
    assert cells(want["main"], columns) == [
        (0, 1_500, 3, 1),
        (500, 1_500, 4, 1),
        (5_000, 6_000, 3, 1),
    ]
    text = sqlgen.query(case.stage)
    assert "GROUP BY k, session_window(ts, '1 seconds')) AS w" in text
    assert text.endswith("GROUP BY session_window.start, session_window.end")
    got = want["main"]
    assert compare(case, {"parquet": got}, want) == []
    # the two sessions ending at 1500 as one group (grouped by the end alone)
    merged = pd.DataFrame(
        {"window_start": [0, 5_000], "window_end": [1_500, 6_000], "r": [4, 3], "n": [2, 1]}
    )
    assert "lost" in compare(case, {"parquet": merged}, want)[0]


@pytest.mark.parametrize("on", ["window", "end"])
@pytest.mark.parametrize("how", ["inner", "outer"])
def test_two_window_results_joined_on_their_window(on: str, how: str) -> None:
    """q8 in Spark's spelling: the same rows as the Flink spelling's
    (test_chaos_window_results.py), joined on the struct or on its end."""
    case, want = hand(_spark(q8(how), ["on", on]))
    assert cells(want["main"], Q8) == Q8_ROWS[how]
    text = sqlgen.query(case.stage)
    cond = "L.window = R.window" if on == "window" else "L.window.end = R.window.end"
    assert text.endswith(f"ON L.k = R.k AND {cond}")
    assert "(SELECT k, window, count(*) AS w FROM u GROUP BY window(ts, '1 seconds'), k)" in text
    checked(case, want)


@pytest.mark.parametrize("bound", ["end", "start"])
def test_rows_joined_with_the_top_of_their_window_bounded_by_the_struct(bound: str) -> None:
    stage = Stage("sql", agg="max", form="wrijoin", size_ms=1_000, exprs=[["bound", bound]])
    case, want = hand(_spark(stage))
    assert cells(want["main"], Q7) == Q7_ROWS["max"]
    text = sqlgen.query(case.stage)
    assert "(SELECT window, max(v) AS top FROM t GROUP BY window(ts, '1 seconds')) AS m" in text
    if bound == "end":
        assert text.endswith("WHERE e.ts BETWEEN m.window.end - 1000 AND m.window.end - 1")
    else:
        assert text.endswith("AND e.ts >= m.window.start AND e.ts < m.window.end")
    checked(case, want)


def test_the_spark_spellings_are_drawn_and_compile(tmp_path: Path) -> None:
    """Each spelling comes among the first 3,000 seeds; each case's script is valid."""
    everything = {
        "sql:window():regroup:window",
        "sql:window():regroup:end",
        "sql:window():regroup:session",
        "sql:window():q8:window",
        "sql:window():q8:end",
        "sql:window():q7",
    }
    seen: set[str] = set()
    for seed in range(3_000):
        case = generate(seed)
        new = everything.intersection(case.features()) - seen
        if new:
            assert "sql:window()" in case.features()
            compile(render(case, tmp_path), f"case-{seed}.py", "exec")
            seen |= new
        if seen == everything:
            break
    assert seen == everything


def test_a_projection_wider_than_its_input_with_a_bare_column_past_it_plans() -> None:
    """An engine defect the new draws met (docs/CHAOS.md): a SELECT with more
    columns than its input whose column past the input's width is a bare column
    (``R.w AS w`` is one) panicked in the SQL planner (index out of bounds). The
    generator lists ``R.w`` before ``R.window.start`` (sqlmore.spark_results_join),
    which passed it then; this shape plans now."""
    import pyarrow as pa

    env = ed.StreamEnvironment()
    env.from_arrow(pa.table({"id": [1, 2], "v": [3, 4]})).create_temporary_view("t")
    out = env.sql("SELECT id AS a, id AS b, v FROM t").collect()
    env.execute("wider projection")
    assert sorted(out.to_pylist(), key=lambda r: r["a"]) == [
        {"a": 1, "b": 1, "v": 3},
        {"a": 2, "b": 2, "v": 4},
    ]


def _window_case(stage: Stage, **fault: object) -> Case:
    """A case of ``stage`` over about 1,200 rows of 10 keys (a second source of
    600 for a join) at three subtasks; checked exactly by the tester."""
    base = next(
        c
        for c in map(generate, range(3_000))
        if c.stage.right and c.execution.parallelism == 3 and plain(c)
    )
    stage.right = base.stage.right if stage.right else ""
    case = small_case(base, sinks=["parquet", "delta"], fault=fault, stage=stage)
    for source in case.sources:
        source.rows, source.keys, source.span_ms, source.late_rows = 600, 10, 60_000, 0
        source.late_keys = source.late_join = False
    case.source(case.main).rows = 1_200
    return case


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_q8_in_spark_spelling_under_a_sigkill(tmp_path: Path) -> None:
    stage = Stage(
        "sql", agg="sum", form="wrjoin", right="x", size_ms=2_000, slide_ms=1_000,
        how="outer", spelling="spark", exprs=[["ragg", "max"], ["on", "window"]],
    )  # fmt: skip
    case = _window_case(stage, kind="sigkill", kills=1)
    outputs = run_through(case, tmp_path)
    want = expected(case, set())
    assert want["main"]["w"].isna().any() and want["main"]["v"].isna().any()
    wrong = want["main"].assign(w=want["main"]["w"] + 1)
    assert compare(case, outputs, {**want, "main": wrong}) != []


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_q7_in_spark_spelling_under_a_sigkill(tmp_path: Path) -> None:
    stage = Stage(
        "sql", agg="max", form="wrijoin", size_ms=2_000, spelling="spark",
        exprs=[["bound", "start"], ["keyed"]],
    )  # fmt: skip
    run_through(_window_case(stage, kind="sigkill", kills=1), tmp_path)


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_window_results_regrouped_restored_at_another_parallelism(tmp_path: Path) -> None:
    stage = Stage(
        "sql", agg="count", form="hop", size_ms=4_000, slide_ms=2_000, spelling="spark",
        exprs=[["regroup", "max"], ["by", "end"]],
    )  # fmt: skip
    case = rescaled(_window_case(stage, kind="savepoint", fraction=0.4))
    outputs = run_through(case, tmp_path)
    # one row per window end, 2 s apart over 60 s
    assert len(outputs["parquet"]) == len(expected(case, set())["main"]) > 25


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_session_results_regrouped_restored_at_another_parallelism(tmp_path: Path) -> None:
    stage = Stage(
        "sql", agg="sum", form="session", gap_ms=1_000, spelling="spark",
        exprs=[["regroup", "sum"]],
    )  # fmt: skip
    run_through(rescaled(_window_case(stage, kind="cancel")), tmp_path)
