"""Aggregates over function outputs in the tester (tools/chaos_lib/fnaggs.py,
docs/CHAOS.md): their references on hand-made rows, running and windowed, in
the DSL's ``agg`` and in SQL; outputs of a broken engine and a deliberately
wrong reference failing the check; the draw comes after every older draw; real
runs under a SIGKILL and a savepoint restored at another parallelism."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import fnaggs, sqlgen
from chaos_lib.case import Stage
from chaos_lib.check import compare

from .hand import hand, rescaled, rows_of, run_through, small_case, with_and_without

EXPRS = [["sum_length"], ["max_abs", 5], ["avg_double"], ["count_upper", 2]]
SQL_EXPRS = [["fnaggs", ["sum_length"], ["max_abs", 5], ["min_double", 3], ["count_upper", 2]]]


def _by_key(want: dict[str, Any], keys: list[str], columns: list[str]) -> dict[Any, list[Any]]:
    main = want["main"]
    return {
        tuple(int(x) for x in r[: len(keys)]): list(r[len(keys) :])
        for r in main[keys + columns].values.tolist()
    }


def test_the_references_on_hand_made_rows() -> None:
    # hand.ROWS: key 0 has v 1, 6, 2 at 0, 999, 3100; key 1 v 5, 8 at 1000, 2500
    columns = ["n", "a_sum_length", "a_max_abs", "a_avg_double", "a_count_upper"]
    _, want = hand(Stage("fagg", exprs=EXPRS))
    assert _by_key(want, ["k"], columns) == {(0,): [3, 3, 4, 6.0, 1], (1,): [2, 2, 3, 13.0, 1]}
    _, want = hand(Stage("fagg", form="tumbling", size_ms=1_000, exprs=EXPRS))
    assert _by_key(want, ["k", "window_start"], columns) == {
        (0, 0): [2, 2, 4, 7.0, 1],
        (1, 1_000): [1, 1, 0, 10.0, 1],
        (1, 2_000): [1, 1, 3, 16.0, 0],
        (0, 3_000): [1, 1, 3, 4.0, 0],
    }
    sql = Stage("sql", "count", size_ms=1_000, form="tumble", exprs=SQL_EXPRS)
    assert sqlgen.query(sql).endswith(
        "count(*) AS count, sum(length(CAST(v AS STRING))) AS f_sum_length, "
        "max(abs(v - 5)) AS f_max_abs, min(v * 2 - 3) AS f_min_double, "
        "count(upper(CASE WHEN v % 2 = 0 THEN NULL ELSE CAST(k AS STRING) END)) "
        "AS f_count_upper FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
        "GROUP BY k, window_start, window_end"
    )
    _, want = hand(sql)
    sql_columns = ["count", "f_sum_length", "f_max_abs", "f_min_double", "f_count_upper"]
    assert _by_key(want, ["k", "window_start"], sql_columns) == {
        (0, 0): [2, 2, 4, -1, 1],
        (1, 1_000): [1, 1, 0, 7, 1],
        (1, 2_000): [1, 1, 3, 13, 0],
        (0, 3_000): [1, 1, 3, 1, 0],
    }


@pytest.mark.parametrize("form", ["", "tumbling", "sql"])
def test_a_broken_engine_and_a_wrong_reference_fail(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if form == "sql":
        stage = Stage("sql", "count", size_ms=1_000, form="tumble", exprs=SQL_EXPRS)
        column, count = "f_sum_length", "f_count_upper"
    else:
        stage = Stage("fagg", form=form, size_ms=1_000, exprs=EXPRS)
        column, count = "a_sum_length", "a_count_upper"
    case, want = hand(stage)
    got = want["main"]
    with rows_of(case):
        assert compare(case, {"parquet": got}, want) == []
        # one group's aggregate off by one (as over the wrong rows or values)
        summed = got.copy()
        summed.loc[summed.index[0], column] = int(summed[column].iloc[0]) + 1
        assert "lost" in compare(case, {"parquet": summed}, want)[0]
        # count() counting the rows the function made null
        counted = got.assign(**{count: got["n" if "n" in got else "count"]})
        assert "lost" in compare(case, {"parquet": counted}, want)[0]
    # a reference that counts nulls too fails the engine's correct output
    real = fnaggs.value
    monkeypatch.setattr(
        fnaggs, "value", lambda g, e: len(g) if e[0] == "count_upper" else real(g, e)
    )
    if form != "sql":
        _, wrong = hand(stage)
        with rows_of(case):
            assert "lost" in compare(case, {"parquet": got}, wrong)[0]


def test_the_draw_comes_after_every_older_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case with the aggregates is the case without the draw but for them."""
    seen = {"fagg": 0, "sql": 0}
    for seed, case, before in with_and_without(monkeypatch, fnaggs, seeds=1_000):
        st = case.stage
        drawn = [e for e in st.exprs if e[0] in fnaggs.FAGG or e[0] == "fnaggs"]
        if drawn:
            seen[st.kind] += 1
            assert st.kind == "fagg" or fnaggs.windowed_sql(st)
            for e in drawn:
                st.exprs.remove(e)
        assert case.to_json() == before.to_json(), seed
    assert min(seen.values()) >= 5, seen


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("form", "fault"), [("", "sigkill"), ("session", "sigkill"), ("hop", "savepoint")]
)
def test_real_aggregates_of_function_outputs_match(form: str, fault: str, tmp_path: Path) -> None:
    """A running and a session ``agg`` under a SIGKILL, a SQL ``HOP`` query
    restored from a savepoint at another parallelism."""
    if form == "hop":
        stage = Stage("sql", "sum", size_ms=4_000, slide_ms=2_000, form="hop", exprs=SQL_EXPRS)
    else:
        stage = Stage("fagg", form=form, gap_ms=1_000 if form else 0, exprs=EXPRS)
    case = small_case(sinks=["parquet", "delta"], fault={"kind": fault, "kills": 1}, stage=stage)
    case = rescaled(case) if fault == "savepoint" else case
    outputs = run_through(case, tmp_path)
    assert len(outputs["parquet"]) > 0
