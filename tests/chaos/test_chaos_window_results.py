"""The tester's SQL joins of windowed GROUP BY results (docs/CHAOS.md, the
newest draws): Nexmark q8's shape (two windowed aggregates joined on their
windows) and q7's (rows interval-joined with the max or min of their window),
their DuckDB references on the hand-made rows of ``hand.py``, and that the
checker fails on a wrong outcome."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import sqlgen
from chaos_lib.case import Stage
from chaos_lib.check import compare
from chaos_lib.generate import generate
from chaos_lib.render import render

from .hand import cells, checked, hand
from .window_joins import Q7, Q7_ROWS, Q8, Q8_ROWS, q8


@pytest.mark.parametrize("how", list(Q8_ROWS))
def test_two_windowed_aggregates_joined_on_their_windows(how: str) -> None:
    """q8: the sums of ``t`` and the counts of ``u`` per key and window, joined
    on the key and both bounds; an outer side's unmatched window once, with nulls."""
    case, want = hand(q8(how))
    assert cells(want["main"], Q8) == Q8_ROWS[how]
    text = sqlgen.query(case.stage)
    assert "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))" in text
    assert "L.window_start = R.window_start AND L.window_end = R.window_end" in text
    # a lost window, a window twice and a wrong sum are mismatches
    got = checked(case, want)
    assert "1 extra" in compare(case, {"parquet": pd.concat([got, got.iloc[:1]])}, want)[0]
    wrong = got.assign(v=got["v"].fillna(0) + 1)
    assert "lost" in compare(case, {"parquet": wrong}, want)[0]


def test_hopping_windows_of_both_inputs_join_window_by_window() -> None:
    """With a slide of 1 s and a size of 2 s each row is in two windows of
    each input: the joined windows are those both inputs have, per key."""
    stage = Stage(
        "sql", agg="count", form="wrjoin", right="s1", size_ms=2_000, slide_ms=1_000,
        exprs=[["ragg", "max"]],
    )  # fmt: skip
    case, want = hand(stage)
    assert "HOP(TABLE u, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '2' SECOND)" in (
        sqlgen.query(case.stage)
    )
    # key 0: t has [-1000, 1000) and [0, 2000) with 2 rows; u's v 3 there too
    # key 1: t [0, 2000) 1 row (ts 1000), [1000, 3000) 2, [2000, 4000) 1; u [-1000, 1000)
    # and [0, 2000) with v 4, [1000, 3000) and [2000, 4000) with v 7
    assert cells(want["main"], Q8) == [
        (0, -1_000, 2, 0, -1_000, 3),
        (0, 0, 2, 0, 0, 3),
        (1, 0, 1, 1, 0, 4),
        (1, 1_000, 2, 1, 1_000, 7),
        (1, 2_000, 1, 1, 2_000, 7),
    ]


@pytest.mark.parametrize("bound", ["end", "start"])
@pytest.mark.parametrize(("agg", "keyed"), [("max", False), ("min", False), ("max", True)])
def test_rows_joined_with_the_top_of_their_window(bound: str, agg: str, keyed: bool) -> None:
    """q7: each row whose ``v`` is the max (min) of its tumbling window (per key
    or over all keys), the window's result timed by its end."""
    exprs = [["bound", bound], *([["keyed"]] if keyed else [])]
    case, want = hand(Stage("sql", agg=agg, form="wrijoin", size_ms=1_000, exprs=exprs))
    assert cells(want["main"], Q7) == Q7_ROWS[agg]
    text = sqlgen.query(case.stage)
    if bound == "end":
        assert text.endswith("WHERE e.ts BETWEEN m.we - 1000 AND m.we - 1")
    else:
        assert "AND e.ts >= m.ws AND e.ts < m.we" in text
    assert ("e.k = m.k AND e.v = m.top" in text) == keyed
    checked(case, want)


def test_the_window_of_a_row_bounds_its_join_in_the_reference() -> None:
    """A row equal to the max of another window is not joined with it: over
    windows of 1 s, v 5 (ts 1000) is no row of [0, 1000), whose max is 6."""
    rows = {"id": [1, 2, 3], "k": [0, 0, 0], "ts": [0, 999, 1_000], "v": [6, 1, 6]}
    stage = Stage("sql", agg="max", form="wrijoin", size_ms=1_000, exprs=[["bound", "end"]])
    _, want = hand(stage, rows)
    assert cells(want["main"], Q7) == [(1, 0, 1_000), (3, 1_000, 2_000)]


def test_the_window_result_joins_are_drawn_and_compile(tmp_path: Path) -> None:
    """Both shapes, each join type of q8 and both bounds of q7 come among the
    first 4,000 seeds (drawn after every older draw: the seeds before keep their
    cases); each case's script is valid Python and runs no upsert sink."""
    everything = {
        "wrjoin:inner",
        "wrjoin:left",
        "wrjoin:right",
        "wrjoin:outer",
        "wrijoin:end",
        "wrijoin:start",
    }
    seen: set[str] = set()
    for seed in range(4_000):
        if seen == everything:
            break
        case = generate(seed)
        st = case.stage
        if st.kind != "sql" or st.form not in sqlgen.WINDOW_RESULT_JOINS:
            continue
        label = st.form + ":" + (st.how if st.form == "wrjoin" else st.exprs[0][1])
        assert "upsert" not in case.sinks
        if label not in seen:
            seen.add(label)
            compile(render(case, tmp_path), f"case-{seed}.py", "exec")
    assert seen == everything
